"""The ViT backbone: sizes, gradients, caching, slicing, checkpoints."""
import pytest
import torch
from conftest import IMG
from conftest import tiny_vit as tiny

from mmlape.models import LaPEViT


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def gap_cfg():
    return dict(with_cls_token=False, out_type='avg_featmap')


@pytest.mark.parametrize(
    'arch,C', [('deit-tiny', 192),
               pytest.param('deit-small', 384, marks=pytest.mark.slow),
               pytest.param('deit-base', 768, marks=pytest.mark.slow)])
def test_parameter_cost_per_join(arch, C):
    """docs/methods.md: LaPE +2C per layer; PVG -C (class token) -C (PE row)
    +2C per layer 1..L-1; MPVG +2C more; Unshare +(L-1) PEs."""
    L, rows = 12, 197
    counts = {
        join: n_params(LaPEViT(arch, pe_join=join, **extra))
        for join, extra in [('Default', {}), ('Share', {}), (
            'Unshare', {}), ('LaPE', {}), ('PVG',
                                           gap_cfg()), ('MPVG', gap_cfg())]
    }
    base = counts['Default']
    assert counts['Share'] == base
    assert counts['Unshare'] == base + (L - 1) * rows * C
    assert counts['LaPE'] == base + 2 * C * L
    assert counts['PVG'] == base - C - C + 2 * C * (L - 1)
    assert counts['MPVG'] == counts['PVG'] + 2 * C
    if arch == 'deit-tiny':
        # mmpretrain's DeiT-Ti classifier: 5,717,416 with a 1000-way head.
        assert base + 192 * 1000 + 1000 == 5717416


@pytest.mark.parametrize('join,extra', [
    ('Default', {}),
    ('Share', {}),
    ('Unshare', {}),
    ('LaPE', {}),
    ('PVG', gap_cfg()),
    ('MPVG', gap_cfg()),
    ('MPVG', dict(with_cls_token=False, out_type='featmap')),
])
def test_every_parameter_gets_a_gradient(join, extra):
    kwargs = dict(pe_join=join, **extra)
    kwargs.setdefault('out_type', 'cls_token')
    model = LaPEViT('test-tiny', img_size=IMG, patch_size=8, **kwargs)
    out = model(torch.randn(2, 3, IMG, IMG))[0]
    (out * torch.randn_like(out)).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert p.grad.abs().sum() > 0, name


def test_relative_pe_gets_gradients():
    model = tiny('LaPE', pe_type='relative')
    model(torch.randn(2, 3, IMG, IMG))[0].sum().backward()
    table = model.blocks[1].attn.relative_position_bias_table
    assert table.grad is not None and table.grad.abs().sum() > 0


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


def test_plan_cache_equals_plain_and_invalidates():
    model = tiny('MPVG', with_cls_token=False, out_type='avg_featmap').eval()
    img = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        plan = model.pe_plan((4, 4))
        assert model.pe_plan((4, 4)) is plan
        assert model.pe_plan((6, 4)) is not plan  # another grid
        cached = model(img)[0]
        model.cache_pe_plan = False
        plain = model(img)[0]
        model.cache_pe_plan = True
    torch.testing.assert_close(cached, plain, rtol=0, atol=0)

    # An optimizer step changes PE weights in place: the cache notices.
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model(img)[0].sum().backward()  # grad enabled: no caching
    opt.step()
    with torch.no_grad():
        after = model(img)[0]
        model.cache_pe_plan = False
        plain_after = model(img)[0]
        model.cache_pe_plan = True
    torch.testing.assert_close(after, plain_after, rtol=0, atol=0)
    assert not torch.allclose(after, cached)

    # load_state_dict copies in place; train() clears.
    other = tiny('MPVG', with_cls_token=False, out_type='avg_featmap')
    model.load_state_dict(other.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(model(img)[0], other.eval()(img)[0])
    model.train()
    assert not model._plan_cache


def test_plan_cache_keeps_several_grids():
    model = tiny('LaPE').eval()
    with torch.no_grad():
        plans = {hw: model.pe_plan(hw) for hw in [(4, 4), (6, 4), (4, 8)]}
        for hw, plan in plans.items():  # alternating sizes hit the cache
            assert model.pe_plan(hw) is plan
        for i in range(model.plan_cache_size):
            model.pe_plan((1, i + 1))
        assert model.pe_plan((4, 4)) is not plans[(4, 4)]  # evicted


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


def test_with_cp_same_result_and_grads():
    torch.manual_seed(3)
    a = tiny('LaPE', with_cp=True)
    b = tiny('LaPE')
    b.load_state_dict(a.state_dict())
    img = torch.randn(2, 3, IMG, IMG)
    a(img)[0].sum().backward()
    b(img)[0].sum().backward()
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, msg=name)


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


def test_state_dict_round_trip(tmp_path):
    model = tiny('LaPE').eval()
    path = tmp_path / 'vit.pth'
    torch.save(
        {
            'state_dict': {
                'backbone.' + k: v
                for k, v in model.state_dict().items()
            }
        }, path)
    clone = tiny(
        'LaPE',
        init_cfg=dict(
            type='Pretrained', checkpoint=str(path), prefix='backbone.'))
    clone.init_weights()
    img = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        torch.testing.assert_close(clone.eval()(img)[0], model(img)[0])


def test_pretrained_resizes_pe_and_drops_class_token(tmp_path):
    src = tiny('LaPE').eval()
    path = tmp_path / 'cls.pth'
    torch.save(
        {
            'state_dict': {
                'backbone.' + k: v
                for k, v in src.state_dict().items()
            }
        }, path)
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
    torch.save(
        {
            'state_dict': {
                'backbone.' + k: v
                for k, v in lape.state_dict().items()
            }
        }, path)
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
