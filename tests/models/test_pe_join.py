"""Each join against the reference written from docs/methods.md."""
import pytest
import torch
from conftest import IMG, tiny_vit
from reference import reference_forward, reference_relative_lape

from mmlape.models import LaPEViT, build_pe_join, resize_pos_embed
from mmlape.models.layers import resolve_pe_join
from mmlape.models.layers.pos_embed import ABSOLUTE_PE_TYPES, ROTARY_PE_TYPES


def tiny(pe_join, with_cls_token=True, out_type='raw', **kwargs):
    model = tiny_vit(pe_join, with_cls_token, out_type, **kwargs)
    # Non-trivial norms, so that a mixed-up norm cannot pass unnoticed.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if 'norm' in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


CASES = [
    ('default', dict(type='Default'), True, {}),
    ('share', dict(type='Share'), True, {}),
    ('unshare', dict(type='Unshare'), True, {}),
    ('lape', dict(type='LaPE'), True, {}),
    ('lape', dict(type='LaPE'), False, {}),
    ('lape', dict(type='LaPE',
                  hierarchical=False), True, dict(hierarchical=False)),
    ('lape', dict(type='LaPE', num_pe_layers=2), True, dict(eta=2)),
    ('pvg', dict(type='PVG'), False, {}),
    ('mpvg', dict(type='MPVG'), False, {}),
    ('mpvg', dict(type='MPVG', last_pe_source=2), False, dict(last_source=2)),
]


@pytest.mark.parametrize('join,cfg,cls_token,ref_kwargs', CASES)
def test_join_matches_spec(join, cfg, cls_token, ref_kwargs):
    model = tiny(cfg, with_cls_token=cls_token)
    img = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        out = model(img)[0]
        ref = reference_forward(model, img, join, **ref_kwargs)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def peaked(model):
    """Larger query and key weights: logits far from zero, so that what
    rotates them shows in the outputs (at DeiT's starting std the softmax
    of a tiny model is nearly uniform)."""
    with torch.no_grad():
        for blk in model.blocks:
            blk.attn.qkv.weight.normal_(0, 0.3)
    return model


#: Rotary PEs with an absolute PE beside them (``ape_type``), from the
#: type lists: each rotary type beside each absolute type.
ROTARY_APE = [(r, a) for r in ROTARY_PE_TYPES for a in ABSOLUTE_PE_TYPES]


@pytest.mark.parametrize('pe_type,ape_type,join,cfg,cls_token,ref_kwargs', [
    pytest.param(r, a, *case, id=f'{r}+{a}-{case[0]}-{i}')
    for r, a in ROTARY_APE
    for i, case in enumerate(CASES) if resolve_pe_join(case[1])[0].fits(a)
])
def test_join_on_a_rotary_model_acts_on_its_absolute_pe(
        pe_type, ape_type, join, cfg, cls_token, ref_kwargs):
    """Every join beside a rotary PE is its reference equation applied to
    the absolute PE (``pos_embed``), the rotation in every layer's
    attention."""
    torch.manual_seed(0)
    model = peaked(
        tiny(
            cfg, with_cls_token=cls_token, pe_type=pe_type, ape_type=ape_type))
    assert model.pe_join.pe_type == ape_type
    img = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        out = model(img)[0]
        ref = reference_forward(model, img, join, **ref_kwargs)
        # (peaked logits: float32 rounding grows to ~1e-5)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        model.rope_type = None  # the reference without the rotation
        assert not torch.allclose(
            out, reference_forward(model, img, join, **ref_kwargs), atol=1e-2)


@pytest.mark.parametrize('pe_type', ROTARY_PE_TYPES)
def test_rotary_pe_alone_refuses_a_join_that_needs_an_absolute_one(pe_type):
    """With a rotary PE alone, a join that acts on a PE is refused in one
    line naming the join and the PE type; the default join takes it."""
    from mmlape.models.layers import pe_join_classes
    needs = [n for n, c in pe_join_classes().items() if not c.fits(pe_type)]
    assert set(needs) >= {'Share', 'Unshare', 'LaPE', 'PVG', 'MPVG'}
    for name in needs:
        cls_token = pe_join_classes()[name].allows_cls_token
        with pytest.raises(ValueError) as err:
            tiny(name, with_cls_token=cls_token, pe_type=pe_type)
        message = str(err.value)
        assert '\n' not in message
        assert f"pe_join.type={name!r}" in message, message
        assert f"pe_type={pe_type!r}" in message, message
        assert "ape_type='learnable'" in message, message
    model = peaked(tiny('Default', pe_type=pe_type))
    img = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        torch.testing.assert_close(
            model(img)[0],
            reference_forward(model, img, 'default'),
            rtol=1e-4,
            atol=1e-4)


def test_joins_differ_from_each_other():
    """Same weights, different joins, different outputs (the test above
    would be vacuous if every join computed the same thing)."""
    torch.manual_seed(1)
    base = tiny(dict(type='LaPE'))
    img = torch.randn(1, 3, IMG, IMG)
    outs = {}
    with torch.no_grad():
        for join in ('default', 'share', 'lape'):
            outs[join] = reference_forward(base, img, join)
    assert not torch.allclose(outs['default'], outs['share'], atol=1e-4)
    assert not torch.allclose(outs['default'], outs['lape'], atol=1e-4)
    hier = reference_forward(base, img, 'lape', hierarchical=True)
    flat = reference_forward(base, img, 'lape', hierarchical=False)
    assert not torch.allclose(hier, flat, atol=1e-4)


def test_lape_relative_pe_matches_spec():
    model = tiny(dict(type='LaPE'), pe_type='relative')
    img = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        torch.testing.assert_close(
            model(img)[0],
            reference_relative_lape(model, img),
            rtol=1e-5,
            atol=1e-5)
    # The relative PE norm normalises over the key axis (N patches).
    assert model.blocks[0].pe_norm.normalized_shape == (16, )


def test_mpvg_gap_is_mean_of_per_token_output():
    """GAP of (LN(x) + LN'(pos_0)) computed with the folded (1, C) term
    equals pooling the per-token output."""
    model = tiny(dict(type='MPVG'), with_cls_token=False)
    gap = tiny(dict(type='MPVG'), with_cls_token=False, out_type='avg_featmap')
    gap.load_state_dict(model.state_dict())
    img = torch.randn(3, 3, IMG, IMG)
    with torch.no_grad():
        torch.testing.assert_close(
            gap(img)[0], model(img)[0].mean(1), rtol=1e-5, atol=1e-5)


def test_pe_norm_runs_after_resize():
    """LN(resize(pe)) is not resize(LN(pe)); mmlape does the former."""
    model = tiny(dict(type='LaPE'))
    hw = (6, 3)
    with torch.no_grad():
        plan = model.pe_plan(hw)
        pos = resize_pos_embed(model.pos_embed, (4, 4), hw)
        want = model.blocks[0].pe_norm(pos)
        other = resize_pos_embed(model.blocks[0].pe_norm(model.pos_embed),
                                 (4, 4), hw)
    torch.testing.assert_close(plan.attn[0], want)
    assert plan.attn[0].shape == (1, 1 + 18, 64)
    assert not torch.allclose(plan.attn[0], other, atol=1e-3)


def test_pe_layers_and_state_dict_names():
    lape = tiny(dict(type='LaPE', num_pe_layers=3))
    pvg = tiny(dict(type='PVG'), with_cls_token=False)
    mpvg = tiny(dict(type='MPVG'), with_cls_token=False)
    assert [hasattr(b, 'pe_norm') for b in lape.blocks] == [1, 1, 1, 0]
    assert [hasattr(b, 'pe_norm') for b in pvg.blocks] == [0, 1, 1, 1]
    keys = set(mpvg.state_dict())
    assert 'blocks.1.pe_norm.weight' in keys
    assert 'pe_join.last_norm.weight' in keys
    assert 'cls_token' not in keys
    assert tuple(mpvg.pos_embed.shape) == (1, 16, 64)
    unshare = tiny(dict(type='Unshare'))
    assert tuple(unshare.pos_embed.shape) == (4, 17, 64)


@pytest.mark.parametrize('cfg,match', [
    (dict(type='Nope'), r"Unknown pe_join.type='Nope'"),
    (dict(type='LaPE', num_pe_layers=5), r'num_pe_layers=5.*\[1, 4\]'),
    (dict(type='LaPE', num_pe_layers=0), 'num_pe_layers=0'),
    (dict(type='LaPE', hierarchical='yes'), 'hierarchical'),
    (dict(type='LaPE', depth=3), r"Unknown option\(s\) \['depth'\]"),
    (dict(type='Share', num_layers=3), 'set by the backbone'),
])
def test_bad_join_options_raise(cfg, match):
    with pytest.raises((ValueError, TypeError), match=match):
        LaPEViT('test-tiny', img_size=IMG, patch_size=8, pe_join=cfg)


@pytest.mark.parametrize('join', ['PVG', 'MPVG'])
def test_gap_joins_read_out_without_a_class_token(join):
    """A join without a class-token position builds the papers' model when
    the readout is left unset: no class token, GAP. A class token or its
    readout stated beside it is refused by the join, and an arch's own
    readout (CCT's sequence pooling) is kept."""
    vit = LaPEViT('test-tiny', img_size=IMG, patch_size=8, pe_join=join)
    assert (vit.with_cls_token, vit.out_type) == (False, 'avg_featmap')
    assert 'cls_token' not in dict(vit.named_parameters())
    assert vit(torch.randn(2, 3, IMG, IMG))[0].shape == (2, 64)
    for stated in (dict(with_cls_token=True), dict(out_type='cls_token')):
        with pytest.raises(
                ValueError, match='incompatible with a class token'):
            LaPEViT(
                'test-tiny',
                img_size=IMG,
                patch_size=8,
                pe_join=join,
                **stated)
    dense = LaPEViT(
        'test-tiny',
        img_size=IMG,
        patch_size=8,
        pe_join=join,
        out_type='featmap')
    assert not dense.with_cls_token
    cct = LaPEViT('cct-7/3x1', pe_join=join)
    assert (cct.with_cls_token, cct.out_type) == (False, 'pooled')
    default = LaPEViT('test-tiny', img_size=IMG, patch_size=8)
    assert (default.with_cls_token, default.out_type) == (True, 'cls_token')


def test_bad_combinations_raise():
    with pytest.raises(ValueError, match='last_pe_source'):
        LaPEViT(
            'test-tiny',
            img_size=IMG,
            patch_size=8,
            with_cls_token=False,
            out_type='avg_featmap',
            pe_join=dict(type='MPVG', last_pe_source=0))
    with pytest.raises(ValueError, match="does not support pe_type='rel"):
        LaPEViT(
            'test-tiny',
            img_size=IMG,
            patch_size=8,
            pe_join='Share',
            pe_type='relative')
    with pytest.raises(ValueError, match="does not support pe_type='sin"):
        LaPEViT(
            'test-tiny',
            img_size=IMG,
            patch_size=8,
            pe_join='Unshare',
            pe_type='sincos2d')
    with pytest.raises(ValueError, match="out_type='cls_token' needs"):
        LaPEViT('test-tiny', img_size=IMG, patch_size=8, with_cls_token=False)
    with pytest.raises(ValueError, match='not divisible by patch_size=8'):
        LaPEViT(
            'test-tiny', img_size=IMG, patch_size=8)(
                torch.randn(1, 3, 36, 32))
    with pytest.raises(ValueError, match='Unknown pe_type'):
        LaPEViT('test-tiny', img_size=IMG, patch_size=8, pe_type='rope')


def test_join_names_case_insensitive():
    join = build_pe_join(
        'lape', num_layers=4, embed_dims=8, with_cls_token=True)
    assert join.name == 'LaPE'


# ----------------------------------------------------------------------
# A join that changes attention other than by an additive PE needs no
# library file but its own: the plan's ``qk`` maps reach every block.
def rotate_pairs(t, angle):
    """Channel pairs ``(2i, 2i+1)`` of ``t`` rotated by ``angle`` per
    token: ``(a cos - b sin, a sin + b cos)``."""
    cos, sin = angle.cos()[:, None], angle.sin()[:, None]
    a, b = t[..., 0::2], t[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)


@pytest.fixture
def rotary_join():
    """``ToyRotary``: the PE at the input, then in layer ``l`` the queries
    scaled by ``s_l`` and queries and keys rotated by ``f_l * n`` (token
    ``n``), with learnable ``s`` and ``f`` of its own; registered for one
    test and removed after it."""
    import torch.nn as nn

    from mmlape.models.layers import BasePEJoin, PEPlan
    from mmlape.registry import PE_JOINS

    class ToyRotaryJoin(BasePEJoin):
        name = 'ToyRotary'

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.scales = nn.Parameter(torch.linspace(0.5, 2, self.num_layers))
            self.freqs = nn.Parameter(torch.linspace(0.3, 1, self.num_layers))

        @property
        def attention_terms(self):
            return ('qk', )

        def plan(self, pos, rel_biases, pe_norms, carry=None):
            angles = torch.arange(pos.shape[1], dtype=pos.dtype)

            def qk_of(i):
                return lambda q, k: (rotate_pairs(q * self.scales[i], angles *
                                                  self.freqs[i]),
                                     rotate_pairs(k, angles * self.freqs[i]))

            return PEPlan(
                self.num_layers,
                input=pos,
                qk=[qk_of(i) for i in range(self.num_layers)])

    PE_JOINS.register_module(name='ToyRotary', module=ToyRotaryJoin)
    try:
        yield ToyRotaryJoin
    finally:
        PE_JOINS.module_dict.pop('ToyRotary')


def rotary_reference(model, img):
    """``x_0 = tokens + pos``; layer ``l`` attends with
    ``q' = R(f_l n) s_l q``, ``k' = R(f_l n) k``."""
    import math

    import torch.nn.functional as F
    from reference import ln, second_half, tokens_of
    join = model.pe_join
    x = tokens_of(model, img) + model.pos_embed
    b, n, c = x.shape
    angle = torch.arange(n, dtype=x.dtype)
    for i, blk in enumerate(model.blocks):
        h = ln(blk.norm1, x)
        heads = blk.attn.num_heads
        qkv = F.linear(h, blk.attn.qkv.weight, blk.attn.qkv.bias)
        q, k, v = qkv.reshape(b, n, 3, heads,
                              c // heads).permute(2, 0, 3, 1, 4)
        q = rotate_pairs(q * join.scales[i], angle * join.freqs[i])
        k = rotate_pairs(k, angle * join.freqs[i])
        logits = q @ k.transpose(-1, -2) / math.sqrt(c // heads)
        out = (logits.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)
        out = F.linear(out, blk.attn.proj.weight, blk.attn.proj.bias)
        x = second_half(blk, x + out)
    return ln(model.norm, x)


def test_a_join_that_maps_queries_and_keys_needs_no_library_edit(rotary_join):
    model = tiny(dict(type='toyrotary'))
    assert isinstance(model.pe_join, rotary_join)
    img = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():  # the cached eval-mode plan
        got = model(img)[0]
        torch.testing.assert_close(got, rotary_reference(model, img))
        torch.testing.assert_close(model(img)[0], got)
    model.train()  # and the plain one, whose gradient reaches the join
    got = model(img)[0]
    want = rotary_reference(model, img)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    assert model.pe_join.scales.grad.abs().min() > 0
    assert model.pe_join.freqs.grad.abs().min() > 0
    # the map is what differs from the default join: an identity map
    # computes the default join's equations
    assert not torch.allclose(got, reference_forward(model, img, 'default'))
    with torch.no_grad():
        model.pe_join.freqs.zero_()
        model.pe_join.scales.fill_(1)
        torch.testing.assert_close(
            model(img)[0], reference_forward(model, img, 'default'))


def test_blocks_that_take_no_qk_map_refuse_such_a_join(rotary_join):
    with pytest.raises(ValueError, match=r"adds \['qk'\]"):
        tiny('ToyRotary', window_size=2, with_cls_token=False)


def test_a_rotary_pe_refuses_a_join_that_maps_queries_and_keys(rotary_join):
    with pytest.raises(
            ValueError,
            match=r"pe_join.type='ToyRotary' maps the queries "
            r"and keys itself, and so does pe_type='rope_mixed'"):
        tiny('ToyRotary', pe_type='rope_mixed', ape_type='learnable')


def test_one_resolver_for_every_way_to_name_a_join():
    from mmlape.models.layers import DefaultJoin, LaPEJoin, resolve_pe_join
    for cfg in (None, 'Default', 'default', DefaultJoin,
                dict(type=DefaultJoin), dict(type='DEFAULT')):
        assert resolve_pe_join(cfg) == (DefaultJoin, {})
    for cfg in ('LAPE', LaPEJoin, dict(type='lape'), dict(type=LaPEJoin)):
        assert resolve_pe_join(cfg) == (LaPEJoin, {})
    assert resolve_pe_join(
        dict(type='LaPE',
             hierarchical=False)) == (LaPEJoin, dict(hierarchical=False))
    with pytest.raises(ValueError, match=r"Unknown pe_join.type=<class"):
        resolve_pe_join(torch.nn.Linear)
    with pytest.raises(ValueError, match='must be a dict with a "type" key'):
        resolve_pe_join(dict(hierarchical=True))
    with pytest.raises(ValueError, match='set by the backbone'):
        resolve_pe_join(dict(type='LaPE', embed_dims=3))
