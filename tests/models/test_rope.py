"""The rotary PE types (``pe_type='rope_axial' | 'rope_mixed'``, with or
without an absolute PE beside them): timm's RoPE-ViT models give the same
logits on the same weights, converted by mmlape's checkpoint path; the
frequencies start as the RoPE-ViT paper starts them; the rotation makes
the logits depend on the patches' offset only; bad settings are refused
in one line."""
import math

import pytest
import timm  # a test requirement (requirements/tests.txt)
import torch
from conftest import IMG, build_classifier, tiny_vit

from mmlape.models import LaPEViT
from mmlape.models.checkpoint import VIT
from mmlape.models.layers.pos_embed import (ABSOLUTE_PE_TYPES, ROTARY_PE_TYPES,
                                            parse_pe_setting, pe_setting_name,
                                            pe_settings, pe_type_part)
from mmlape.models.layers.rope import rotary_qk, rotary_tables

pytestmark = pytest.mark.usefixtures('one_thread')

#: timm's RoPE-ViT models (``timm.models.eva``): name -> (mmlape's
#: pe_type, ape_type).
TIMM_MODELS = {
    'vit_small_patch16_rope_224': ('rope_axial', None),
    'vit_small_patch16_rope_ape_224': ('rope_axial', 'learnable'),
    'vit_small_patch16_rope_mixed_224': ('rope_mixed', None),
    'vit_small_patch16_rope_mixed_ape_224': ('rope_mixed', 'learnable'),
}
#: A tiny version of each: 64 dims, 2 layers, 2 heads (head_dims 32),
#: 8x8 patches of 32x32 images, 5 classes, layer scale on.
TINY = dict(
    img_size=32,
    patch_size=8,
    embed_dim=64,
    depth=2,
    num_heads=2,
    num_classes=5,
    init_values=0.1)


def timm_model(name):
    """A tiny timm RoPE-ViT with every weight drawn afresh (so that a
    swapped or missed weight shows), taking any input size."""
    torch.manual_seed(0)
    model = timm.create_model(
        name, pretrained=False, dynamic_img_size=True, **TINY).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
            else:
                p.uniform_(-1, 1)
    return model


def mmlape_classifier(name, **backbone):
    pe_type, ape_type = TIMM_MODELS[name]
    return build_classifier(
        dict(
            type='LaPEViT',
            arch=dict(
                embed_dims=64,
                num_layers=2,
                num_heads=2,
                feedforward_channels=256),
            img_size=32,
            patch_size=8,
            pe_type=pe_type,
            ape_type=ape_type,
            layer_scale_init_value=0.1,
            # timm resamples an absolute PE with antialiasing
            interpolate_antialias=True,
            **backbone),
        dict(type='VisionTransformerClsHead', num_classes=5,
             in_channels=64)).eval()


#: Input sizes: the native one, larger and non-square, smaller (the
#: absolute PE resized; the rotary one takes the other grid's positions).
SIZES = [(32, 32), (48, 32), (24, 40)]


@pytest.mark.parametrize('name', list(TIMM_MODELS))
def test_timm_rope_vit_gives_the_same_logits(name):
    source = timm_model(name)
    ckpt = VIT.convert_checkpoint(
        dict(state_dict=source.state_dict()), head='vit')
    assert ckpt['meta']['layout'] == 'eva'
    model = mmlape_classifier(name)
    missing, unexpected = model.load_state_dict(ckpt['state_dict'])
    assert not missing and not unexpected
    pe_type, ape_type = TIMM_MODELS[name]
    if ape_type:  # the class token gets a zero row, as timm adds none
        assert model.backbone.pos_embed.shape == (1, 17, 64)
        assert model.backbone.pos_embed[0, 0].eq(0).all()
    for size in SIZES:
        img = torch.randn(2, 3, *size)
        with torch.no_grad():
            want = source(img)
            got = model(img, mode='tensor')
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        # the rotation is what makes them equal: without it they differ
        with torch.no_grad():
            plain = model.backbone.pe_plan
            model.backbone.pe_plan = lambda hw: _no_rotation(plain(hw))
            try:
                other = model(img, mode='tensor')
            finally:
                del model.backbone.pe_plan
        assert (other - want).abs().max() > 1e-2


def _no_rotation(plan):
    import dataclasses
    return dataclasses.replace(plan, qk=[None] * plan.num_layers)


def test_timm_file_converts_and_loads_through_init_cfg(tmp_path):
    """The file of a timm RoPE-Mixed + APE model, read by the backbone's
    own loader (``init_cfg``) and by ``tools/convert/to_mmlape.py``."""
    import sys
    name = 'vit_small_patch16_rope_mixed_ape_224'
    source = timm_model(name)
    path = tmp_path / 'timm.pth'
    torch.save(source.state_dict(), path)
    backbone = mmlape_classifier(
        name, init_cfg=dict(type='Pretrained', checkpoint=str(path))).backbone
    backbone.init_weights()
    img = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        want = source.forward_head(
            source.forward_features(img), pre_logits=True)
        torch.testing.assert_close(
            backbone(img)[0], want, rtol=1e-5, atol=1e-5)
    from conftest import ROOT
    sys.path.insert(0, ROOT)
    from tools.convert.to_mmlape import main
    out = tmp_path / 'mmlape.pth'
    assert main(['--family', 'vit', str(path), str(out)]) == 0
    model = mmlape_classifier(name)
    model.load_state_dict(
        torch.load(out, weights_only=True)['state_dict'], strict=True)
    with torch.no_grad():
        torch.testing.assert_close(
            model(img, mode='tensor'), source(img), rtol=1e-5, atol=1e-5)


def test_eva_options_mmlape_does_not_compute_are_refused():
    source = timm.create_model(
        'vit_small_patch16_rope_mixed_224',
        pretrained=False,
        num_reg_tokens=1,
        **TINY)
    with pytest.raises(ValueError, match='"reg_token" of a timm Eva'):
        VIT.convert_checkpoint(source.state_dict())


# ----------------------------------------------------------------------
# the frequencies
def test_axial_frequencies_are_the_papers():
    """RoPE-Axial: ``theta = 100``, the first half of the channel pairs
    of every head turning with the column at ``100^(-t / (d/4))``, the
    second with the row; fixed and computed, no state (nothing saved,
    nothing counted as a weight)."""
    from mmlape.analysis import count_parameters
    model = tiny_vit(pe_type='rope_axial')
    d = model.embed_dims // 2
    mag = 100.**(-torch.arange(d // 4) / (d // 4))
    zero = torch.zeros(d // 4)
    for blk in model.blocks:
        freqs = blk.attn.rope_frequencies()
        for head in range(2):
            torch.testing.assert_close(freqs[0, head], torch.cat([mag, zero]))
            torch.testing.assert_close(freqs[1, head], torch.cat([zero, mag]))
    assert not any('rope' in k for k in model.state_dict())
    # DeiT's count without its PE (16 patches + 1 class token, 64 wide)
    plain = count_parameters(tiny_vit())
    assert count_parameters(model) == (plain.learnable - 17 * 64, 0)


def test_mixed_frequencies_start_as_the_papers_and_learn():
    """RoPE-Mixed: ``theta = 10``; per layer and head, the pairs of the
    first half point along a random angle ``a`` and those of the second
    along ``a + pi/2``, at magnitudes ``10^(-t / (d/4))``; the angles
    differ between layers and heads; parameters of ``blocks.{i}.attn``
    (layer-wise lr decay counts them as their layer's)."""
    torch.manual_seed(3)
    model = tiny_vit(pe_type='rope_mixed')
    d = model.embed_dims // 2
    m = d // 4
    mag = 10.**(-torch.arange(m) / m)
    angles = []
    for i, blk in enumerate(model.blocks):
        freqs = blk.attn.rope_freqs
        assert isinstance(freqs, torch.nn.Parameter)
        fx, fy = freqs.detach()
        torch.testing.assert_close(torch.hypot(fx, fy), mag.repeat(2, 2))
        a = torch.atan2(fy, fx)
        # one direction per half, a quarter turn apart
        turn = torch.remainder(a[:, m:] - a[:, :m], 2 * math.pi)
        torch.testing.assert_close(turn, torch.full_like(turn, math.pi / 2))
        assert torch.allclose(a[:, :m], a[:, :1].expand(-1, m), atol=1e-5)
        angles.extend(a[:, 0].tolist())
        name = f'blocks.{i}.attn.rope_freqs'
        assert model.get_layer_depth(name) == (i + 1, model.num_layers + 2)
    assert len({round(a, 4) for a in angles}) == len(angles)
    img = torch.randn(2, 3, IMG, IMG)
    model.train()
    model(img)[0].sum().backward()
    for blk in model.blocks:
        assert blk.attn.rope_freqs.grad.abs().sum() > 0


def test_thetas_cover_every_rotary_type():
    thetas = {name: pe_type_part(name).theta for name in ROTARY_PE_TYPES}
    assert thetas == {'rope_axial': 100., 'rope_mixed': 10.}
    model = tiny_vit(pe_type='rope_axial', rope_theta=10000.)
    assert model.blocks[0].attn.rope_theta == 10000.
    # head_dims 32: 8 pairs a side, 10000^(-4/8) = 0.01
    assert model.blocks[0].attn.rope_frequencies()[0, 0,
                                                   4] == pytest.approx(0.01)


# ----------------------------------------------------------------------
# what the rotation computes
@pytest.mark.parametrize('pe_type', ROTARY_PE_TYPES)
def test_logits_depend_on_the_offset_only(pe_type):
    """``<R(p) q, R(p') k>`` is the same for every pair of patches at the
    same offset, on any grid (no resize: other grids are other positions);
    the class token is not rotated."""
    torch.manual_seed(0)
    model = tiny_vit(pe_type=pe_type)
    attn = model.blocks[1].attn
    q, k = torch.randn(2, 1, 2, 1, attn.head_dims)
    for hw in ((4, 4), (3, 7)):
        rotate = rotary_qk(*attn.rotary_tables(hw, 1))
        n = 1 + hw[0] * hw[1]
        qs, ks = rotate(q.expand(1, 2, n, -1), k.expand(1, 2, n, -1))
        torch.testing.assert_close(qs[:, :, 0], q[:, :, 0])
        logits = qs @ ks.transpose(-1, -2)  # 1, heads, n, n

        def at(r, c):
            return 1 + r * hw[1] + c

        def logit(p, p2):
            return logits[..., at(*p), at(*p2)]

        # (0, 0) -> (1, 2), and the same offset elsewhere on the grid
        for r, c in ((1, 1), (hw[0] - 2, hw[1] - 3)):
            torch.testing.assert_close(
                logit((0, 0), (1, 2)), logit((r, c), (r + 1, c + 2)))
        # ... and not on the positions alone: another offset differs
        assert not torch.allclose(logit((0, 0), (1, 2)), logit((0, 0), (2, 1)))


def test_tables_follow_the_grid_in_raster_order():
    """Column ``x`` turns the first half of the axial pairs, row ``y`` the
    second; tokens in raster order."""
    from mmlape.models.layers.rope import axial_freqs
    cos, sin = rotary_tables(axial_freqs(8, 1, 100.), (2, 3))
    angle = torch.atan2(sin[0, 0, :, ::2], cos[0, 0, :, ::2])  # N, pairs
    xs = torch.tensor([0, 1, 2, 0, 1, 2.])
    ys = torch.tensor([0, 0, 0, 1, 1, 1.])
    torch.testing.assert_close(angle[:, 0], xs)
    torch.testing.assert_close(angle[:, 1], xs * 0.1)
    torch.testing.assert_close(angle[:, 2], ys)
    torch.testing.assert_close(angle[:, 3], ys * 0.1)


# ----------------------------------------------------------------------
# settings
def test_settings_are_derived_from_the_types():
    settings = pe_settings()
    for r in ROTARY_PE_TYPES:
        for a in ABSOLUTE_PE_TYPES:
            name = pe_setting_name(r, a)
            assert name in settings
            assert parse_pe_setting(name) == dict(pe_type=r, ape_type=a)
    assert parse_pe_setting('rope_mixed') == dict(
        pe_type='rope_mixed', ape_type=None)
    with pytest.raises(ValueError, match="Unknown PE setting 'rope'"):
        parse_pe_setting('rope')


@pytest.mark.parametrize('kwargs,match', [
    (dict(pe_type='learnable', ape_type='learnable'),
     r"ape_type='learnable' is an absolute PE beside a rotary pe_type.*"
     r"pe_type='learnable' is not rotary"),
    (dict(pe_type='rope_mixed', ape_type='relative'),
     r"Unknown ape_type='relative'.*\['learnable', 'sincos1d'"),
    (dict(pe_type='sincos2d', rope_theta=10.),
     r"rope_theta=10.0 is the theta of a rotary pe_type"),
    (dict(
        pe_type='rope_axial',
        with_cls_token=False,
        out_type='featmap',
        window_size=2), r"window attention takes no rotary PE"),
    (dict(
        pe_type='rope_mixed',
        arch=dict(
            embed_dims=24, num_layers=1, num_heads=4, feedforward_channels=8)),
     r'needs head_dims .* divisible by 4, got 6'),
])
def test_bad_rotary_settings_are_refused_in_one_line(kwargs, match):
    kwargs = dict(dict(arch='test-tiny', img_size=IMG, patch_size=8), **kwargs)
    with pytest.raises(ValueError, match=match) as err:
        LaPEViT(**kwargs)
    assert '\n' not in str(err.value)


# ----------------------------------------------------------------------
# the other backbones on the one ViT
def test_dense_backbones_take_the_rotary_types():
    """ViT-Adapter and mmseg's ViT build the same blocks: the rotation
    reaches them (gradients to the mixed frequencies), at other sizes too,
    beside a join on the absolute PE."""
    from mmlape.models import LaPESegViT, LaPEViTAdapter
    torch.manual_seed(0)
    adapter = LaPEViTAdapter(
        'test-tiny',
        img_size=64,
        pe_type='rope_mixed',
        ape_type='learnable',
        pe_join='PVG')
    assert adapter.pe_setting == 'rope_mixed+learnable'
    outs = adapter(torch.randn(1, 3, 64, 96))
    assert [tuple(o.shape[2:]) for o in outs] == [(16, 24), (8, 12), (4, 6),
                                                  (2, 3)]
    sum((o * torch.randn_like(o)).sum() for o in outs).backward()
    for blk in adapter.blocks:
        assert blk.attn.rope_freqs.grad.abs().sum() > 0
    seg = LaPESegViT(
        img_size=32,
        patch_size=8,
        embed_dims=64,
        num_layers=2,
        num_heads=2,
        out_indices=(1, ),
        pe_type='rope_axial')
    assert seg.pos_embed is None and seg.pe_setting == 'rope_axial'
    assert seg(torch.randn(1, 3, 32, 48))[0].shape == (1, 64, 4, 6)
