"""Each join against the reference written from docs/methods.md."""
import pytest
import torch
from conftest import IMG, tiny_vit
from reference import reference_forward, reference_relative_lape

from mmlape.models import LaPEViT, build_pe_join, resize_pos_embed


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
    (dict(type='PVG'), 'incompatible with a class token'),
    (dict(type='MPVG'), 'incompatible with a class token'),
    (dict(type='LaPE', num_pe_layers=5), r'num_pe_layers=5.*\[1, 4\]'),
    (dict(type='LaPE', num_pe_layers=0), 'num_pe_layers=0'),
    (dict(type='LaPE', hierarchical='yes'), 'hierarchical'),
    (dict(type='LaPE', depth=3), r"Unknown option\(s\) \['depth'\]"),
    (dict(type='Share', num_layers=3), 'set by the backbone'),
])
def test_bad_join_options_raise(cfg, match):
    with pytest.raises((ValueError, TypeError), match=match):
        LaPEViT('test-tiny', img_size=IMG, patch_size=8, pe_join=cfg)


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
