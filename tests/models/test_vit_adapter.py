"""ViT-Adapter on mmlape's ViT."""
import pytest
import torch
from conftest import ROOT, build_classifier, save_backbone_checkpoint

from mmlape.models import LaPEViT, LaPEViTAdapter


def adapter(pe_join='LaPE', **kwargs):
    kwargs.setdefault('init_values', 0.1)  # non-zero so injectors learn
    return LaPEViTAdapter('test-tiny', img_size=64, pe_join=pe_join, **kwargs)


def perturb_deformable_attention(model, std=0.01):
    from mmlape.models.layers.adapter import DeformAttn
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, DeformAttn):
                m.sampling_offsets.weight.normal_(0, std)
                m.attention_weights.weight.normal_(0, std)


@pytest.mark.parametrize('hw', [(64, 64), (96, 64), (64, 128)])
@pytest.mark.parametrize('source', ['last', 'per_interaction'])
def test_pyramid_shapes_and_strides(hw, source):
    model = adapter(vit_feature_source=source).eval()
    with torch.no_grad():
        feats = model(torch.randn(2, 3, *hw))
    assert len(feats) == 4
    for feat, stride in zip(feats, (4, 8, 16, 32)):
        assert feat.shape == (2, 64, hw[0] // stride, hw[1] // stride)


def test_sliced_blocks_equal_one_full_vit_pass():
    """With injector and extractor bypassed, the adapter's per-interaction
    calls of forward_blocks compute exactly the classifier's ViT."""
    model = adapter(pe_join='LaPE').eval()
    vit = LaPEViT(
        'test-tiny',
        img_size=64,
        patch_size=16,
        pe_join='LaPE',
        with_cls_token=False,
        out_type='raw',
        final_norm=False,
        layer_scale_init_value=1.0).eval()
    vit.load_state_dict(
        {
            k: v
            for k, v in model.state_dict().items() if k in vit.state_dict()
        },
        strict=True)
    for layer in model.interactions:
        layer.injector.forward = lambda query, feat, inputs: query
    captured = {}
    last = model.interactions[-1]
    original = last.extract

    def spy(c, x, inputs, shapes):
        captured['x'] = x
        return original(c, x, inputs, shapes)

    last.extract = spy
    img = torch.randn(2, 3, 96, 64)
    with torch.no_grad():
        model(img)
        full = vit(img)[0]
    assert model.interaction_indexes == [[0, 0], [1, 1], [2, 2], [3, 3]]
    torch.testing.assert_close(captured['x'], full)


def test_window_attention_and_layer_scale():
    model = adapter(window_size=[2, 0, 2, 0])
    assert model.blocks[0].attn.window_size == 2
    assert model.blocks[1].attn.window_size == 0
    assert model.blocks[0].layer_scale
    assert torch.equal(model.blocks[0].gamma1.data, torch.ones(64))
    with torch.no_grad():
        assert model.eval()(torch.randn(1, 3, 96,
                                        64))[0].shape[-2:] == (24, 16)


def test_adapter_norms_come_from_config():
    bn = adapter(adapter_norm_cfg=dict(type='BN'))
    gn = adapter(adapter_norm_cfg=dict(type='GN', num_groups=8))
    sync = adapter(adapter_norm_cfg=dict(type='SyncBN'))
    assert isinstance(bn.norm1, torch.nn.BatchNorm2d)
    assert isinstance(gn.spm.stem[1], torch.nn.GroupNorm)
    assert isinstance(sync.norm4, torch.nn.SyncBatchNorm)


def test_deformable_attention_has_no_implicit_residual():
    attn = adapter().interactions[0].injector.attn
    q = torch.randn(1, 16, 64)
    shapes = torch.tensor([[8, 8], [4, 4], [2, 2]])
    starts = torch.tensor([0, 64, 80])
    ref = torch.rand(1, 16, 1, 2)
    feat = torch.randn(1, 84, 64)
    out = attn(q, ref, feat, shapes, starts)
    # The output is the projected sample only: zeroing the output
    # projection zeroes the result (mmcv's op would return the query).
    with torch.no_grad():
        attn.output_proj.weight.zero_()
        attn.output_proj.bias.zero_()
    assert out.abs().sum() > 0
    assert attn(q, ref, feat, shapes, starts).abs().sum() == 0


def test_bad_input_and_options():
    with pytest.raises(ValueError, match='divisible by 32'):
        adapter()(torch.randn(1, 3, 48, 64))
    with pytest.raises(ValueError, match='vit_feature_source'):
        adapter(vit_feature_source='first')
    with pytest.raises(ValueError, match='fixed by ViT-Adapter'):
        adapter(with_cls_token=True)
    with pytest.raises(ValueError, match='incompatible with a class token'):
        LaPEViT('test-tiny', pe_join='MPVG')
    with pytest.raises(ValueError, match='interaction_indexes'):
        adapter(interaction_indexes=[[0, 1], [3, 3]])


def test_loads_classifier_checkpoint_exactly(tmp_path):
    """An mmlape ImageNet checkpoint (class token, 224 grid) initialises the
    adapter's ViT: PE resized and class-token row dropped, every ViT weight
    copied."""
    src = LaPEViT('test-tiny', img_size=32, patch_size=16, pe_join='LaPE')
    for p in src.parameters():
        p.data.normal_()
    path = tmp_path / 'cls.pth'
    save_backbone_checkpoint(src, path, meta={})
    model = adapter(
        init_cfg=dict(
            type='Pretrained', checkpoint=str(path), prefix='backbone.'))
    model.init_weights()
    own = model.state_dict()
    unused = {k for k in src.state_dict() if k not in own}
    assert unused == {'cls_token', 'norm.weight', 'norm.bias'}
    for key, value in src.state_dict().items():
        if key in unused:
            continue
        if key == 'pos_embed':
            from mmlape.models import resize_pos_embed
            want = resize_pos_embed(
                value[:, 1:], (2, 2), (4, 4), num_extra_tokens=0)
            torch.testing.assert_close(own[key], want)
        else:
            torch.testing.assert_close(own[key], value, msg=key)
    with pytest.raises(ValueError, match='does not fit the join'):
        adapter(
            pe_join='PVG',
            init_cfg=dict(
                type='Pretrained', checkpoint=str(path),
                prefix='backbone.')).init_weights()


def test_layer_decay_for_upernet_config():
    """mmseg's own layer-decay constructor does not know this backbone;
    mmlape's reads backbone.get_layer_depth. Blocks decay by depth, the
    decode head and the adapter's own modules get the full lr."""
    import os.path as osp

    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import DefaultScope
    from mmseg.registry import MODELS
    from mmseg.utils import register_all_modules

    root = ROOT
    cfg = Config.fromfile(
        osp.join(
            root, 'configs/vit_adapter/upernet_vit-adapter-tiny-lape_'
            '8xb2-160k_ade20k-512x512.py'))
    cfg.model.backbone.update(
        arch='test-tiny',
        init_cfg=None,
        deform_num_heads=2,
        adapter_norm_cfg=dict(type='BN'),
        interaction_indexes=[[0, 0], [1, 1], [2, 2], [3, 3]])
    cfg.model.decode_head.in_channels = [64] * 4
    cfg.model.auxiliary_head.in_channels = 64
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope('mmseg'):
        model = MODELS.build(cfg.model)
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    lr = {g['param_name']: g['lr'] for g in wrapper.optimizer.param_groups}
    base, rate = 12e-5, 0.95  # test-tiny: 4 layers, depths 0..5
    assert lr['backbone.pos_embed'] == pytest.approx(base * rate**5)
    assert lr['backbone.blocks.0.attn.qkv.weight'] == pytest.approx(base *
                                                                    rate**4)
    assert lr['backbone.blocks.3.pe_norm.weight'] == pytest.approx(base * rate)
    assert lr['backbone.spm.fc1.weight'] == pytest.approx(base)
    assert lr['decode_head.conv_seg.weight'] == pytest.approx(base)
    decay = {
        g['param_name']: g['weight_decay']
        for g in wrapper.optimizer.param_groups
    }
    # decayed, as in the official runs (docs/recipes.md)
    assert decay['backbone.pos_embed'] == 0.01
    assert decay['backbone.blocks.0.pe_norm.weight'] == 0
    assert decay['backbone.blocks.0.attn.qkv.weight'] == 0.01


def test_loads_official_timm_checkpoint(tmp_path):
    """An official DeiT/LaPE file ({'model': timm-named state dict} with a
    classifier head) initialises the adapter directly: its format is
    detected and converted on loading."""
    src = LaPEViT('test-tiny', img_size=32, patch_size=16, pe_join='LaPE')
    for p in src.parameters():
        p.data.normal_()
    official = dict(src.state_dict())
    official.update({
        'head.weight': torch.randn(10, 64),
        'head.bias': torch.randn(10)
    })
    path = tmp_path / 'deit_tiny_lape.pth'
    torch.save({'model': official}, path)
    model = adapter(init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    torch.testing.assert_close(model.blocks[2].pe_norm.weight,
                               src.blocks[2].pe_norm.weight)
    torch.testing.assert_close(model.blocks[1].attn.qkv.weight,
                               src.blocks[1].attn.qkv.weight)


# ----------------------------------------------------------------------
# MPVG's last-norm term in ViT-Adapter (final_norm=True, reading (b) of
# docs/recipes.md)
def mpvg_classifier_checkpoint(tmp_path):
    """An mmlape MPVG ImageNet classifier (test size, distinct values),
    saved as the runner saves it."""
    clf = build_classifier(
        dict(
            type='LaPEViT',
            arch='test-tiny',
            img_size=64,
            pe_join='MPVG',
            with_cls_token=False,
            out_type='avg_featmap'),
        dict(type='LinearClsHead', num_classes=10, in_channels=64))
    with torch.no_grad():
        for p in clf.parameters():
            p.normal_(0.5 if p.dim() == 1 else 0., 0.3)
    path = tmp_path / 'deit-mpvg.pth'
    torch.save({'state_dict': clf.state_dict(), 'meta': {}}, path)
    init = dict(type='Pretrained', checkpoint=str(path), prefix='backbone.')
    return clf.backbone.state_dict(), init


def mpvg_and_pvg(tmp_path, **kwargs):
    """Reading (b) and reading (a) of the same MPVG checkpoint, with the
    same adapter weights."""
    src, init = mpvg_classifier_checkpoint(tmp_path)
    mpvg = adapter('MPVG', final_norm=True, init_cfg=init, **kwargs)
    mpvg.init_weights()
    pvg = adapter('PVG', init_cfg=init, **kwargs)
    pvg.init_weights()
    missing, unexpected = pvg.load_state_dict(mpvg.state_dict(), strict=False)
    assert not missing
    assert sorted(unexpected) == [
        'norm.bias', 'norm.weight', 'pe_join.last_norm.bias',
        'pe_join.last_norm.weight'
    ]
    return src, mpvg.eval(), pvg.eval()


def spy_last_tokens(model):
    """Record ``x_L``, the raw tokens the last extractor reads."""
    captured = {}
    last = model.interactions[-1]
    original = last.extract

    def spy(c, x, inputs, shapes):
        captured['x'] = x
        return original(c, x, inputs, shapes)

    last.extract = spy
    return captured


def bn_scale(bn):
    """An eval-mode BatchNorm is ``x * scale + shift``: the scale."""
    return (bn.weight / torch.sqrt(bn.running_var + bn.eps))[None, :, None,
                                                             None]


def test_mpvg_last_norm_loads_checkpoint_and_changes_the_pyramid(tmp_path):
    """final_norm=True loads the checkpoint's ``norm`` and
    ``pe_join.last_norm`` and adds ``LN(x_L) + LN'_last(pos_0)``, instead
    of ``x_L``, to every pyramid level (detection's 'last' source)."""
    import torch.nn.functional as F

    from mmlape.models import resize_pos_embed
    src, mpvg, pvg = mpvg_and_pvg(tmp_path)
    own = mpvg.state_dict()
    for key in ('norm.weight', 'norm.bias', 'pe_join.last_norm.weight',
                'pe_join.last_norm.bias'):
        torch.testing.assert_close(own[key], src[key], msg=key)
    captured = spy_last_tokens(mpvg)
    img = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        got, base = mpvg(img), pvg(img)
    x = captured['x']  # (2, 4 * 6, 64)
    pos = resize_pos_embed(
        src['pos_embed'], (4, 4), (4, 6), num_extra_tokens=0)
    want = F.layer_norm(x, (64, ), src['norm.weight'],
                        src['norm.bias'], 1e-6) + F.layer_norm(
                            pos, (64, ), src['pe_join.last_norm.weight'],
                            src['pe_join.last_norm.bias'], 1e-6)
    delta = (want - x).transpose(1, 2).reshape(2, 64, 4, 6)
    # the 1/16 level adds the ViT feature as it is
    torch.testing.assert_close(
        got[2] - base[2], delta * bn_scale(mpvg.norm3), rtol=1e-4, atol=1e-4)
    for level, (g, b) in enumerate(zip(got, base)):
        assert (g - b).abs().mean() > 0.1, level


def test_mpvg_last_norm_per_interaction_changes_only_x_L(tmp_path):
    """Segmentation's source: levels 1-3 add x_3, x_6, x_9 unchanged; only
    the level fed by x_L gets the last-norm term."""
    _, mpvg, pvg = mpvg_and_pvg(tmp_path, vit_feature_source='per_interaction')
    img = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        got, base = mpvg(img), pvg(img)
    for level in range(3):
        torch.testing.assert_close(got[level], base[level])
    assert (got[3] - base[3]).abs().mean() > 0.1


def test_mpvg_last_norm_trains_and_validates():
    model = adapter('MPVG', final_norm=True)
    perturb_deformable_attention(model)
    feats = model(torch.randn(2, 3, 64, 64))
    sum((f * torch.randn_like(f)).sum() for f in feats).backward()
    for name in ('norm.weight', 'pe_join.last_norm.weight', 'pos_embed'):
        assert model.get_parameter(name).grad.abs().sum() > 0, name
    with pytest.raises(ValueError, match='needs final_norm=True'):
        adapter('MPVG')
    with pytest.raises(ValueError, match='add_vit_feature'):
        adapter('MPVG', final_norm=True, add_vit_feature=False)
    with pytest.raises(TypeError, match='final_norm'):
        adapter('MPVG', final_norm='yes')
