"""The ViT backbone: sizes, gradients, caching, slicing, checkpoints."""
import pytest
import torch
from conftest import IMG, n_params, save_backbone_checkpoint
from conftest import tiny_vit as tiny

from mmlape.models import LaPEViT


def gap_cfg():
    return dict(with_cls_token=False, out_type='avg_featmap')


@pytest.mark.parametrize('arch,C', [('deit-tiny', 192), ('deit-small', 384),
                                    ('deit-base', 768)])
def test_parameter_cost_per_join(arch, C):
    """docs/methods.md: LaPE +2C per layer; PVG -C (class token) -C (PE row)
    +2C per layer 1..L-1; MPVG +2C more; Unshare +(L-1) PEs. Built on the
    meta device (shapes only, no initialisation cost), as the backbone
    allows."""
    L, rows = 12, 197
    joins = [('Default', {}), ('Share', {}), ('Unshare', {}), ('LaPE', {}),
             ('PVG', gap_cfg()), ('MPVG', gap_cfg())]
    with torch.device('meta'):
        models = {j: LaPEViT(arch, pe_join=j, **extra) for j, extra in joins}
    assert all(p.is_meta for m in models.values() for p in m.parameters())
    counts = {join: n_params(model) for join, model in models.items()}
    base = counts['Default']
    assert counts['Share'] == base
    assert counts['Unshare'] == base + (L - 1) * rows * C
    assert counts['LaPE'] == base + 2 * C * L
    assert counts['PVG'] == base - C - C + 2 * C * (L - 1)
    assert counts['MPVG'] == counts['PVG'] + 2 * C
    if arch == 'deit-tiny':
        # mmpretrain's DeiT-Ti classifier: 5,717,416 with a 1000-way head.
        assert base + 192 * 1000 + 1000 == 5717416


def test_output_types_and_shapes():
    img = torch.randn(2, 3, 48, 32)  # non-square: 6x4 patches
    outs = {
        t:
        LaPEViT(
            'test-tiny',
            img_size=IMG,
            patch_size=8,
            out_type=t,
            out_indices=(1, 3))(img)
        for t in ('raw', 'cls_token', 'featmap', 'avg_featmap')
    }
    assert [o.shape for o in outs['raw']] == [(2, 25, 64)] * 2
    assert [o.shape for o in outs['cls_token']] == [(2, 64)] * 2
    assert [o.shape for o in outs['featmap']] == [(2, 64, 6, 4)] * 2
    # contiguous NCHW: mmcv's CPU RoIAlign misreads a channels-last view
    assert all(o.is_contiguous() for o in outs['featmap'])
    assert [o.shape for o in outs['avg_featmap']] == [(2, 64)] * 2


@pytest.mark.parametrize('pe_type', ['sincos1d', 'sincos2d'])
def test_fixed_pe_is_a_buffer(pe_type):
    model = tiny('LaPE', pe_type=pe_type)
    assert 'pos_embed' not in dict(model.named_parameters())
    assert 'pos_embed' not in model.state_dict()
    assert model(torch.randn(1, 3, IMG, 48))[0].shape == (1, 25, 64)


def test_plan_cache_keeps_several_grids():
    model = tiny('LaPE').eval()
    with torch.no_grad():
        plans = {hw: model.pe_plan(hw) for hw in [(4, 4), (6, 4), (4, 8)]}
        for hw, plan in plans.items():  # alternating sizes hit the cache
            assert model.pe_plan(hw) is plan
        for i in range(model.plan_cache_size):
            model.pe_plan((1, i + 1))
        assert model.pe_plan((4, 4)) is not plans[(4, 4)]  # evicted


@pytest.mark.parametrize('name,values', [
    ('interpolate_antialias', (False, True)),
    ('interpolate_mode', ('bicubic', 'bilinear')),
])
def test_a_cached_plan_follows_how_the_pe_is_resized(name, values):
    """Switching how the PE is resized between two evaluations (a sweep
    with and without antialiasing) gives the new setting's outputs."""
    model = tiny('LaPE').eval()
    assert name in model.plan_settings
    img = torch.randn(2, 3, IMG // 2, IMG // 2)  # a grid to resize to
    with torch.no_grad():
        outs = []
        for value in values + values[:1]:
            setattr(model, name, value)
            outs.append(model(img)[0])
            model.cache_pe_plan = False
            torch.testing.assert_close(model(img)[0], outs[-1], rtol=0, atol=0)
            model.cache_pe_plan = True
    assert not torch.equal(outs[0], outs[1])
    assert torch.equal(outs[0], outs[2])


def test_no_cache_with_autograd():
    model = tiny('LaPE').eval()
    assert model.pe_plan((4, 4)) is not model.pe_plan((4, 4))


def test_forward_blocks_slices_equal_full_pass():
    model = tiny('LaPE').eval()
    img = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        full = model(img)[0]
        x, hw = model.patch_embed(img)
        plan = model.pe_plan(hw)
        x = model.embed(x, plan)
        for start, end in [(0, 1), (1, 3), (3, 4)]:
            x = model.forward_blocks(x, plan, start, end, hw)
        torch.testing.assert_close(model.final(x, plan), full)


def test_get_layer_depth():
    model = tiny('LaPE')
    assert model.get_layer_depth('backbone.pos_embed', 'backbone.') == (0, 6)
    assert model.get_layer_depth('backbone.blocks.2.pe_norm.weight',
                                 'backbone.') == (3, 6)
    assert model.get_layer_depth('backbone.norm.weight', 'backbone.') == (5, 6)
    assert model.get_layer_depth('head.fc.weight', 'backbone.') == (5, 6)


def test_frozen_stages():
    model = tiny('LaPE', frozen_stages=2)
    model.train()
    assert not model.pos_embed.requires_grad
    assert not any(p.requires_grad for p in model.blocks[1].parameters())
    assert all(p.requires_grad for p in model.blocks[2].parameters())
    assert not model.blocks[0].training and model.blocks[2].training


def test_pretrained_resizes_pe_and_drops_class_token(tmp_path):
    src = tiny('LaPE').eval()
    path = tmp_path / 'cls.pth'
    save_backbone_checkpoint(src, path)
    dense = LaPEViT(
        'test-tiny',
        img_size=64,
        patch_size=8,
        pe_join='LaPE',
        with_cls_token=False,
        out_type='featmap',
        init_cfg=dict(
            type='Pretrained', checkpoint=str(path), prefix='backbone.'))
    dense.init_weights()
    assert dense.pos_embed.shape == (1, 64, 64)
    from mmlape.models import resize_pos_embed
    want = resize_pos_embed(
        src.pos_embed[:, 1:], (4, 4), (8, 8), num_extra_tokens=0)
    torch.testing.assert_close(dense.pos_embed.data, want)
    torch.testing.assert_close(dense.blocks[3].pe_norm.weight,
                               src.blocks[3].pe_norm.weight)


def test_checkpoint_of_other_join_or_width_is_refused(tmp_path):
    lape = tiny('LaPE')
    path = tmp_path / 'lape.pth'
    save_backbone_checkpoint(lape, path)
    init = dict(type='Pretrained', checkpoint=str(path), prefix='backbone.')
    with pytest.raises(ValueError, match='does not fit the join'):
        tiny('Default', init_cfg=init).init_weights()
    with pytest.raises(ValueError, match='does not fit the join'):
        tiny(
            'PVG', with_cls_token=False, out_type='avg_featmap',
            init_cfg=init).init_weights()
    wide = LaPEViT(
        dict(
            embed_dims=96, num_layers=4, num_heads=2, feedforward_channels=96),
        img_size=IMG,
        patch_size=8,
        pe_join='LaPE',
        init_cfg=init)
    with pytest.raises(ValueError, match='same width'):
        wide.init_weights()
    with pytest.raises(ValueError, match='no keys under prefix'):
        tiny('LaPE', init_cfg=dict(init, prefix='neck.')).init_weights()
