"""mmpretrain 1.2.0's SwinTransformer tests, written for mmlape's LaPESwin.

Every assertion of mmpretrain's
``tests/test_models/test_backbones/test_swin_transformer.py`` has its
counterpart here, on mmlape's names (``layers`` for ``stages``,
``patch_embed.proj`` for ``patch_embed.projection``, ``pos_embed`` for
``absolute_pos_embed``, ``attn.num_heads`` for ``attn.w_msa.num_heads``, one
``drop_path`` per block for upstream's two drop-path layers). Answered
differently, on purpose:

- errors are mmlape's one-line ``ValueError``s (upstream: assertions);
- "the absolute PE is all zero before ``init_weights``": mmlape initialises
  at construction (generic first, specialised last), so the PE starts
  truncated-normal; ``init_weights`` with an ``init_cfg`` still re-runs it;
- upstream's version-1 checkpoints (a final ``norm``, stored ``attn_mask``
  buffers) are mmpretrain files: they load through mmlape's converter, as
  every mmpretrain Swin file does.

Then what a drop-in needs: same-weight parity with upstream's
``SwinTransformer`` for its options (``out_after_downsample``,
``stage_cfgs``, ``patch_cfg``, ``norm_cfg=None``, no absolute PE), and
mmpretrain's own ``swin-tiny`` config with only the backbone type swapped.
Full-size builds that run a forward are marked ``slow`` (the project's
rule); structure-only checks build on the meta device.
"""
import math
import os.path as osp
from itertools import chain

import pytest
import torch
import torch.nn.functional as F
from host_models import build_in
from mmengine.config import Config
from mmengine.runner import load_checkpoint, save_checkpoint
from torch.nn.modules.batchnorm import _BatchNorm

from mmlape.models import LaPESwin
from mmlape.models.checkpoint.swin import convert_swin_backbone

#: mmpretrain's test configuration.
CFG = dict(arch='tiny', img_size=224, patch_size=4, drop_path_rate=0.1)
#: A tiny Swin for the parity checks.
TINY = dict(
    arch=dict(embed_dims=16, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4]),
    img_size=64,
    window_size=4,
    pad_small_map=True,
    drop_path_rate=0.)


def cfg(**kwargs):
    return dict(CFG, **kwargs)


def norms_in_eval(modules):
    return all(not m.training for m in modules if isinstance(m, _BatchNorm))


def bicubic_resize(table, new_rows):
    """The test's own resize of a ``(1, n*n, C)`` PE (no extra rows):
    bicubic, ``align_corners=False``, as mmpretrain's test compares."""
    old, new = math.isqrt(table.shape[1]), math.isqrt(new_rows)
    grid = table.reshape(1, old, old, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(
        grid, size=(new, new), mode='bicubic', align_corners=False)
    return grid.permute(0, 2, 3, 1).reshape(1, new * new, -1)


# ---------------------------------------------------------------------------
# upstream's test_arch
def test_arch():
    with pytest.raises(ValueError, match="Unknown arch='unknown'"):
        LaPESwin(**cfg(arch='unknown'))
    with pytest.raises(ValueError, match='A custom arch must be a dict'):
        LaPESwin(**cfg(arch=dict(embed_dims=96, num_heads=[3, 6, 12, 16])))
    # upstream builds heads that do not divide the width (and fails at
    # forward); mmlape refuses them when built
    with pytest.raises(ValueError, match='num_heads=6 does not divide'):
        LaPESwin(**cfg(
            arch=dict(
                embed_dims=256, depths=[2, 2, 4, 2], num_heads=[6, 12, 6, 12
                                                                ])))
    depths, heads = [2, 2, 4, 2], [8, 16, 8, 16]
    with torch.device('meta'):  # structure only
        model = LaPESwin(**cfg(
            arch=dict(embed_dims=256, depths=depths, num_heads=heads)))
    for i, stage in enumerate(model.layers):
        assert model.stage_dims[i] == 256 * 2**i
        assert stage.blocks[0].norm1.normalized_shape == (256 * 2**i, )
        assert len(stage.blocks) == depths[i]
        assert stage.blocks[0].attn.num_heads == heads[i]


@pytest.mark.parametrize('short,long', [('t', 'tiny'), ('s', 'small'),
                                        ('b', 'base'), ('l', 'large')])
def test_arch_names(short, long):
    """mmpretrain's short and long names, any case."""
    assert LaPESwin.arch_zoo[short] == LaPESwin.arch_zoo[long]
    with torch.device('meta'):
        model = LaPESwin(short.upper())
    assert model.arch_settings == LaPESwin.arch_zoo[long]


# ---------------------------------------------------------------------------
# upstream's test_init_weights
@pytest.mark.slow
def test_init_weights_and_checkpoints(tmp_path):
    model = LaPESwin(**cfg(
        use_abs_pos_embed=True,
        init_cfg=[
            dict(
                type='Kaiming',
                layer='Conv2d',
                mode='fan_in',
                nonlinearity='linear')
        ]))
    before = model.patch_embed.proj.weight.detach().clone()
    # (mmlape initialises at construction: the PE is not zero here)
    assert model.pos_embed.std() > 0.01
    model.init_weights()
    assert not torch.allclose(before, model.patch_embed.proj.weight)
    assert not torch.allclose(model.pos_embed, torch.tensor(0.))
    table = model.pos_embed.detach().clone()

    path = str(tmp_path / 'v3.pth')
    save_checkpoint(model.state_dict(), path)
    same = LaPESwin(**cfg(use_abs_pos_embed=True))
    load_checkpoint(same, path, strict=True)
    torch.testing.assert_close(same.pos_embed, table)

    bigger = LaPESwin(**cfg(img_size=384, use_abs_pos_embed=True))
    load_checkpoint(bigger, path, strict=True)
    assert torch.allclose(bigger.pos_embed,
                          bicubic_resize(table, bigger.pos_embed.shape[1]))


def test_version_1_mmpretrain_checkpoint_loads(tmp_path):
    """Upstream's first layout (``norm`` for the last output norm, stored
    ``attn_mask`` buffers) loads strictly through the converter."""
    from mmpretrain.models import SwinTransformer
    ref = SwinTransformer(**TINY, use_abs_pos_embed=True)
    sd = ref.state_dict()
    v1 = {
        ('norm.' + k[6:] if k.startswith('norm3.') else k): v
        for k, v in sd.items()
    }
    v1['stages.0.blocks.1.attn.attn_mask'] = torch.zeros(16, 16, 16)
    path = str(tmp_path / 'v1.pth')
    torch.save({'state_dict': {
        f'backbone.{k}': v
        for k, v in v1.items()
    }}, path)
    model = LaPESwin(
        **TINY,
        use_abs_pos_embed=True,
        init_cfg=dict(type='Pretrained', checkpoint=path, prefix='backbone.'))
    model.init_weights()
    want = convert_swin_backbone(sd)
    got = model.state_dict()
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=0)


# ---------------------------------------------------------------------------
# upstream's test_forward
@pytest.fixture(scope='module')
def swin_t():
    return LaPESwin(**cfg()).eval()


@pytest.mark.slow
def test_forward_default(swin_t):
    with torch.no_grad():
        outs = swin_t(torch.randn(1, 3, 224, 224))
    assert isinstance(outs, tuple) and len(outs) == 1
    assert outs[-1].shape == (1, 768, 7, 7)


@pytest.mark.slow
def test_forward_window_12():
    model = LaPESwin(**cfg(window_size=12)).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 384, 384))
        assert isinstance(outs, tuple) and len(outs) == 1
        assert outs[-1].shape == (1, 768, 12, 12)
        with pytest.raises(ValueError, match='smaller than window_size=12'):
            model(torch.randn(1, 3, 224, 224))

        model = LaPESwin(**cfg(window_size=12, pad_small_map=True)).eval()
        outs = model(torch.randn(1, 3, 224, 224))
        assert isinstance(outs, tuple) and len(outs) == 1
        assert outs[-1].shape == (1, 768, 7, 7)


@pytest.mark.slow
def test_forward_all_stages():
    model = LaPESwin(**cfg(out_indices=(0, 1, 2, 3))).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 224, 224))
    assert isinstance(outs, tuple) and len(outs) == 4
    for stride, out in zip([1, 2, 4, 8], outs):
        assert out.shape == (1, 96 * stride, 56 // stride, 56 // stride)


@pytest.mark.slow
def test_forward_with_checkpointing():
    model = LaPESwin(**cfg(with_cp=True))
    assert all(blk.with_cp for blk in model.blocks)
    model.init_weights()
    model.train()
    outs = model(torch.randn(1, 3, 224, 224, requires_grad=True))
    assert isinstance(outs, tuple) and len(outs) == 1
    assert outs[-1].shape == (1, 768, 7, 7)


@pytest.mark.slow
@pytest.mark.parametrize('size', [(224, 224), (256, 256), (256, 309)])
def test_forward_dynamic_input_size(swin_t, size):
    with torch.no_grad():
        outs = swin_t(torch.randn(1, 3, *size))
    assert isinstance(outs, tuple) and len(outs) == 1
    want = (math.ceil(size[0] / 32), math.ceil(size[1] / 32))
    assert outs[-1].shape == (1, 768, *want)


# ---------------------------------------------------------------------------
# upstream's test_structure
def test_drop_path_decay():
    with torch.device('meta'):  # structure only
        model = LaPESwin(**cfg(drop_path_rate=0.2))
    depths = model.arch_settings['depths']
    blocks = chain(*[stage.blocks for stage in model.layers])
    for i, blk in enumerate(blocks):
        want = 0.2 / (sum(depths) - 1) * i
        assert getattr(blk.drop_path, 'drop_prob', 0.) == pytest.approx(want)


@pytest.mark.slow
def test_norm_eval_keeps_batch_norms_in_eval():
    model = LaPESwin(**cfg(
        norm_eval=True,
        norm_cfg=dict(type='BN'),
        stage_cfgs=dict(block_cfgs=dict(norm_cfg=dict(type='BN')))))
    model.init_weights()
    model.train()
    assert any(isinstance(m, _BatchNorm) for m in model.modules())
    assert norms_in_eval(model.modules())
    assert model.layers[0].blocks[0].training  # the rest trains


@pytest.mark.slow
def test_first_stage_frozen():
    model = LaPESwin(**cfg(frozen_stages=0, out_indices=(0, 1, 2, 3)))
    model.init_weights()
    model.train()
    assert not model.patch_embed.training
    assert all(not p.requires_grad for p in model.patch_embed.parameters())
    assert all(not p.requires_grad for p in model.layers[0].parameters())
    assert all(not p.requires_grad for p in model.norm0.parameters())
    for i in range(1, 4):
        assert all(p.requires_grad for p in model.layers[i].parameters())
        assert all(
            p.requires_grad for p in getattr(model, f'norm{i}').parameters())


# ---------------------------------------------------------------------------
# defaults and options as upstream's
def test_plain_swin_by_default_abs_pe_with_a_pe_join():
    """Upstream's default (no absolute PE) holds with the Default join,
    named or not; a join that acts on the PE turns it on; an explicit
    ``use_abs_pos_embed`` decides."""
    with torch.device('meta'):
        plain = LaPESwin()
        named = LaPESwin(pe_join='Default')
        lape = LaPESwin(pe_join='LaPE')
        on = LaPESwin(pe_join='Default', use_abs_pos_embed=True)
    assert plain.pos_embed is None and named.pos_embed is None
    assert lape.pos_embed is not None and on.pos_embed is not None
    assert plain.use_abs_pos_embed is False
    with pytest.raises(ValueError, match='frozen_stages=4'):
        LaPESwin(**TINY, frozen_stages=4)
    for kwargs, match in [
        (dict(stage_cfgs=dict(block_cfgs=dict(qkv_bias=False))),
         r"\['qkv_bias'\]"),
        (dict(stage_cfgs=dict(block_cfgs=dict(attn_cfgs=dict(qk_scale=2.)))),
         'attn_cfgs'),
        (dict(stage_cfgs=[dict(window_size=4)] * 3 + [dict(window_size=2)]),
         'one window size'),
        (dict(patch_cfg=dict(kernel_size=7)), 'patch_cfg.kernel_size=7'),
        (dict(stage_cfgs=dict(downsample_cfg=dict(kernel_size=3))),
         r"\['kernel_size'\]"),
    ]:
        with pytest.raises(ValueError, match=match):
            LaPESwin(**dict(TINY, **kwargs))


def _upstream_pair(scale=0.1, **kwargs):
    from mmpretrain.models import SwinTransformer
    torch.manual_seed(0)
    ref = SwinTransformer(**dict(TINY, **kwargs))
    ref.eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * scale)
    ours = LaPESwin(**dict(TINY, **kwargs)).eval()
    ours.load_state_dict(convert_swin_backbone(ref.state_dict()), strict=True)
    return ref, ours


@pytest.mark.parametrize(
    'kwargs', [
        dict(),
        dict(use_abs_pos_embed=True, out_indices=(0, 2, 3)),
        dict(out_after_downsample=True, out_indices=(0, 1, 2, 3)),
        dict(
            pad_small_map=True,
            out_indices=(1, 3),
            norm_cfg=None,
            patch_cfg=dict(norm_cfg=None),
            stage_cfgs=dict(
                block_cfgs=dict(
                    ffn_ratio=2., norm_cfg=dict(type='LN', eps=1e-6)),
                downsample_cfg=dict(norm_cfg=None))),
        dict(
            window_size=7,
            stage_cfgs=dict(block_cfgs=dict(window_size=4)),
            interpolate_mode='bilinear',
            use_abs_pos_embed=True),
        dict(pad_small_map=False, img_size=128, use_abs_pos_embed=True),
    ],
    ids=[
        'plain', 'abs-pe', 'after-downsample', 'cfgs', 'block-window',
        'unpadded'
    ])
def test_same_weights_as_mmpretrain(kwargs):
    ref, ours = _upstream_pair(**kwargs)
    assert sum(p.numel()
               for p in ours.parameters()) == sum(p.numel()
                                                  for p in ref.parameters())
    with torch.no_grad():
        sizes = ((64, 64), (72, 100), (60, 44))
        if not kwargs.get('pad_small_map', True):  # no map under a window
            sizes = ((128, 128), (136, 160))
        for size in sizes:
            img = torch.randn(2, 3, *size)
            got, want = ours(img), ref(img)
            assert len(got) == len(want)
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_layer_depth_as_mmpretrain():
    from mmpretrain.models import SwinTransformer
    ref = SwinTransformer(**TINY)
    ours = LaPESwin(**TINY)
    mapping = {
        'stages.1.blocks.1.attn.w_msa.qkv.weight':
        'layers.1.blocks.1.attn.qkv.weight',
        'stages.2.downsample.reduction.weight':
        'layers.2.downsample.reduction.weight',
        'patch_embed.projection.weight': 'patch_embed.proj.weight',
        'norm3.weight': 'norm3.weight',
    }
    for theirs, mine in mapping.items():
        assert ours.get_layer_depth('backbone.' + mine, 'backbone.') == \
            ref.get_layer_depth('backbone.' + theirs, 'backbone.')


# ---------------------------------------------------------------------------
# mmpretrain's own config, the type swapped
@pytest.mark.slow
def test_mmpretrain_swin_tiny_config_swaps_in():
    import mmpretrain
    path = osp.join(
        osp.dirname(mmpretrain.__file__), '.mim', 'configs',
        'swin_transformer', 'swin-tiny_16xb64_in1k.py')
    upstream = Config.fromfile(path).model.backbone.to_dict()
    swapped = dict(upstream, type='LaPESwin')
    import mmlape.models  # noqa: F401  (registers the backbone)
    torch.manual_seed(0)
    ref = build_in('mmpretrain', upstream)
    ours = build_in('mmpretrain', swapped)
    assert type(ours).__name__ == 'LaPESwin' and ours.pos_embed is None
    assert sum(p.numel()
               for p in ours.parameters()) == sum(p.numel()
                                                  for p in ref.parameters())
    ref.eval(), ours.eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    ours.load_state_dict(convert_swin_backbone(ref.state_dict()), strict=True)
    img = torch.randn(1, 3, 224, 224)  # the last stage is one window
    with torch.no_grad():
        torch.testing.assert_close(
            ours(img)[0], ref(img)[0], rtol=1e-4, atol=1e-4)


def test_mmpretrain_swin_base_384_config_swaps_in():
    """``stage_cfgs=dict(block_cfgs=dict(window_size=12))`` as the
    384-pixel configs set it: every block's window is 12."""
    import mmpretrain
    path = osp.join(
        osp.dirname(mmpretrain.__file__), '.mim', 'configs', '_base_',
        'models', 'swin_transformer', 'base_384.py')
    backbone = Config.fromfile(path).model.backbone.to_dict()
    backbone.pop('type')
    with torch.device('meta'):
        model = LaPESwin(**backbone)
    assert model.window_size == 12
    assert all(blk.attn.window_size == 12 for blk in model.blocks)
    assert model.grid_size == (96, 96) and model.pos_embed is None


# ---------------------------------------------------------------------------
# mmlape Swin checkpoints saved before the default changed
@pytest.mark.parametrize(
    'recorded', [
        dict(pe_join=dict(type='Default')),
        dict(),
    ],
    ids=['with-join', 'bare'])
def test_old_recorded_swin_checkpoint_still_fits(recorded, tmp_path):
    """A checkpoint of the old default (absolute PE on) whose recorded
    config leaves ``use_abs_pos_embed`` out passes the recorded-model
    check against a config that sets it, as mmlape's Swin configs do."""
    from mmlape.apis import check_checkpoint_fits
    base = dict(arch='test-tiny', img_size=64, window_size=4)
    old = LaPESwin(**dict(base, use_abs_pos_embed=True, **recorded))
    path = str(tmp_path / 'old.pth')
    text = Config(
        dict(model=dict(
            backbone=dict(base, type='LaPESwin', **recorded)))).pretty_text
    torch.save({'state_dict': old.state_dict(), 'meta': dict(cfg=text)}, path)
    current = dict(base, use_abs_pos_embed=True, pe_join=dict(type='Default'))
    state = check_checkpoint_fits(
        LaPESwin(**current), path, '--resume',
        Config(dict(model=dict(backbone=dict(current, type='LaPESwin')))))
    assert 'pos_embed' in state


def test_freezing_on_a_tiny_swin():
    """The quick loop's check of ``frozen_stages`` (the full-size one
    above is slow): stages up to the index freeze with their output norms,
    the rest trains, and with every stage frozen the join's norms too."""
    model = LaPESwin(
        **TINY, frozen_stages=1, out_indices=(0, 1, 2, 3), pe_join='MPVG')
    model.train()
    assert not model.patch_embed.training and not model.layers[1].training
    assert model.layers[2].training
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {
        n
        for n, _ in model.named_parameters()
        if n.startswith(('patch_embed.', 'layers.0.', 'layers.1.', 'norm0.',
                         'norm1.'))
    }
    assert model.pos_embed.requires_grad  # upstream keeps it trainable
    everything = LaPESwin(**TINY, frozen_stages=3, pe_join='MPVG')
    assert not any(p.requires_grad for p in everything.pe_join.parameters())
