"""mmpretrain 1.2.0's T2T_ViT tests, written for mmlape's LaPET2TViT.

Every assertion of mmpretrain's
``tests/test_models/test_backbones/test_t2t_vit.py`` has its counterpart
here, on mmlape's names (``patch_embed`` for ``tokens_to_token``,
``blocks`` for ``encoder``, ``mlp.fc1`` for the FFN's first layer, one
``drop_path`` per block for upstream's two drop-path layers). Two of them
are answered differently, on purpose:

- ``use_performer=True``: upstream raises ``NotImplementedError``; mmlape
  implements the Performer token layers, so the model builds with them.
- errors are mmlape's one-line ``ValueError``s (upstream: assertions).

Then what a drop-in needs: same-weight parity with upstream's ``T2T_ViT``
(every output type, several layers, another input size; the converted
checkpoint loads strictly, sinusoid included), a checkpoint's sinusoid
resized rather than rebuilt at another ``img_size``, and mmpretrain's own
``t2t-vit-t-14`` config with only the backbone type swapped. Full-size
builds that run a forward are marked ``slow`` (the project's rule).
"""
import math
import os.path as osp

import pytest
import torch
import torch.nn.functional as F
from host_models import build_in
from mmengine.config import Config
from mmengine.runner import load_checkpoint, save_checkpoint

from mmlape.models import LaPET2TViT
from mmlape.models.checkpoint import T2T_CHECKPOINTS
from mmlape.models.checkpoint.vit_family import convert_vit_family
from mmlape.models.layers.pos_embed import build_1d_sincos

#: mmpretrain's test configuration (T2T-ViT_t-14).
CFG = dict(
    img_size=224,
    in_channels=3,
    embed_dims=384,
    t2t_cfg=dict(token_dims=64, use_performer=False),
    num_layers=14,
    drop_path_rate=0.1)
#: Depth for the tests whose assertions do not depend on it.
SHALLOW = 3
#: A tiny T2T-ViT for the parity checks.
TINY = dict(
    img_size=64,
    embed_dims=64,
    num_layers=3,
    t2t_cfg=dict(token_dims=16),
    layer_cfgs=dict(num_heads=2))


def cfg(**kwargs):
    """mmpretrain's configuration; tests whose assertions do not depend on
    the depth pass ``num_layers=SHALLOW`` to save time."""
    out = dict(CFG, t2t_cfg=dict(CFG['t2t_cfg']))
    out.update(kwargs)
    return out


def bicubic_resize(table, num_extra, new_rows):
    """The test's own resize of a ``(1, extra + n*n, C)`` table to
    ``new_rows`` rows: square grids, bicubic, ``align_corners=False``
    (what mmpretrain's test compares with, timm's resize)."""
    extra, grid = table[:, :num_extra], table[0, num_extra:]
    old = math.isqrt(grid.shape[0])
    new = math.isqrt(new_rows - num_extra)
    grid = grid.reshape(1, old, old, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(
        grid, size=(new, new), mode='bicubic', align_corners=False)
    return torch.cat(
        [extra, grid.permute(0, 2, 3, 1).reshape(1, new * new, -1)], 1)


# ---------------------------------------------------------------------------
# upstream's test_structure
def test_performer_token_layers_are_built():
    """Upstream raises NotImplementedError; mmlape has them."""
    model = LaPET2TViT(
        **cfg(t2t_cfg=dict(token_dims=64, use_performer=True), num_layers=1))
    assert model.patch_embed.attention == 'performer'


@pytest.mark.parametrize('out_indices,match', [
    ({
        1: 1
    }, "<class 'dict'>"),
    ([0, 15], 'out_indices contains 15'),
])
def test_bad_out_indices(out_indices, match):
    with pytest.raises(ValueError, match=match):
        LaPET2TViT(**cfg(out_indices=out_indices))


@pytest.mark.slow
def test_structure_and_drop_path_decay():
    model = LaPET2TViT(**cfg())
    assert len(model.blocks) == 14
    step = 0.1 / (14 - 1)
    for i, blk in enumerate(model.blocks):
        assert blk.attn.qkv.in_features == 384
        assert blk.attn.qkv.out_features == 3 * 384
        assert blk.mlp.fc1.out_features == 384 * 3  # mlp_ratio 3
        assert blk.attn.num_heads == 6
        assert blk.attn.qkv.bias is None
        prob = getattr(blk.drop_path, 'drop_prob', 0.)
        assert prob == pytest.approx(step * i)


# ---------------------------------------------------------------------------
# upstream's test_init_weights
@pytest.mark.slow
def test_init_cfg_and_checkpoint_round_trip(tmp_path):
    model = LaPET2TViT(**cfg(
        num_layers=SHALLOW,
        init_cfg=[dict(type='TruncNormal', layer='Linear', std=.02)]))
    before = model.patch_embed.project.weight.detach().clone()
    model.init_weights()
    assert not torch.allclose(before, model.patch_embed.project.weight)

    table = model.pos_embed.detach().clone()
    path = str(tmp_path / 'test.pth')
    save_checkpoint(model.state_dict(), path)
    same = LaPET2TViT(**cfg(num_layers=SHALLOW))
    load_checkpoint(same, path, strict=True)
    assert torch.allclose(same.pos_embed, table)

    # another img_size: the stored table, resized (not rebuilt)
    bigger = LaPET2TViT(**cfg(img_size=384, num_layers=SHALLOW))
    load_checkpoint(bigger, path, strict=True)
    want = bicubic_resize(table, 1, bigger.pos_embed.shape[1])
    assert torch.allclose(bigger.pos_embed, want)
    assert not torch.allclose(bigger.pos_embed, build_1d_sincos(577, 384))


# ---------------------------------------------------------------------------
# upstream's test_forward
def test_cls_token_output_needs_the_token():
    with pytest.raises(ValueError, match='must be True'):
        LaPET2TViT(**cfg(with_cls_token=False, out_type='cls_token'))


@pytest.fixture(scope='module')
def featmap_model():
    return LaPET2TViT(**cfg(out_type='featmap', num_layers=SHALLOW)).eval()


@pytest.mark.slow
def test_forward_outputs():
    img = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        model = LaPET2TViT(**cfg(
            with_cls_token=False, out_type='featmap', num_layers=SHALLOW))
        outs = model(img)
        assert isinstance(outs, tuple) and len(outs) == 1
        assert outs[-1].shape == (1, 384, 14, 14)

        outs = LaPET2TViT(**cfg(num_layers=SHALLOW))(img)
        assert isinstance(outs, tuple) and len(outs) == 1
        assert outs[-1].shape == (1, 384)

        outs = LaPET2TViT(**cfg(out_indices=[-3, -2, -1], num_layers=SHALLOW))(
            img)
        assert isinstance(outs, tuple) and len(outs) == 3
        assert all(o.shape == (1, 384) for o in outs)


@pytest.mark.slow
@pytest.mark.parametrize('size', [(224, 224), (256, 256), (256, 309)])
def test_forward_dynamic_input_size(featmap_model, size):
    with torch.no_grad():
        outs = featmap_model(torch.randn(1, 3, *size))
    assert isinstance(outs, tuple) and len(outs) == 1
    want = (math.ceil(size[0] / 16), math.ceil(size[1] / 16))
    assert outs[-1].shape == (1, 384, *want)


# ---------------------------------------------------------------------------
# same weights, same outputs as mmpretrain's T2T_ViT
def _upstream_pair(scale=0.05, **kwargs):
    from mmpretrain.models import T2T_ViT
    torch.manual_seed(0)
    ref = T2T_ViT(**dict(TINY, **kwargs))
    ref.eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * scale)
    ours = LaPET2TViT(**dict(TINY, **kwargs)).eval()
    state = T2T_CHECKPOINTS.backbone_state({'state_dict': ref.state_dict()},
                                           None)
    ours.load_state_dict(
        T2T_CHECKPOINTS.convert(state).state_dict, strict=True)
    return ref, ours


@pytest.mark.parametrize(
    'kwargs', [
        dict(out_type='cls_token', out_indices=[0, 2]),
        dict(out_type='featmap', with_cls_token=False),
        dict(out_type='avg_featmap', out_indices=[1, -1]),
        dict(out_type='raw', final_norm=False),
        dict(out_type='cls_token', interpolate_mode='bilinear', drop_rate=0.1),
    ],
    ids=['cls', 'featmap', 'avg', 'raw', 'bilinear'])
def test_same_weights_as_mmpretrain(kwargs):
    ref, ours = _upstream_pair(**kwargs)
    assert sum(p.numel()
               for p in ours.parameters()) == sum(p.numel()
                                                  for p in ref.parameters())
    assert ours.state_dict().keys() >= {'pos_embed', 'cls_token'} or \
        not ours.with_cls_token
    with torch.no_grad():
        for size in ((64, 64), (80, 48)):
            img = torch.randn(2, 3, *size)
            got, want = ours(img), ref(img)
            assert len(got) == len(want)
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_official_attention_scale_differs():
    """``attn_scale='official'`` is the T2T-ViT code's scaling, not
    mmpretrain 1.2.0's: same weights, other outputs."""
    ref, ours = _upstream_pair()
    official = LaPET2TViT(**TINY, attn_scale='official').eval()
    official.load_state_dict(ours.state_dict(), strict=True)
    img = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert not torch.allclose(official(img)[0], ref(img)[0], atol=1e-2)
    with pytest.raises(ValueError, match="attn_scale='timm'"):
        LaPET2TViT(**TINY, attn_scale='timm')


def test_upstream_checkpoint_at_another_size_keeps_its_table(tmp_path):
    """An mmpretrain checkpoint loads strictly (``init_cfg``) into a model
    at another ``img_size``; its sinusoid is resized as upstream resizes
    it, and the outputs equal upstream's at that size."""
    from mmpretrain.models import T2T_ViT
    ref, _ = _upstream_pair()
    path = str(tmp_path / 'mmpretrain_t2t.pth')
    torch.save(
        {
            'state_dict': {
                f'backbone.{k}': v
                for k, v in ref.state_dict().items()
            }
        }, path)
    big_ref = T2T_ViT(**dict(TINY, img_size=96))
    big_ref.load_state_dict(ref.state_dict())  # upstream's own resize
    big_ref.eval()
    ours = LaPET2TViT(
        **dict(TINY, img_size=96),
        init_cfg=dict(type='Pretrained', checkpoint=path, prefix='backbone.'))
    ours.init_weights()
    ours.eval()
    torch.testing.assert_close(ours.pos_embed, big_ref.pos_embed)
    assert not torch.allclose(ours.pos_embed, build_1d_sincos(37, 64))
    img = torch.randn(1, 3, 96, 96)
    with torch.no_grad():
        torch.testing.assert_close(
            ours(img)[0], big_ref(img)[0], rtol=1e-4, atol=1e-4)


def test_converted_file_without_its_table_loads(tmp_path):
    """The ViT family converter drops a stored sinusoid; such a file still
    loads strictly, with the model's own table."""
    ref, ours = _upstream_pair()
    backbone, _ = convert_vit_family(ref.state_dict())
    assert 'pos_embed' not in backbone
    model = LaPET2TViT(**TINY)
    model.load_state_dict(backbone, strict=True)
    torch.testing.assert_close(model.pos_embed, ours.pos_embed)


def test_joins_and_errors():
    model = LaPET2TViT(**TINY, pe_join='LaPE')
    assert all(hasattr(b, 'pe_norm') for b in model.blocks)
    assert model(torch.randn(1, 3, 64, 64))[0].shape == (1, 64)
    for kwargs, match in [
        (dict(layer_cfgs=dict(ffn_type='swiglu')), 'ffn_type'),
        (dict(layer_cfgs=[dict(
            num_heads=2), dict(num_heads=4)] + [{}]), 'differ between layers'),
        (dict(t2t_cfg=dict(token_dims=16, kernel=3)), 't2t_cfg'),
        (dict(out_type='pooled'), "out_type='pooled'"),
    ]:
        with pytest.raises(ValueError, match=match):
            LaPET2TViT(**dict(TINY, **kwargs))


# ---------------------------------------------------------------------------
# mmpretrain's own config, the type swapped
@pytest.mark.slow
def test_mmpretrain_t2t_config_swaps_in():
    import mmpretrain
    path = osp.join(
        osp.dirname(mmpretrain.__file__), '.mim', 'configs', '_base_',
        'models', 't2t-vit-t-14.py')
    cfg_ = Config.fromfile(path)
    upstream = cfg_.model.backbone.to_dict()
    swapped = dict(upstream, type='LaPET2TViT')
    import mmlape.models  # noqa: F401  (registers the backbone)
    torch.manual_seed(0)
    ref = build_in('mmpretrain', upstream)
    ours = build_in('mmpretrain', swapped)
    assert type(ours).__name__ == 'LaPET2TViT'
    ref.init_weights()
    ours.init_weights()  # the config's init_cfg runs on mmlape's too
    assert sum(p.numel()
               for p in ours.parameters()) == sum(p.numel()
                                                  for p in ref.parameters())
    ref.eval(), ours.eval()
    state = T2T_CHECKPOINTS.backbone_state({'state_dict': ref.state_dict()},
                                           None)
    ours.load_state_dict(
        T2T_CHECKPOINTS.convert(state).state_dict, strict=True)
    img = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(
            ours(img)[0], ref(img)[0], rtol=1e-4, atol=1e-4)
