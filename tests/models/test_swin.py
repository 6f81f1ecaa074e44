"""Swin with the PE joins: each join against a reference written from the
equations, equality with mmpretrain's SwinTransformer, the converters,
gradients, the eval plan cache, other input sizes, parameter counts, the
configs and a tiny run through tools/train.py and tools/test.py."""
import importlib.util
import math
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import (ROOT, assert_close_f32, build_classifier, config_joins,
                      save_backbone_checkpoint)
from mmengine.config import Config

from mmlape.models import LaPESwin, LaPEViT
from mmlape.models.checkpoint.swin import (convert_swin_backbone,
                                           convert_swin_checkpoint,
                                           detect_swin_format)
from mmlape.utils import safe_torch_load

TINY = dict(embed_dims=16, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4])
IMG, WS = 64, 4  # stage grids 16, 8, 4 (= a window), 2 (padded)
JOIN_CFGS = {
    'default': dict(type='Default'),
    'lape': dict(type='LaPE'),
    'pvg': dict(type='PVG'),
    'mpvg': dict(type='MPVG'),
}


def tiny(pe_join, **kwargs):
    kwargs = dict(
        dict(
            img_size=IMG,
            window_size=WS,
            pad_small_map=True,
            out_indices=(0, 1, 2, 3),
            drop_path_rate=0.,
            use_abs_pos_embed=True), **kwargs)
    model = LaPESwin('test-tiny', pe_join=pe_join, **kwargs)
    # Non-trivial norms, so that a mixed-up norm cannot pass unnoticed.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if 'norm' in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


# ---------------------------------------------------------------------------
# The reference: Swin's equations on a state dict in the OFFICIAL layout
# (microsoft/Swin-Transformer names; ``absolute_pos_embed``, final ``norm``),
# with shifted windows written as one dense attention whose mask keeps each
# token inside its (shifted) window. Independent of mmlape's window code.
def official_names(sd):
    """mmlape's keys as the official layout names them (the test's own
    mapping: two renames)."""
    out = {}
    for k, v in sd.items():
        k = 'absolute_pos_embed' if k == 'pos_embed' else k
        out['norm.' + k[6:] if k.startswith('norm3.') else k] = v
    return out


def _ln(sd, name, x):
    return F.layer_norm(x, x.shape[-1:], sd[name + '.weight'],
                        sd[name + '.bias'], 1e-5)


def _lin(sd, name, x):
    return F.linear(x, sd[name + '.weight'], sd.get(name + '.bias'))


def _region(index, size, ws, shift):
    return (index >= size - ws).long() + (index >= size - shift).long()


def ref_window_msa(sd, pre, x, hw, heads, ws, shift):
    """W-MSA / SW-MSA of the normed tokens ``x`` (B, H*W, C)."""
    b, _, c = x.shape
    h, w = hw
    hp, wp = math.ceil(h / ws) * ws, math.ceil(w / ws) * ws
    grid = F.pad(x.reshape(b, h, w, c), (0, 0, 0, wp - w, 0, hp - h))
    grid = torch.roll(grid, (-shift, -shift), (1, 2)).reshape(b, hp * wp, c)
    rows = torch.arange(hp).repeat_interleave(wp)
    cols = torch.arange(wp).repeat(hp)
    d = c // heads
    q, k, v = _lin(sd, pre + '.qkv', grid).reshape(b, -1, 3, heads,
                                                   d).permute(2, 0, 3, 1, 4)
    logits = q @ k.transpose(-1, -2) / math.sqrt(d)
    dy = (rows % ws)[:, None] - (rows % ws)[None]
    dx = (cols % ws)[:, None] - (cols % ws)[None]
    table = sd[pre + '.relative_position_bias_table']
    logits = logits + table[(dy + ws - 1) *
                            (2 * ws - 1) + dx + ws - 1].permute(2, 0, 1)
    if shift:
        region = _region(rows, hp, ws, shift) * 3 + _region(
            cols, wp, ws, shift)
        logits = logits - 100. * (region[:, None] != region[None])
    window = (rows // ws) * (wp // ws) + cols // ws
    logits = logits.masked_fill(window[:, None] != window[None], -math.inf)
    out = (logits.softmax(-1) @ v).transpose(1, 2).reshape(b, hp, wp, c)
    out = torch.roll(_lin(sd, pre + '.proj', out), (shift, shift), (1, 2))
    return out[:, :h, :w].reshape(b, h * w, c)


def ref_merge(sd, pre, x, hw):
    b, _, c = x.shape
    h, w = hw
    grid = F.pad(x.reshape(b, h, w, c), (0, 0, 0, w % 2, 0, h % 2))
    cat = torch.cat([
        grid[:, 0::2, 0::2], grid[:, 1::2, 0::2], grid[:, 0::2, 1::2],
        grid[:, 1::2, 1::2]
    ], -1)
    hw = cat.shape[1:3]
    cat = cat.reshape(b, -1, 4 * c)
    return _lin(sd, pre + '.reduction', _ln(sd, pre + '.norm', cat)), hw


def ref_forward(sd,
                img,
                join,
                arch=TINY,
                ws=WS,
                grid=(IMG // 4, IMG // 4),
                pad_small_map=True,
                hierarchical=True,
                eta=None,
                last_source='pos_0'):
    """Every stage's normed map (B, C, H, W) under ``join``.

    Swin-T with an absolute PE: default ``x_0 = tokens + pos``; LaPE
    ``x_0 = tokens`` and ``p_l = LN'_l(pos_l)`` added to ``LN_l(x_l)`` from
    layer 0; PVG/MPVG both, from layer 0 (staged backbone); the PE stream
    crosses each patch merging through that merging; MPVG adds
    ``LN'_last(pos_0 carried to the last stage)`` after the last norm.
    """
    b = img.shape[0]
    pad = (0, (-img.shape[3]) % 4, 0, (-img.shape[2]) % 4)
    x = F.conv2d(
        F.pad(img, pad),
        sd['patch_embed.proj.weight'],
        sd['patch_embed.proj.bias'],
        stride=4)
    hw = x.shape[2:]
    x = _ln(sd, 'patch_embed.norm', x.flatten(2).transpose(1, 2))
    pos = sd['absolute_pos_embed']
    if tuple(hw) != tuple(grid):
        pos = F.interpolate(
            pos.reshape(1, *grid, -1).permute(0, 3, 1, 2),
            size=tuple(hw),
            mode='bicubic',
            align_corners=False).flatten(2).transpose(1, 2)
    if join in ('default', 'pvg', 'mpvg'):
        x = x + pos
    layered = join != 'default'
    num_layers = sum(arch['depths'])
    eta = num_layers if eta is None else eta
    stream, raw, last = pos, pos, pos
    layer, outs = 0, []
    for s, depth in enumerate(arch['depths']):
        heads = arch['num_heads'][s]
        for j in range(depth):
            pre = f'layers.{s}.blocks.{j}'
            h = _ln(sd, pre + '.norm1', x)
            if layered and layer < eta:
                p = _ln(sd, pre + '.pe_norm', stream if hierarchical else raw)
                stream = p
                if layer == last_source:
                    last = p
                h = h + p
            shift = ws // 2 if j % 2 else 0
            if min(hw) <= ws and not pad_small_map:
                shift = 0
            x = x + ref_window_msa(sd, pre + '.attn', h, hw, heads, ws, shift)
            mlp = F.gelu(
                _lin(sd, pre + '.mlp.fc1', _ln(sd, pre + '.norm2', x)))
            x = x + _lin(sd, pre + '.mlp.fc2', mlp)
            layer += 1
        name = 'norm' if s == len(arch['depths']) - 1 else f'norm{s}'
        if name + '.weight' in sd:
            y = _ln(sd, name, x)
            if join == 'mpvg' and name == 'norm':
                y = y + _ln(sd, 'pe_join.last_norm', last)
            outs.append(y.transpose(1, 2).reshape(b, -1, *hw))
        if s < len(arch['depths']) - 1:
            pre = f'layers.{s}.downsample'
            new_hw = ref_merge(sd, pre, x, hw)[1]
            x, stream, raw, last = (
                ref_merge(sd, pre, t, hw)[0] for t in (x, stream, raw, last))
            hw = new_hw
    return outs


def close(outs, refs, atol=None, ulps=32):
    """Equal stage outputs: up to float32 rounding (``ulps``, see
    :func:`assert_close_f32`), or within ``atol`` (``atol=0``: the same
    path, cached or reloaded)."""
    assert len(outs) == len(refs)
    for out, ref in zip(outs, refs):
        if atol is None:
            assert_close_f32(out, ref, ulps)
        else:
            torch.testing.assert_close(out, ref, rtol=2e-5, atol=atol)


#: Rounding of Swin against mmpretrain's (and the official layout's)
#: forward: measured up to 34 ulps at resized inputs.
OTHER_SWIN_ULPS = 256

CASES = [
    ('default', dict(type='Default'), {}),
    ('lape', dict(type='LaPE'), {}),
    ('lape', dict(type='LaPE', hierarchical=False), dict(hierarchical=False)),
    ('lape', dict(type='LaPE', num_pe_layers=3), dict(eta=3)),
    ('pvg', dict(type='PVG'), {}),
    ('mpvg', dict(type='MPVG'), {}),
    ('mpvg', dict(type='MPVG', last_pe_source=1), dict(last_source=1)),
]


@pytest.mark.parametrize('join,cfg,ref_kwargs', CASES)
def test_join_matches_reference(join, cfg, ref_kwargs):
    model = tiny(cfg)
    img = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        outs = model(img)
        refs = ref_forward(
            official_names(model.state_dict()), img, join, **ref_kwargs)
    close(outs, refs)


def test_joins_differ_from_each_other():
    """The reference is not vacuous: on the same weights the four joins
    give four different outputs."""
    model = tiny(dict(type='MPVG'))
    sd = official_names(model.state_dict())
    img = torch.randn(1, 3, IMG, IMG)
    with torch.no_grad():
        outs = {j: ref_forward(sd, img, j)[-1] for j in JOIN_CFGS}
    for a in JOIN_CFGS:
        for b in JOIN_CFGS:
            if a < b:
                assert not torch.allclose(outs[a], outs[b], atol=1e-3)


def test_other_input_sizes_resize_pe_and_pad_windows():
    """72x56 pixels: stage grids 18x14 (windows padded to 20x16), odd
    merges (9x7 -> 5x4), and the PE resized (bicubic) from 16x16 before
    the per-layer norms."""
    img = torch.randn(1, 3, 72, 56)
    for join, cfg, kwargs in [CASES[1], CASES[5]]:
        model = tiny(cfg)
        with torch.no_grad():
            outs = model(img)
            refs = ref_forward(
                official_names(model.state_dict()), img, join, **kwargs)
        assert [tuple(o.shape[2:]) for o in outs] == [(18, 14), (9, 7), (5, 4),
                                                      (3, 2)]
        close(outs, refs)
    plan = model.pe_plan((18, 14))
    assert [tuple(p.shape) for p in plan.attn[::2]] == [(1, 252, 16),
                                                        (1, 63, 32),
                                                        (1, 20, 64),
                                                        (1, 6, 128)]
    assert tuple(plan.final.shape) == (1, 6, 128)


def test_a_cached_plan_follows_the_pe_resize_mode():
    model = tiny(JOIN_CFGS['lape'])
    img = torch.randn(1, 3, IMG + 32, IMG)  # a grid to resize the PE to
    outs = []
    with torch.no_grad():
        for mode in ('bicubic', 'bilinear', 'bicubic'):
            model.interpolate_mode = mode
            outs.append(model(img)[-1])
            model.cache_pe_plan = False
            torch.testing.assert_close(
                model(img)[-1], outs[-1], rtol=0, atol=0)
            model.cache_pe_plan = True
    assert not torch.equal(outs[0], outs[1])
    assert torch.equal(outs[0], outs[2])


def test_small_map_without_padding_is_unshifted_or_refused():
    """pad_small_map=False (classification): a map equal to a window is not
    shifted, a smaller one is refused with a clear message."""
    model = tiny('LaPE', pad_small_map=False)
    img = torch.randn(1, 3, 2 * IMG, 2 * IMG)  # stage 3 is 4x4 = a window
    with torch.no_grad():
        close(
            model(img),
            ref_forward(
                official_names(model.state_dict()),
                img,
                'lape',
                pad_small_map=False))
    with pytest.raises(ValueError, match='smaller than window_size=4'):
        model(torch.randn(1, 3, IMG, IMG))  # stage 3 is 2x2


def test_stage_norms_layers_and_param_counts():
    """LaPE, PVG and MPVG put a PE norm of the stage's width in every layer
    (PVG/MPVG include layer 0 on Swin, not on the ViT); the counts with a
    1000-way head are MPVG's Table 1 default (28.589M) plus the norms."""
    head = 768 * 1000 + 1000
    counts = {}
    for join, cfg in JOIN_CFGS.items():
        with torch.device('meta'):  # shapes only: no initialisation cost
            model = LaPESwin('tiny', pe_join=cfg, use_abs_pos_embed=True)
        counts[join] = sum(p.numel() for p in model.parameters()) + head
        widths = [
            blk.pe_norm.normalized_shape[0] for blk in model.blocks
            if hasattr(blk, 'pe_norm')
        ]
        if join == 'default':
            assert widths == []
        else:
            assert widths == [96] * 2 + [192] * 2 + [384] * 6 + [768] * 2
        assert hasattr(model.pe_join, 'last_norm') == (join == 'mpvg')
    norms = 2 * (96 * 2 + 192 * 2 + 384 * 6 + 768 * 2)  # 8,832
    assert counts == {
        'default': 28_589_410,
        'lape': 28_589_410 + norms,
        'pvg': 28_589_410 + norms,
        'mpvg': 28_589_410 + norms + 2 * 768,
    }
    assert round(counts['default'] / 1e6, 3) == 28.589
    vit = LaPEViT(
        'test-tiny',
        img_size=32,
        patch_size=8,
        pe_join='PVG',
        with_cls_token=False,
        out_type='avg_featmap')
    assert [hasattr(b, 'pe_norm') for b in vit.blocks] == [0, 1, 1, 1]


def _mmpretrain_pair(arch, img_size, window, scale=0.2, **kwargs):
    from mmpretrain.models import SwinTransformer
    ref = SwinTransformer(
        arch=arch,
        img_size=img_size,
        window_size=window,
        use_abs_pos_embed=True,
        drop_path_rate=0.,
        **kwargs)
    ref.eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * scale)
    sd = ref.state_dict()
    assert detect_swin_format(sd) == 'mmpretrain'
    model = LaPESwin(
        arch if isinstance(arch, str) else 'test-tiny',
        img_size=img_size,
        window_size=window,
        use_abs_pos_embed=True,
        drop_path_rate=0.,
        **kwargs).eval()
    model.load_state_dict(convert_swin_backbone(sd), strict=True)
    return ref, model


def test_default_equals_mmpretrain_swin_tiny_224():
    ref, model = _mmpretrain_pair(
        'tiny', 224, 7, scale=0.02, out_indices=(0, 1, 2, 3))
    assert sum(p.numel()
               for p in ref.parameters()) == sum(p.numel()
                                                 for p in model.parameters())
    img = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        close(model(img), ref(img), ulps=OTHER_SWIN_ULPS)


def test_default_equals_mmpretrain_at_other_sizes():
    ref, model = _mmpretrain_pair(
        TINY, IMG, WS, out_indices=(0, 1, 2, 3), pad_small_map=True)
    with torch.no_grad():
        for size in ((IMG, IMG), (72, 56), (36, 100)):
            img = torch.randn(2, 3, *size)
            outs = model(img)
            close(outs, ref(img), ulps=OTHER_SWIN_ULPS)
            # contiguous NCHW maps (mmcv's CPU RoIAlign misreads others)
            assert all(o.is_contiguous() for o in outs)


def test_mmpretrain_classifier_checkpoint_converts(tmp_path):
    """A whole mmpretrain Swin classifier checkpoint (backbone + linear
    head) converts and gives the same logits in mmlape's classifier."""

    def classifier(backbone):
        return build_classifier(
            backbone,
            dict(type='LinearClsHead', num_classes=5, in_channels=128),
            neck=dict(type='GlobalAveragePooling'))

    common = dict(arch=TINY, img_size=IMG, window_size=WS, pad_small_map=True)
    ref = classifier(
        dict(
            type='SwinTransformer',
            use_abs_pos_embed=True,
            drop_path_rate=0.,
            **common))
    ours = classifier(
        dict(
            type='LaPESwin',
            use_abs_pos_embed=True,
            **dict(common, arch='test-tiny')))
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    ckpt = convert_swin_checkpoint({'state_dict': ref.state_dict()})
    assert ckpt['meta']['converted_from'] == 'mmpretrain'
    ours.load_state_dict(ckpt['state_dict'], strict=True)
    img = torch.randn(2, 3, 56, 72)
    ref.eval(), ours.eval()
    with torch.no_grad():
        assert_close_f32(
            ours(img, mode='tensor'),
            ref(img, mode='tensor'),
            ulps=OTHER_SWIN_ULPS)


def official_checkpoint(ape=True):
    """A random checkpoint in the official layout (keys, buffers and the
    ``model`` wrapper of microsoft/Swin-Transformer), for TINY at WS."""
    g = torch.Generator().manual_seed(3)

    def rnd(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    c0 = TINY['embed_dims']
    sd = {
        'patch_embed.proj.weight': rnd(c0, 3, 4, 4),
        'patch_embed.proj.bias': rnd(c0),
        'patch_embed.norm.weight': 1 + rnd(c0),
        'patch_embed.norm.bias': rnd(c0),
    }
    if ape:
        sd['absolute_pos_embed'] = rnd(1, (IMG // 4)**2, c0)
    for s, (depth, heads) in enumerate(zip(TINY['depths'], TINY['num_heads'])):
        c = c0 * 2**s
        for j in range(depth):
            pre = f'layers.{s}.blocks.{j}.'
            for name, shape in [('norm1', c), ('norm2', c)]:
                sd[pre + name + '.weight'] = 1 + rnd(shape)
                sd[pre + name + '.bias'] = rnd(shape)
            sd[pre + 'attn.relative_position_bias_table'] = rnd(
                (2 * WS - 1)**2, heads)
            sd[pre + 'attn.relative_position_index'] = torch.zeros(
                WS * WS, WS * WS, dtype=torch.long)
            if j % 2:
                sd[pre + 'attn_mask'] = torch.zeros(4, WS * WS, WS * WS)
            for name, (o, i) in [('attn.qkv', (3 * c, c)),
                                 ('attn.proj', (c, c)),
                                 ('mlp.fc1', (4 * c, c)),
                                 ('mlp.fc2', (c, 4 * c))]:
                sd[pre + name + '.weight'] = rnd(o, i)
                sd[pre + name + '.bias'] = rnd(o)
        if s < 3:
            pre = f'layers.{s}.downsample.'
            sd[pre + 'norm.weight'] = 1 + rnd(4 * c)
            sd[pre + 'norm.bias'] = rnd(4 * c)
            sd[pre + 'reduction.weight'] = rnd(2 * c, 4 * c)
    sd['norm.weight'] = 1 + rnd(8 * c0)
    sd['norm.bias'] = rnd(8 * c0)
    sd['head.weight'] = rnd(5, 8 * c0)
    sd['head.bias'] = rnd(5)
    return dict(model=sd, epoch=299)


def test_official_checkpoint_converts_and_matches_reference(tmp_path):
    official = official_checkpoint()
    sd = official['model']
    assert detect_swin_format(sd) == 'official'
    ckpt = convert_swin_checkpoint(official)
    state = ckpt['state_dict']
    assert ckpt['meta']['converted_from'] == 'official'
    torch.testing.assert_close(state['head.fc.weight'], sd['head.weight'])
    assert not any('relative_position_index' in k or 'attn_mask' in k
                   for k in state)
    model = tiny('Default', out_indices=(3, ))
    backbone = {
        k[len('backbone.'):]: v
        for k, v in state.items() if k.startswith('backbone.')
    }
    model.load_state_dict(backbone, strict=True)
    assert detect_swin_format(model.state_dict()) == 'mmlape'
    img = torch.randn(2, 3, 72, 56)
    with torch.no_grad():
        close(
            model(img), ref_forward(sd, img, 'default'), ulps=OTHER_SWIN_ULPS)
    # The same file through init_cfg, and converted by the command-line
    # tool then loaded as mmdet/mmseg do (prefix 'backbone.').
    path = str(tmp_path / 'official.pth')
    torch.save(official, path)
    converted = str(tmp_path / 'converted.pth')
    spec = importlib.util.spec_from_file_location(
        'to_mmlape', osp.join(ROOT, 'tools/convert/to_mmlape.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(['--family', 'swin', path, converted]) == 0
    # never overwrites silently
    assert tool.main(['--family', 'swin', path, converted]) == 2
    for file, prefix in ((path, None), (converted, 'backbone.')):
        loaded = tiny(
            'Default',
            out_indices=(3, ),
            init_cfg=dict(type='Pretrained', checkpoint=file, prefix=prefix))
        loaded.init_weights()
        with torch.no_grad():
            close(loaded(img), model(img), atol=0)
    # A file without the absolute PE (the official Swin-T has ape=False).
    torch.save(official_checkpoint(ape=False), path)
    no_ape = tiny(
        'Default',
        out_indices=(3, ),
        init_cfg=dict(type='Pretrained', checkpoint=path))
    before = no_ape.pos_embed.detach().clone()
    no_ape.init_weights()  # pos_embed is logged as missing, kept as is
    torch.testing.assert_close(no_ape.pos_embed, before)


def test_load_refuses_another_join_and_resizes_pe(tmp_path):
    path = str(tmp_path / 'lape.pth')
    lape = tiny('LaPE')
    save_backbone_checkpoint(lape, path)
    other = tiny(
        'PVG',
        init_cfg=dict(type='Pretrained', checkpoint=path, prefix='backbone.'))
    other.init_weights()  # LaPE and PVG both have all 8 PE norms on Swin
    with pytest.raises(ValueError, match='does not fit the join'):
        tiny(
            'Default',
            init_cfg=dict(
                type='Pretrained', checkpoint=path,
                prefix='backbone.')).init_weights()
    bigger = LaPESwin(
        'test-tiny',
        img_size=96,
        window_size=WS,
        pad_small_map=True,
        out_indices=(0, 1, 2, 3),
        pe_join='LaPE')
    bigger.load_state_dict(lape.state_dict())  # 16x16 PE resized to 24x24
    assert tuple(bigger.pos_embed.shape) == (1, 576, 16)
    with pytest.raises(ValueError, match='window_size=7'):
        LaPESwin(
            'test-tiny',
            img_size=IMG,
            window_size=7,
            out_indices=(0, 1, 2, 3),
            pe_join='LaPE').load_state_dict(lape.state_dict())


@pytest.mark.parametrize('kwargs,match', [
    (dict(pe_join='Share'), r"does not support a staged backbone.*"
     r"\['Default', 'LaPE', 'MPVG', 'PVG'\]"),
    (dict(pe_join='Unshare'), 'does not support a staged backbone'),
    (dict(pe_join=dict(type='LaPE', stages=[(8, 16)])), 'set by the backbone'),
    (dict(pe_join='LaPE', use_abs_pos_embed=False),
     'needs an absolute PE: set use_abs_pos_embed=True'),
    (dict(pe_join=dict(type='MPVG', last_pe_source=8)), 'last_pe_source'),
    (dict(out_indices=(4, )), r'out_indices contains 4'),
    (dict(arch='huge'), "Unknown arch='huge'"),
    (dict(img_size=66), 'divisible by patch_size=4'),
    (dict(window_size=0), 'window_size=0 must be a positive int'),
])
def test_bad_options_raise(kwargs, match):
    kwargs = dict(
        dict(arch='test-tiny', img_size=IMG, window_size=WS), **kwargs)
    with pytest.raises(ValueError, match=match):
        LaPESwin(**kwargs)


def test_the_join_says_whether_swin_owns_an_absolute_pe():
    """Swin asks the built join, however the config names it: the Default
    join needs no PE (plain Swin), a join that acts on one turns it on."""
    from mmlape.models.layers import DefaultJoin, LaPEJoin
    base = dict(arch='test-tiny', img_size=IMG, window_size=WS)
    for join in (None, 'Default', 'DEFAULT', DefaultJoin,
                 dict(type=DefaultJoin)):
        model = LaPESwin(**base, pe_join=join)
        assert model.pos_embed is None and not model.use_abs_pos_embed
        assert type(model.pe_join) is DefaultJoin
    for join in ('lape', LaPEJoin, dict(type=LaPEJoin, hierarchical=False)):
        model = LaPESwin(**base, pe_join=join)
        assert model.pos_embed is not None and model.use_abs_pos_embed
        assert type(model.pe_join) is LaPEJoin
    on = LaPESwin(**base, pe_join=DefaultJoin, use_abs_pos_embed=True)
    assert on.pos_embed is not None
    with pytest.raises(ValueError, match='needs an absolute PE'):
        LaPESwin(**base, pe_join=LaPEJoin, use_abs_pos_embed=False)


def test_registered_for_dense_tasks_and_layer_depth():
    from mmdet.registry import MODELS as DET
    from mmseg.registry import MODELS as SEG
    cfg = dict(
        type='LaPESwin',
        arch='test-tiny',
        img_size=IMG,
        window_size=WS,
        pad_small_map=True,
        out_indices=(0, 1, 2, 3),
        pe_join=dict(type='MPVG'))
    from mmengine.registry import DefaultScope
    for scope, registry in (('mmdet', DET), ('mmseg', SEG)):
        for name in ('LaPESwin', 'mmlape.LaPESwin'):
            with DefaultScope.overwrite_default_scope(scope):
                model = registry.build(dict(cfg, type=name))
            assert type(model) is LaPESwin
    outs = model(torch.randn(1, 3, 80, 48))
    assert [tuple(o.shape[1:]) for o in outs] == [(16, 20, 12), (32, 10, 6),
                                                  (64, 5, 3), (128, 3, 2)]
    depth = model.get_layer_depth
    assert depth('backbone.pos_embed', 'backbone.') == (0, 10)
    assert depth('backbone.layers.1.blocks.1.pe_norm.weight',
                 'backbone.') == (4, 10)
    assert depth('backbone.layers.1.downsample.reduction.weight',
                 'backbone.') == (4, 10)
    assert depth('backbone.pe_join.last_norm.weight', 'backbone.') == (9, 10)


SWIN_CONFIGS = [
    f'configs/swin/swin-tiny{s}_16xb64_in1k.py' for s in config_joins()
]


@pytest.mark.parametrize('path', SWIN_CONFIGS, ids=osp.basename)
def test_config_recipe(path):
    cfg = Config.fromfile(osp.join(ROOT, path))
    bb = cfg.model.backbone
    assert bb.type == 'LaPESwin' and bb.arch == 'tiny'
    join = osp.basename(path).split('_')[0].split('-')[2:]
    assert bb.pe_join.type.lower() == (join[0] if join else 'default')
    assert bb.drop_path_rate == 0.2 and bb.use_abs_pos_embed
    assert cfg.model.neck.type == 'GlobalAveragePooling'
    assert cfg.model.head.in_channels == 768
    assert cfg.model.head.loss.label_smooth_val == 0.1
    assert [a['alpha'] for a in cfg.model.train_cfg.augments] == [0.8, 1.0]
    opt = cfg.optim_wrapper
    assert opt.optimizer.type == 'AdamW'
    assert opt.optimizer.lr == pytest.approx(1e-3)
    assert opt.optimizer.weight_decay == 0.05 and opt.optimizer.eps == 1e-8
    assert opt.clip_grad.max_norm == 5.0
    assert opt.paramwise_cfg.flat_decay_mult == 0.0
    for key in ('.pos_embed', '.pe_norm', '.relative_position_bias_table'):
        assert opt.paramwise_cfg.custom_keys[key]['decay_mult'] == 0.0
    warmup, cosine = cfg.param_scheduler
    assert warmup.end == 20 and cosine.begin == 20
    # the official MIN_LR 1e-5 at the recipe's batch 1024, as a ratio of the
    # (scaled) lr so that it holds at any GPU count
    assert 'eta_min' not in cosine
    assert opt.optimizer.lr * cosine.eta_min_ratio == pytest.approx(1e-5)
    assert cfg.train_cfg.max_epochs == 300
    assert cfg.train_dataloader.batch_size * 16 == 1024
    assert cfg.auto_scale_lr.base_batch_size == 1024
    assert cfg.default_hooks.checkpoint.type == 'AtomicCheckpointHook'
    erasing = [
        t for t in cfg.train_dataloader.dataset.pipeline
        if t['type'] == 'RandomErasing'
    ]
    assert erasing[0]['erase_prob'] == 0.25


@pytest.mark.slow
def test_tiny_swin_through_train_and_test_tools(tmp_path):
    """A tiny MPVG Swin trains for two epochs and is tested, through the
    real tools and mmpretrain's ImageNet loader. The baseline config's
    AtomicCheckpointHook is replaced by mmengine's CheckpointHook here: the
    atomic hook is added on another branch."""
    from mmlape.datasets import generate_pos_shapes
    data = str(tmp_path / 'data')
    generate_pos_shapes(data, num_train=8, num_val=8, seed=1)
    work = str(tmp_path / 'work')
    config = 'configs/swin/swin-tiny-mpvg_16xb64_in1k.py'
    options = [
        '--cfg-options', 'model.backbone.arch=test-tiny',
        'model.backbone.img_size=64', 'model.backbone.window_size=4',
        'model.backbone.pad_small_map=True', 'model.head.in_channels=128',
        'train_dataloader.dataset.pipeline.1.scale=64',
        'val_dataloader.dataset.pipeline.1.scale=72',
        'val_dataloader.dataset.pipeline.2.crop_size=64',
        'test_dataloader.dataset.pipeline.1.scale=72',
        'test_dataloader.dataset.pipeline.2.crop_size=64',
        'default_hooks.checkpoint.type=CheckpointHook',
        'default_hooks.logger.interval=1', 'train_cfg.max_epochs=2',
        'param_scheduler.0.end=1', 'param_scheduler.1.begin=1',
        'randomness.seed=0'
    ] + [
        f'{split}_dataloader.{key}' for split in ('train', 'val', 'test')
        for key in (f'dataset.data_root={data}', 'batch_size=4',
                    'num_workers=0', 'persistent_workers=False')
    ]
    env = dict(os.environ, PYTHONUNBUFFERED='1', OMP_NUM_THREADS='1')

    def run(args):
        out = subprocess.run(
            [sys.executable] + args,
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
            timeout=600)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        return out.stdout + out.stderr

    log = run(['tools/train.py', config, '--work-dir', work] + options)
    assert 'Epoch(train) [2][2/2]' in log
    ckpt = osp.join(work, 'epoch_2.pth')
    state = safe_torch_load(ckpt, map_location='cpu')['state_dict']
    assert 'backbone.pe_join.last_norm.weight' in state
    assert 'backbone.layers.0.blocks.0.pe_norm.weight' in state
    log = run(['tools/test.py', config, ckpt, '--work-dir', work] + options)
    assert 'accuracy/top1' in log
