"""T2T-ViT-7, CeiT-Ti, ViT-Lite-7/4 and CCT-7/3x1 as the one LaPEViT with
other parts: sizes, joins, refusals, starting values, and equivalence with
reference forwards written from the papers' equations on official-layout
weights."""
import argparse
import math
import os
import os.path as osp
import sys

import pytest
import torch
import torch.nn as nn
from conftest import ROOT, n_params
from vit_family_reference import (add_join_norms, ceit_layout, compact_layout,
                                  head_of, reference_family, sinusoid,
                                  t2t_layout)

from mmlape.models import LaPEViT
from mmlape.models.checkpoint.vit_family import (convert_vit_family,
                                                 convert_vit_family_checkpoint,
                                                 detect_vit_family_format)

sys.path.insert(0, ROOT)
from tools.convert import to_mmlape  # noqa: E402

GAP = dict(with_cls_token=False, out_type='avg_featmap')
ARCHS = {
    't2t': 't2t-vit-7',
    't2t_transformer': 't2t-vit-7',
    'ceit': 'ceit-tiny',
    'vit_lite': 'vit-lite-7/4',
    'cct': 'cct-7/3x1'
}
JOINS = {'default': 'Default', 'lape': 'LaPE', 'pvg': 'PVG', 'mpvg': 'MPVG'}


@pytest.fixture
def no_init(monkeypatch):
    """Plain normal sampling where only sizes matter (truncated normal
    sampling of 4M values costs seconds on a small CPU)."""

    def fast(t, *args, **kwargs):
        with torch.no_grad():
            return t.normal_(0, 0.02)

    for name in ('trunc_normal_', 'kaiming_normal_', 'orthogonal_'):
        monkeypatch.setattr(torch.nn.init, name, fast)


def join_kwargs(family, join):
    """Backbone arguments of a join: PVG/MPVG drop the class token (CCT has
    none; its SeqPool stays)."""
    kwargs = dict(pe_join=JOINS[join])
    if join in ('pvg', 'mpvg') and family != 'cct':
        kwargs.update(GAP)
    return kwargs


def tiny(family, join='default', **kwargs):
    """The family's arch at 64 dims, 2 layers, 2 heads."""
    arch = dict(
        LaPEViT.arch_zoo[ARCHS[family]],
        embed_dims=64,
        num_layers=2,
        num_heads=2,
        feedforward_channels=128)
    if family.startswith('t2t'):
        attention = 'performer' if family == 't2t' else 'transformer'
        arch['tokenizer'] = dict(
            type='T2T', token_dims=16, attention=attention)
    kwargs = dict(join_kwargs(family, join), **kwargs)
    if family in ('t2t', 't2t_transformer', 'ceit'):
        kwargs.setdefault('img_size', 64)
    return LaPEViT(arch, **kwargs)


def layout(family, join='default', dims=64, depth=2, hidden=128):
    if family.startswith('t2t'):
        attention = 'performer' if family == 't2t' else 'transformer'
        sd = t2t_layout(dims, depth, hidden, 16, attention=attention)
    elif family == 'ceit':
        sd = ceit_layout(dims, depth, hidden)
    else:
        sd = compact_layout(family, dims, depth, hidden)
    if join in ('pvg', 'mpvg') and family != 'cct':
        # no class token: drop it, its PE row, and CeiT's LCA
        for key in ('cls_token', 'classifier.class_emb'):
            sd.pop(key, None)
        key = ('classifier.positional_emb'
               if family == 'vit_lite' else 'pos_embed')
        if family.startswith('t2t'):  # the fixed sinusoid of the patches
            sd[key] = sinusoid(sd[key].shape[1] - 1, dims)
        else:
            sd[key] = sd[key][:, 1:]
        for key in [k for k in sd if k.startswith(('lca.', 'pos_layer'))]:
            del sd[key]
    if join != 'default':
        add_join_norms(sd, join, depth, dims)
    return sd


# ----------------------------------------------------------------------
# sizes


@pytest.mark.parametrize('arch,classes,params,paper', [
    ('t2t-vit-7', 1000, 4_255_694, 4.3),
    ('ceit-tiny', 1000, 6_356_904, 6.4),
    ('vit-lite-7/4', 100, 3_740_004, 3.7),
    ('vit-lite-7/4', 10, 3_716_874, 3.7),
    ('cct-7/3x1', 100, 3_783_269, 3.78),
    ('cct-7/3x1', 10, 3_760_139, 3.76),
])
def test_parameter_counts_equal_the_originals(arch, classes, params, paper,
                                              no_init):
    """Backbone plus a linear classifier, default join, as the papers count
    them (T2T-ViT's fixed PE and Performer features are not trained; with
    them, as the official ``model.parameters()`` counts, 4,310,222)."""
    model = LaPEViT(arch)
    total = n_params(model) + model.embed_dims * classes + classes
    assert total == params
    digits = len(str(paper).split('.')[1])
    assert round(total / 1e6, digits) == paper
    if arch == 't2t-vit-7':
        fixed = sum(b.numel() for b in model.buffers())
        assert total + fixed == 4_310_222


def _lca_params(c, layers, hidden):
    return (layers * c + 2 * (2 * c) + (3 * c * c + 3 * c) + (c * c + c) +
            (c * hidden + hidden) + (hidden * c + c))


@pytest.mark.parametrize('family', ['t2t', 'ceit', 'vit_lite', 'cct'])
def test_each_join_adds_what_its_definition_implies(family, no_init):
    """LaPE: +2C per layer. PVG: -class token, -its PE row (a learnable PE
    only), +2C per layer 1..L-1 (and for CeiT, GAP instead of LCA).
    MPVG: PVG +2C (its last PE norm)."""
    counts = {
        join: n_params(LaPEViT(ARCHS[family], **join_kwargs(family, join)))
        for join in JOINS
    }
    model = LaPEViT(ARCHS[family])
    C, L = model.embed_dims, model.num_layers
    base = counts['default']
    has_cls = family != 'cct'
    learnable_row = C if family in ('ceit', 'vit_lite') else 0
    pvg = base - (C if has_cls else 0) - learnable_row + 2 * C * (L - 1)
    if family == 'ceit':
        pvg -= _lca_params(C, L, model.arch_settings['feedforward_channels'])
    assert counts['lape'] == base + 2 * C * L
    assert counts['pvg'] == pvg
    assert counts['mpvg'] == pvg + 2 * C


def test_share_and_unshare_on_the_family(no_init):
    base = n_params(LaPEViT('vit-lite-7/4'))
    assert n_params(LaPEViT('vit-lite-7/4', pe_join='Share')) == base
    assert n_params(LaPEViT('vit-lite-7/4', pe_join='Unshare')) == \
        base + 6 * 65 * 256
    with pytest.raises(ValueError, match="does not support pe_type='sincos1d"):
        LaPEViT('t2t-vit-7', pe_join='Unshare')  # a fixed PE


@pytest.mark.parametrize('arch,size,grid', [('t2t-vit-7', 224, (14, 14)),
                                            ('ceit-tiny', 224, (14, 14)),
                                            ('vit-lite-7/4', 32, (8, 8)),
                                            ('cct-7/3x1', 32, (16, 16))])
def test_token_grids(arch, size, grid, no_init):
    model = LaPEViT(arch)
    assert model.grid_size == grid and model.img_size == (size, size)
    tokens, hw = model.patch_embed(torch.randn(1, 3, size, size))
    assert hw == grid and tokens.shape == (1, grid[0] * grid[1],
                                           model.embed_dims)


# ----------------------------------------------------------------------
# refusals


@pytest.mark.parametrize('join', ['PVG', 'MPVG'])
def test_lca_refuses_joins_without_a_class_token(join, no_init):
    with pytest.raises(ValueError) as err:
        LaPEViT('ceit-tiny', pe_join=join)
    msg = str(err.value)
    assert f"pe_join.type='{join}' removes the class token" in msg
    assert "pooling.type='LCA'" in msg
    assert "GAP instead of LCA" in msg and 'docs/recipes.md' in msg
    # the resolution the message names builds
    LaPEViT('ceit-tiny', pe_join=join, **GAP)
    recipes = open(osp.join(ROOT, 'docs', 'recipes.md')).read()
    assert '| CeiT-Ti | PVG, MPVG |' in recipes


@pytest.mark.parametrize('kwargs,match', [
    (dict(arch='ceit-tiny', with_cls_token=False),
     "pooling.type='LCA' needs with_cls_token=True"),
    (dict(arch='cct-7/3x1',
          out_indices=(0, 6)), "'SeqPool' pools the last layer only"),
    (dict(arch='t2t-vit-7', patch_size=16),
     "patch_size/patch_bias set the Patch tokenizer, but tokenizer.type="),
    (dict(arch='deit-tiny', tokenizer=dict(type='Nope')),
     r"Unknown tokenizer.type='Nope'; choose one of \['Conv', 'I2T', "),
    (dict(arch='deit-tiny', ffn=dict(type='LeFF', size=3)),
     r"Unknown option\(s\) \['size'\] for ffn.type='LeFF'"),
    (dict(arch='deit-tiny', ffn=dict(type='MLP', embed_dims=3)),
     r"ffn options \['embed_dims'\] are set by the backbone"),
    (dict(arch='deit-tiny',
          out_type='pooled'), "out_type='pooled' needs pooling=dict"),
    (dict(arch='deit-tiny',
          pooling='GAP'), "pooling='GAP' is used with out_type='pooled'"),
    (dict(arch='deit-tiny', tokenizer=dict(
        type='T2T', attention='x')), "tokenizer.attention='x'; choose one of"),
    (dict(
        arch=dict(
            embed_dims=8,
            num_layers=1,
            num_heads=1,
            feedforward_channels=8,
            tokenizr='T2T')), r"Unknown arch key\(s\) \['tokenizr'\]"),
])
def test_bad_parts_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LaPEViT(**kwargs)


def test_part_types_resolve_case_insensitively():
    model = LaPEViT(
        'test-tiny',
        img_size=32,
        tokenizer='conv',
        ffn='leff',
        with_cls_token=False,
        out_type='pooled',
        pooling='seqpool')
    assert type(model.patch_embed).__name__ == 'ConvTokenizer'
    assert type(model.blocks[0].mlp).__name__ == 'LeFF'
    assert type(model.pool).__name__ == 'SeqPool'
    assert model(torch.randn(2, 3, 32, 32))[0].shape == (2, 64)


# ----------------------------------------------------------------------
# starting values


def _std_close(t, std, tol=0.1):
    return abs(t.std().item() / std - 1) < tol


def test_starting_values_t2t():
    model = LaPEViT('t2t-vit-7')
    for i in (1, 2):
        layer = getattr(model.patch_embed, f'attention{i}')
        m = layer.w.shape[0]
        assert m == 32 and not layer.w.requires_grad
        torch.testing.assert_close(
            layer.w @ layer.w.T, m * torch.eye(m), atol=1e-4, rtol=0)
        assert _std_close(layer.kqv.weight, 0.02)  # the generic pass
        assert (layer.kqv.bias == 0).all()
    torch.testing.assert_close(model.pos_embed, sinusoid(197, 256))
    assert 'pos_embed' not in model.state_dict()
    assert model.blocks[0].attn.qkv.bias is None
    assert model.blocks[0].norm1.eps == 1e-5
    assert _std_close(model.cls_token, 0.02, 0.3)


def test_starting_values_ceit():
    model = LaPEViT('ceit-tiny')
    assert (model.pool.pos_layer_embed == 0).all()
    assert _std_close(model.pool.attn.qkv.weight, 0.02)
    assert (model.pool.attn.qkv.bias == 0).all()
    assert (model.patch_embed.bn.weight == 1).all()
    leff = model.blocks[0].mlp
    assert (leff.bn3.weight == 1).all() and (leff.bn3.bias == 0).all()
    # PyTorch's own convolution init (kaiming-uniform, a=sqrt(5)), as the
    # official code leaves convolutions: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    fan_in = 3 * 7 * 7
    assert model.patch_embed.conv.weight.abs().max() <= fan_in**-0.5
    assert _std_close(model.patch_embed.conv.weight, (3 * fan_in)**-0.5)
    assert _std_close(model.pos_embed, 0.02)
    assert model.blocks[0].attn.qkv.bias is not None
    assert model.norm.eps == 1e-6


@pytest.mark.parametrize('arch', ['vit-lite-7/4', 'cct-7/3x1'])
def test_starting_values_compact(arch):
    model = LaPEViT(arch)
    assert _std_close(model.pos_embed, 0.2)  # Compact-Transformers: 0.2
    if arch == 'vit-lite-7/4':
        weight = model.patch_embed.proj.weight
        assert (model.cls_token == 0).all()
    else:
        weight = model.patch_embed.layers[0].conv.weight
        assert not hasattr(model, 'cls_token')
        assert _std_close(model.pool.attention_pool.weight, 0.02, 0.3)
    fan_in = weight[0].numel()
    assert _std_close(weight, math.sqrt(2 / fan_in))  # Kaiming normal
    assert model.blocks[0].norm2_in_residual
    assert model.blocks[0].attn.attn_drop == 0.  # a training option


# ----------------------------------------------------------------------
# equivalence with the papers' equations, on official-layout weights

CASES = [(f, j) for f in ('t2t', 't2t_transformer', 'ceit', 'vit_lite', 'cct')
         for j in JOINS]


@pytest.mark.parametrize('family,join', CASES)
def test_equals_reference_forward_on_official_weights(family, join):
    """Default join: the model is the paper's; other joins: the SPEC's
    equations on the same parts. The weights are built in the official
    repository's layout and converted by mmlape."""
    torch.manual_seed(1)
    sd = layout(family, join)
    img = torch.randn(2, 3, 32 if family in ('vit_lite', 'cct') else 64,
                      32 if family in ('vit_lite', 'cct') else 64)
    fmt = detect_vit_family_format(sd)
    backbone, head = convert_vit_family(sd)
    model = tiny(family, join).eval()
    model.load_state_dict(backbone, strict=True)
    with torch.no_grad():
        ours = model(img)[0]
        ref = reference_family(family, sd, img, join)
        torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5)
        weight, bias = head_of(family, sd)
        torch.testing.assert_close(head['weight'], weight)
        torch.testing.assert_close(head['bias'], bias)
    assert fmt == {
        't2t': 't2t_vit',
        't2t_transformer': 't2t_vit',
        'ceit': 'ceit'
    }.get(family, 'compact')


def test_performer_dropout_only_in_training():
    model = tiny('t2t')
    img = torch.randn(2, 3, 64, 64)
    model.train()
    a, b = model(img)[0], model(img)[0]
    assert not torch.allclose(a, b)  # T2T's fixed 0.1 dropout
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(img)[0], model(img)[0])


@pytest.mark.usefixtures('hosts_applied')  # the process's allow-list
@pytest.mark.parametrize('family', ['t2t', 'ceit', 'vit_lite', 'cct'])
def test_official_layouts_load_at_full_size(family, tmp_path, no_init):
    """A file in the official layout at the real size (T2T-ViT: timm's
    wrapper with ``state_dict_ema`` and ``args``; CeiT: DeiT's ``model``
    wrapper; Compact-Transformers: a bare state dict) converts and loads
    strictly into the real arch; the classifier lands in the head."""
    model = LaPEViT(ARCHS[family])
    c = model.embed_dims
    if family == 't2t':
        sd = t2t_layout(256, 7, 512, 64, img=224, num_classes=1000)
        ema = {k: v + 1 if k == 'cls_token' else v for k, v in sd.items()}
        ckpt = dict(
            epoch=309,
            state_dict=sd,
            state_dict_ema=ema,
            args=argparse.Namespace(model='t2t_vit_7', lr=1e-3))
    elif family == 'ceit':
        sd = ceit_layout(192, 12, 768, img=224, num_classes=1000)
        ckpt = dict(model=sd, epoch=299)
    else:
        sd = compact_layout(family, 256, 7, 512, num_classes=100)
        ckpt = sd
    path = str(tmp_path / 'official.pth')
    torch.save(ckpt, path)
    dst = str(tmp_path / 'mmlape.pth')
    assert to_mmlape.main(['--family', 'vit-family', path, dst]) == 0
    # the tool leaves the process's allow-list as it was
    assert argparse.Namespace in torch.serialization.get_safe_globals()
    state = torch.load(dst, weights_only=True)['state_dict']
    backbone = {
        k[len('backbone.'):]: v
        for k, v in state.items() if k.startswith('backbone.')
    }
    model.load_state_dict(backbone, strict=True)
    classes = 1000 if family in ('t2t', 'ceit') else 100
    assert state['head.layers.head.weight'].shape == (classes, c)
    if family == 't2t':  # the EMA weights, as T2T-ViT reports them
        torch.testing.assert_close(model.cls_token, sd['cls_token'] + 1)
        plain = str(tmp_path / 'plain.pth')
        assert to_mmlape.main(
            ['--family', 'vit-family', path, plain, '--no-ema']) == 0
        torch.testing.assert_close(
            torch.load(plain)['state_dict']['backbone.cls_token'],
            sd['cls_token'])
    official = sum(v.numel() for k, v in sd.items()
                   if 'running_' not in k and 'num_batches' not in k)
    ours = (
        n_params(model) +
        sum(b.numel() for b in model.buffers() if b.dtype.is_floating_point) -
        sum(b.numel() for n, b in model.named_buffers() if 'running_' in n) +
        classes * c + classes)
    assert ours == official  # same tensors, no more, no less


@pytest.mark.parametrize('family,join', [('t2t', 'default'), ('t2t', 'lape'),
                                         ('ceit', 'default'),
                                         ('vit_lite', 'default'),
                                         ('cct', 'lape')])
def test_official_layouts_load_through_init_cfg(family, join, tmp_path):
    """An official file given to ``init_cfg`` (``load_pretrained``) is
    converted as the converter tool converts it: every tensor of the model
    comes from the file (T2T-ViT: its EMA weights), none is left as
    initialised."""
    torch.manual_seed(2)
    sd = layout(family, join)
    if family == 't2t':
        ema = {k: v + 1 if k == 'cls_token' else v for k, v in sd.items()}
        ckpt = dict(
            state_dict=sd, state_dict_ema=ema, args=argparse.Namespace(a=1))
        sd = ema
    elif family == 'ceit':
        ckpt = dict(model=sd)
    else:
        ckpt = sd
    path = str(tmp_path / 'official.pth')
    torch.save(ckpt, path)
    want = tiny(family, join)
    want.load_state_dict(convert_vit_family(sd)[0], strict=True)
    got = tiny(family, join)
    got.load_pretrained(path, prefix='backbone.')
    for key, value in want.state_dict().items():
        torch.testing.assert_close(got.state_dict()[key], value, msg=key)
    if family == 't2t':
        torch.testing.assert_close(got.cls_token,
                                   ckpt['state_dict']['cls_token'] + 1)


def test_converter_tool_refuses_unsafe_and_missing_files(tmp_path, capsys):
    bad = str(tmp_path / 'bad.pth')
    torch.save({'state_dict': t2t_layout(), 'fn': os.getcwd}, bad)
    dst = str(tmp_path / 'out.pth')
    assert to_mmlape.main(['--family', 'vit-family', bad, dst]) == 2
    assert 'Refusing to load checkpoint' in capsys.readouterr().err
    assert to_mmlape.main(
        ['--family', 'vit-family',
         str(tmp_path / 'no.pth'), dst]) == 2
    assert 'does not exist' in capsys.readouterr().err
    assert not osp.exists(dst)


def test_t2t_converter_refuses_a_pe_that_is_not_the_sinusoid():
    sd = t2t_layout()
    sd['pos_embed'] = sd['pos_embed'] + 0.5
    with pytest.raises(ValueError, match='is not the fixed 1D sinusoid'):
        convert_vit_family(sd)


def test_converter_refuses_unknown_keys():
    sd = compact_layout('cct')
    sd['classifier.extra.weight'] = torch.zeros(1)
    with pytest.raises(ValueError, match='Cannot convert key "classifier'):
        convert_vit_family(sd)
    with pytest.raises(ValueError, match='Not a T2T-ViT/CeiT/ViT-Lite/CCT'):
        convert_vit_family({'foo.weight': torch.zeros(1)})


@pytest.mark.parametrize('out_type', ['cls_token', 'avg_featmap'])
def test_equals_mmpretrain_t2t_vit(out_type):
    """mmpretrain's ``T2T_ViT`` (Transformer token layers; its Performer is
    not implemented) on the same weights, through the converter.

    mmpretrain 1.2.0 passes ``qk_scale`` to an attention that divides the
    logits by it, so its logits are multiplied by ``sqrt(head_dims)`` in
    every layer (token layers and encoder) where the official code
    multiplies by ``in_dims ** -0.5`` and ``head_dims ** -0.5``. mmlape
    reproduces it with ``qk_scale`` (its models keep the official scale).
    """
    from mmpretrain.models import T2T_ViT
    torch.manual_seed(2)
    cls = out_type == 'cls_token'
    ref = T2T_ViT(
        img_size=64,
        embed_dims=64,
        num_layers=2,
        t2t_cfg=dict(token_dims=16),
        layer_cfgs=dict(num_heads=2, feedforward_channels=128),
        out_type=out_type,
        with_cls_token=cls)
    if cls:  # (mmpretrain's init_weights needs a class token)
        ref.init_weights()
    ref.eval()  # (mmpretrain's train() returns None: no chaining)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if 'ln' in name or 'norm' in name:
                p.add_(torch.randn_like(p) * 0.1)
    sd = {'backbone.' + k: v for k, v in ref.state_dict().items()}
    sd['head.layers.head.weight'] = torch.randn(10, 64)
    out = convert_vit_family_checkpoint(sd)
    assert out['meta']['converted_from'] == 'mmpretrain_t2t'
    assert 'head.layers.head.weight' in out['state_dict']
    backbone = {
        k[len('backbone.'):]: v
        for k, v in out['state_dict'].items() if k.startswith('backbone.')
    }
    arch = dict(
        LaPEViT.arch_zoo['t2t-vit-7'],
        embed_dims=64,
        num_layers=2,
        num_heads=2,
        feedforward_channels=128,
        qk_scale=32**0.5,
        tokenizer=dict(
            type='T2T',
            token_dims=16,
            attention='transformer',
            qk_scale=16**0.5))
    model = LaPEViT(
        arch, img_size=64, with_cls_token=cls, out_type=out_type).eval()
    model.load_state_dict(backbone, strict=True)
    img = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(
            model(img)[0], ref(img)[0], rtol=1e-4, atol=1e-5)
        official = tiny(
            't2t_transformer', with_cls_token=cls, out_type=out_type).eval()
        official.load_state_dict(backbone, strict=True)
        assert not torch.allclose(official(img)[0], ref(img)[0], atol=1e-3)


def test_lca_pools_every_layers_class_token():
    """LCA sees the class token after each block, before any norm."""
    model = tiny('ceit').eval()
    img = torch.randn(2, 3, 64, 64)
    seen = []
    pool_forward = model.pool.forward

    def spy(x, extra):
        seen.append(x)
        return pool_forward(x, extra)

    model.pool.forward = spy
    with torch.no_grad():
        model(img)
        x, hw = model.patch_embed(img)
        plan = model.pe_plan(hw)
        x = model.embed(x, plan)
        expected = []
        for i in range(model.num_layers):
            x = model.forward_blocks(x, plan, i, i + 1, hw)
            expected.append(x[:, 0])
    torch.testing.assert_close(seen[0], torch.stack(expected, 1))


def test_leff_and_i2t_run_on_other_grids():
    """Non-square inputs: the PE is resized once, LeFF uses the grid."""
    model = tiny('ceit', 'lape').eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 96, 64))[0]
    assert out.shape == (1, 64)
    t2t = tiny('t2t').eval()
    with torch.no_grad():
        assert t2t(torch.randn(1, 3, 48, 80))[0].shape == (1, 64)


def test_norm2_in_residual_is_the_compact_transformers_layer():
    """``y = LN2(x') + FFN(LN2(x'))`` against a hand-written layer."""
    from mmlape.models.layers import TransformerBlock
    blk = TransformerBlock(32, 2, 64, norm2_in_residual=True).eval()
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        a = x + blk.attn(blk.norm1(x))
        a = blk.norm2(a)
        want = a + blk.mlp.fc2(nn.functional.gelu(blk.mlp.fc1(a)))
        torch.testing.assert_close(blk(x), want)


def test_complexity_covers_the_family(capsys, no_init):
    from tools.analysis import complexity
    assert {'t2t-vit-7', 'ceit-tiny', 'vit-lite-7/4',
            'cct-7/3x1'} <= set(complexity.DEFAULT_ARCHS)
    assert complexity.main(['--archs', 'vit-lite-7/4', 'cct-7/3x1']) == 0
    rows = [
        ln.split('|')[1:-1] for ln in capsys.readouterr().out.splitlines()
        if ln.startswith(('| vit-lite', '| cct'))
    ]
    diff = {
        (r[0].strip(), r[1].strip()): int(r[5].replace(',', ''))
        for r in rows
    }
    C, L = 256, 7
    assert diff[('cct-7/3x1', 'LaPE')] == 2 * C * L
    assert diff[('cct-7/3x1', 'MPVG')] == 2 * C * L  # no class token
    assert diff[('vit-lite-7/4', 'PVG')] == -2 * C + 2 * C * (L - 1)
    assert diff[('vit-lite-7/4', 'Unshare')] == (L - 1) * 65 * C
    assert all(float(r[4]) > 0 for r in rows)  # GFLOPs


def test_received_pe_of_the_fixed_sinusoid():
    """T2T-ViT: with LaPE a layer receives the normalised sinusoid
    (``LN'_l`` of the stream); with the default join the sinusoid through
    ``norm1``'s affine, as for any PE in the residual stream."""
    from mmlape.analysis import received_pes
    lape = tiny('t2t', 'lape').eval()
    with torch.no_grad():
        for blk in lape.blocks:
            blk.pe_norm.weight.add_(torch.randn_like(blk.pe_norm.weight))
        pes = received_pes(lape)
        raw = sinusoid(17, 64)[0]
        first = lape.blocks[0].pe_norm(raw)
        torch.testing.assert_close(pes[0], first)
        torch.testing.assert_close(pes[1], lape.blocks[1].pe_norm(first))
        default = tiny('t2t').eval()
        norm1 = default.blocks[1].norm1
        norm1.weight.add_(1)
        torch.testing.assert_close(
            received_pes(default)[1], raw * norm1.weight + norm1.bias)
