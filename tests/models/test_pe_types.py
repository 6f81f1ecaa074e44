"""A PE type is one declaration (:class:`BasePEType`): a toy type defined in
this file alone builds, trains, checkpoints and keeps the backbone
contract, with every join its kind allows, and no library file names it.

The toy type is a 2D ALiBi-like relative PE: each head learns a slope
``s_h`` and layer ``l`` adds ``-s_h * |p_i - p_j|_1`` (the patches' grid
distance) to the patch-patch logits. It is defined on any grid, so it also
runs at another input size.
"""
import math

import pytest
import test_backbone_contract as contract
import torch
import torch.nn as nn
from conftest import IMG, TINY_BACKBONES, backbone_joins, tiny_backbone

from mmlape.models import LaPEViT
from mmlape.models.layers import pe_join_classes
from mmlape.models.layers import pos_embed as pe
from mmlape.models.layers.pos_embed import BasePEType, pe_type_part

TOY = 'toy_alibi'


class ToyAlibi(BasePEType):
    name = TOY
    kind = 'relative'
    learnable = True
    no_decay = ('toy_slopes', )

    def attach(self, attn, grid, theta):
        slopes = [2.0**(-(h + 1)) for h in range(attn.num_heads)]
        attn.toy_slopes = nn.Parameter(torch.tensor(slopes))

    def layer_tensors(self, attn):
        return [attn.toy_slopes]

    def plan_terms(self, attns, hw, grid, num_extra):
        ys, xs = torch.meshgrid(
            torch.arange(hw[0]), torch.arange(hw[1]), indexing='ij')
        pos = torch.stack([ys.flatten(), xs.flatten()], -1).float()
        dist = torch.cdist(pos, pos, p=1)  # N, N
        return {
            'bias': [
                -a.toy_slopes[:, None, None] * dist.to(a.toy_slopes)
                for a in attns
            ]
        }


@pytest.fixture
def toy_type(monkeypatch):
    """The toy type registered, and a tiny ViT with it among the contract's
    backbones, for this test only."""
    monkeypatch.setitem(pe._REGISTRY, TOY, ToyAlibi())
    monkeypatch.setitem(TINY_BACKBONES, 'vit-toy', ('LaPEViT', TOY,
                                                    dict(
                                                        arch='test-tiny',
                                                        img_size=IMG,
                                                        patch_size=8,
                                                        pe_type=TOY,
                                                        out_type='raw')))
    yield 'vit-toy'


def toy_vit(join, **kwargs):
    return LaPEViT(
        'test-tiny',
        img_size=IMG,
        patch_size=8,
        pe_type=TOY,
        pe_join=join,
        **kwargs)


def test_the_declaration_is_read_not_the_name(toy_type):
    part = pe_type_part(TOY)
    assert part.kind == 'relative' and TOY in pe.pe_type_names('relative')
    assert TOY in pe.pe_settings()
    joins = backbone_joins(toy_type)
    # every join that takes a learned relative PE, as for 'relative'
    assert set(joins) == set(backbone_joins('vit-relative'))
    assert {'Default', 'LaPE'} <= set(joins)
    for join, cls in pe_join_classes().items():
        assert cls.fits(TOY) == cls.fits('relative'), join


def test_unknown_without_registration():
    with pytest.raises(ValueError, match=f'Unknown pe_type={TOY!r}'):
        toy_vit('Default')


@pytest.mark.parametrize('join', ['Default', 'LaPE'])
def test_the_toy_type_builds_with_its_start_values(toy_type, join):
    model = toy_vit(join)
    slopes = [b.attn.toy_slopes for b in model.blocks]
    assert len(slopes) == len(model.blocks)
    for s in slopes:
        assert torch.equal(s.detach(), 2.0**-torch.arange(1., s.numel() + 1))
    # no absolute table: a relative type adds no PE to the tokens
    assert getattr(model, 'pos_embed', None) is None
    # the bias reaches the logits: the slopes change the output
    model.eval()
    x = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        before = model(x)[-1].clone()
        for s in slopes:
            s.mul_(8)
        after = model(x)[-1]
    assert not torch.allclose(before, after)


@pytest.mark.parametrize('join', ['Default', 'LaPE'])
def test_the_toy_type_trains(toy_type, join):
    torch.manual_seed(0)
    model = tiny_backbone(toy_type, join)
    head = nn.Linear(model.embed_dims, 2)
    x = torch.randn(8, 3, IMG, IMG)
    y = (x[:, :, :IMG // 2].mean((1, 2, 3)) > x[:, :, IMG // 2:].mean(
        (1, 2, 3))).long()
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=3e-3)
    losses = []
    for _ in range(30):
        feats = model(x)[-1]
        logits = head(
            feats.flatten(2).mean(-1) if feats.dim() ==
            4 else feats.reshape(len(x), -1, model.embed_dims).mean(1))
        loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        if not losses:
            for blk in model.blocks:
                g = blk.attn.toy_slopes.grad
                assert g is not None and g.abs().sum() > 0
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(math.isfinite(v) for v in losses)


def test_the_toy_type_runs_at_another_size(toy_type):
    """Defined on any grid (LaPE's relative-bias norm is not: it is
    shaped by the PE's own grid, as for ``relative``)."""
    model = toy_vit('Default', out_type='featmap').eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 2 * IMG, 2 * IMG))[-1]
    assert out.shape[-2:] == (2 * IMG // 8, 2 * IMG // 8)


@pytest.mark.parametrize('join', ['Default', 'LaPE'])
def test_the_contract_holds(toy_type, join, tmp_path):
    """The contract suite's own checks on the toy backbone."""
    contract.test_every_parameter_gets_a_gradient(toy_type, join)
    contract.test_cached_plan_equals_the_plain_plan(toy_type, join)
    contract.test_checkpointing_equals_the_plain_forward(toy_type, join)
    contract.test_save_and_load_round_trip(toy_type, join, tmp_path)


def test_no_decay_names_name_real_parameters(toy_type):
    """Each type's no-decay names are parameters of a model with it."""
    for name in pe.pe_type_names():
        part = pe_type_part(name)
        if not part.learnable:
            assert part.no_decay == ()
            continue
        args = dict(pe_type=name)
        if part.kind == 'rotary':
            args['with_cls_token'] = True
        model = LaPEViT('test-tiny', img_size=IMG, patch_size=8, **args)
        keys = [k.rsplit('.', 1)[-1] for k, _ in model.named_parameters()]
        for wanted in part.no_decay:
            assert wanted in keys, (name, wanted)
