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
        LaPEViT('test-tiny', pe_join='MPVG', with_cls_token=True)
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
    model = adapter('MPVG')
    assert model.final_norm  # MPVG's last-norm term takes the final norm
    assert not adapter('PVG').final_norm  # the official ViT-Adapter's
    perturb_deformable_attention(model)
    feats = model(torch.randn(2, 3, 64, 64))
    sum((f * torch.randn_like(f)).sum() for f in feats).backward()
    for name in ('norm.weight', 'pe_join.last_norm.weight', 'pos_embed'):
        assert model.get_parameter(name).grad.abs().sum() > 0, name
    with pytest.raises(ValueError, match='needs final_norm=True'):
        adapter('MPVG', final_norm=False)
    with pytest.raises(ValueError, match='needs final_norm=True'):
        adapter('MPVG', add_vit_feature=False)
    with pytest.raises(ValueError, match='add_vit_feature'):
        adapter('MPVG', final_norm=True, add_vit_feature=False)
    with pytest.raises(TypeError, match='final_norm'):
        adapter('MPVG', final_norm='yes')


# ----------------------------------------------------------------------
# ViT-Adapter-Ti/S/B: the official architecture, a DeiT of each size

#: The official backbones' parameters by part: czczup/ViT-Adapter at
#: fd64a5190f9f, its ``ViTAdapter`` built with the arguments of
#: ``detection/configs/mask_rcnn/mask_rcnn_deit_adapter_{size}_fpn_3x_coco.py``
#: (the segmentation class and configs give the same counts): the ViT
#: (patch embedding and blocks, layer scale included), its PE (DeiT's 197
#: rows, the class row unused) and the adapter (``level_embed``, ``spm``,
#: ``interactions``, ``up``, ``norm1``-``norm4``).
OFFICIAL_BACKBONE = {
    'tiny': dict(vit=5490624, pos_embed=197 * 192, adapter=2438192),
    'small': dict(vit=21598080, pos_embed=197 * 384, adapter=5830160),
    'base': dict(vit=85663488, pos_embed=197 * 768, adapter=13680608),
}
#: The official models: these backbones plus the heads of the official
#: configs (mmdet 2's Mask R-CNN FPN and mmseg 0.x's UperNet base models,
#: the same modules as mmdet 3.3's and mmseg 1.2.2's). The official
#: READMEs round them to 28M, 48M, 120M and 36M, 58M, 134M.
OFFICIAL_MODEL = {
    'mask-rcnn': dict(tiny=28068512, small=47802368, base=120187088),
    'upernet': dict(tiny=36062428, small=57614908, base=133636876),
}
SIZE_CONFIGS = {
    'mask-rcnn':
    'configs/vit_adapter/mask-rcnn_vit-adapter-{}_fpn_3x_coco.py',
    'upernet': ('configs/vit_adapter/upernet_vit-adapter-{}_8xb2-160k_'
                'ade20k-512x512.py'),
}


def size_config(task, size, join=''):
    import os.path as osp

    from mmengine.config import Config
    path = SIZE_CONFIGS[task].format(size + join)
    return Config.fromfile(osp.join(ROOT, path))


def config_backbone(cfg, **kwargs):
    """The config's backbone, built directly (no checkpoint unless given)."""
    kwargs = {**cfg.model.backbone.to_dict(), 'init_cfg': None, **kwargs}
    kwargs.pop('type')
    return LaPEViTAdapter(**kwargs)


@pytest.mark.parametrize(
    'size', ['tiny', 'small',
             pytest.param('base', marks=pytest.mark.slow)])
def test_backbone_parameters_equal_the_official_code(size):
    """Part by part the official ViT-Adapter's counts; the PE one row
    shorter (the official model keeps DeiT's class row and never uses it;
    mmlape drops it on loading)."""
    model = config_backbone(size_config('mask-rcnn', size))
    parts = dict.fromkeys(('vit', 'pos_embed', 'adapter'), 0)
    for name, p in model.named_parameters():
        top = name.split('.')[0]
        part = top if top == 'pos_embed' else ('vit' if top in (
            'patch_embed', 'blocks') else 'adapter')
        parts[part] += p.numel()
    want = dict(OFFICIAL_BACKBONE[size])
    want['pos_embed'] -= model.embed_dims
    assert parts == want


@pytest.mark.slow  # full-size detectors and segmentors
@pytest.mark.parametrize('size', ['tiny', 'small', 'base'])
@pytest.mark.parametrize('task', ['mask-rcnn', 'upernet'])
def test_model_parameters_equal_the_official_code(task, size):
    """The default-join config's whole model has the official model's
    parameters less the unused class row of the PE."""
    import importlib

    from mmengine.registry import DefaultScope
    cfg = size_config(task, size)
    cfg.model.backbone.init_cfg = None
    scope = cfg.default_scope
    importlib.import_module(f'{scope}.utils').register_all_modules(False)
    with DefaultScope.overwrite_default_scope(scope):
        model = importlib.import_module(f'{scope}.registry').MODELS.build(
            cfg.model)
    count = sum(p.numel() for p in model.parameters())
    assert count == OFFICIAL_MODEL[task][size] - model.backbone.embed_dims


@pytest.mark.slow  # a full-size DeiT-S/B checkpoint
@pytest.mark.parametrize('size, join', [('small', 'lape'), ('base', 'mpvg')])
def test_deit_checkpoint_of_each_size_initialises_its_config(
        size, join, tmp_path):
    """configs/deit's DeiT-S/B of a join go whole into the ViT-Adapter-S/B
    configs of that join: every tensor the adapter has is copied (the PE
    without its class row), the class token and, without MPVG's final
    norm, the final norm stay unused."""
    import os.path as osp

    from mmengine.config import Config
    deit = Config.fromfile(
        osp.join(ROOT, f'configs/deit/deit-{size}-{join}_4xb256_in1k.py'))
    kwargs = deit.model.backbone.to_dict()
    kwargs.pop('type')
    src = LaPEViT(**kwargs)
    with torch.no_grad():
        for p in src.parameters():
            p.normal_()
    path = save_backbone_checkpoint(src, tmp_path / 'deit.pth', meta={})
    cfg = size_config('upernet', size, f'-{join}')
    init = dict(cfg.model.backbone.init_cfg.to_dict(), checkpoint=path)
    model = config_backbone(cfg, init_cfg=init)
    model.init_weights()
    own, theirs = model.state_dict(), src.state_dict()
    unused = {k for k in theirs if k not in own}
    assert unused == ({'cls_token', 'norm.weight', 'norm.bias'}
                      if src.with_cls_token else set())
    for key in theirs.keys() - unused:
        value = theirs[key]
        if key == 'pos_embed' and src.with_cls_token:
            value = value[:, 1:]
        torch.testing.assert_close(own[key], value, msg=key)
