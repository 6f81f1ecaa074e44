"""The contract every backbone keeps, for every join it takes.

Each tiny backbone of ``conftest.TINY_BACKBONES`` (the ViT in every PE
setting: each ``pe_type``, the rotary ones alone and beside a learnable
PE; the ViT with a feature-map output, T2T-ViT, CeiT, ViT-Lite,
CCT, Swin, ViT-Adapter) with each registered join its PE type and layout
allow (``conftest.backbone_joins``):

- every parameter gets a gradient (non-zero) in a training step;
- the cached PE plan equals the plain (uncached) plan, exactly, also after
  any single tensor the plan depends on changes in place, after
  ``load_state_dict`` and across ``train()``, under autocast and without
  it, after a fused optimizer's step in eval mode, on the device the model
  moved to and in a pickled copy;
- gradient checkpointing of the blocks (``with_cp``) gives the plain
  forward's outputs and gradients, exactly;
- the weights saved as a ``backbone.``-prefixed checkpoint load back, by
  ``init_cfg`` and by ``load_state_dict``, and give the same outputs,
  exactly.
"""
import copy
import pickle

import pytest
import torch
from conftest import (TINY_BACKBONES, backbone_joins, save_backbone_checkpoint,
                      tiny_backbone)

from mmlape.models.layers.adapter import DeformAttn
from mmlape.models.layers.pos_embed import pe_type_part

CASES = [
    pytest.param(name, join, id=f'{name}-{join}') for name in TINY_BACKBONES
    for join in backbone_joins(name)
]

#: Tiny models run far faster on one thread of a shared machine.
pytestmark = pytest.mark.usefixtures('one_thread')


def tiny(name, join, **kwargs):
    """A tiny backbone with non-trivial norms (a mixed-up norm cannot pass
    unnoticed) and, in ViT-Adapter, deformable attentions that see their
    queries (the official start zeroes their offsets and weights, so no
    gradient would reach the queries on a first step)."""
    model = tiny_backbone(name, join, **kwargs)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if 'norm' in key:
                p.add_(torch.randn_like(p) * 0.3)
        for m in model.modules():
            if isinstance(m, DeformAttn):
                m.sampling_offsets.weight.normal_(0, 0.01)
                m.attention_weights.weight.normal_(0, 0.01)
    return model


def image(model, batch=2):
    return torch.randn(batch, 3, *model.img_size)


def outputs(model, img):
    """The backbone's outputs, a flat list of tensors."""
    out = model(img)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def weighted_sum(outs, weights):
    return sum((o * w).sum() for o, w in zip(outs, weights))


def assert_same(got, want, msg=None):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=msg)


def without_gradient(name, model):
    """The parameters whose gradient is zero by construction: the last
    CeiT block's LeFF (with a class token) works on the patch tokens only,
    which LCA pooling never reads; SeqPool's attention bias shifts every
    softmax logit alike (a gradient of rounding only)."""
    if name == 'ceit' and model.with_cls_token:
        return f'blocks.{model.num_layers - 1}.mlp.'
    if name == 'cct':
        return 'pool.attention_pool.bias'
    return None


@pytest.mark.parametrize('name,join', CASES)
def test_every_parameter_gets_a_gradient(name, join):
    """In training, with stochastic depth (a batch of 8, so that no
    branch is dropped for every sample) and, in the ViT family, attention
    dropout."""
    kwargs = dict(drop_path_rate=0.1)
    if TINY_BACKBONES[name][0] == 'LaPEViT':
        kwargs.update(attn_drop_rate=0.1)
    model = tiny(name, join, **kwargs).train()
    outs = outputs(model, image(model, batch=8))
    weighted_sum(outs, [torch.randn_like(o) for o in outs]).backward()
    dead = without_gradient(name, model)
    for key, p in model.named_parameters():
        assert p.grad is not None, f'{name} {join}: no gradient for {key}'
        if dead is None or not key.startswith(dead):
            assert p.grad.abs().sum() > 0, \
                f'{name} {join}: a zero gradient for {key}'


def plan_tensors(model, hw):
    """The plan's tensors, and what each q/k map (a rotary PE) makes of a
    fixed probe."""
    plan = model.pe_plan(hw)
    tensors = [
        t for t in [plan.input, plan.final, plan.final_mean] + plan.residual +
        plan.attn + plan.bias if t is not None
    ]
    for i, qk in enumerate(plan.qk):
        if qk is not None:
            attn = model.blocks[i].attn
            n = model.num_extra_tokens + hw[0] * hw[1]
            probe = torch.randn(
                1,
                attn.num_heads,
                n,
                attn.head_dims,
                generator=torch.Generator().manual_seed(i))
            tensors.extend(qk(probe, probe))
    return tensors


def plan_dependencies(model, hw):
    """The parameters the plan of ``hw`` depends on, found by autograd
    (independent of the backbone's own list for its cache)."""
    model.zero_grad(set_to_none=True)
    with torch.enable_grad():
        tensors = [t for t in plan_tensors(model, hw) if t.requires_grad]
        if not tensors:  # a fixed PE (T2T-ViT's sinusoid buffer) alone
            return []
        weighted_sum(tensors,
                     [torch.randn_like(t) for t in tensors]).backward()
    deps = [
        key for key, p in model.named_parameters()
        if p.grad is not None and p.grad.abs().sum() > 0
    ]
    model.zero_grad(set_to_none=True)
    return deps


@pytest.mark.parametrize('name,join', CASES)
def test_cached_plan_equals_the_plain_plan(name, join):
    model = tiny(name, join).eval()
    plain = copy.deepcopy(model)
    plain.cache_pe_plan = False
    img, hw = image(model), tuple(model.grid_size)
    with torch.no_grad():
        plan = model.pe_plan(hw)
        assert model.pe_plan(hw) is plan  # cached
        if pe_type_part(TINY_BACKBONES[name][1]).kind != 'relative':
            # (a relative PE: one grid only)
            other = model.pe_plan((hw[0], hw[1] + 2))  # another grid
            assert other is not plan
            assert model.pe_plan(hw) is plan  # several grids are kept
        first = outputs(model, img)
        assert_same(first, outputs(plain, img))
    # Each tensor the plan depends on, changed in place (an optimizer
    # step), alone: the plan is rebuilt and the outputs stay the plain ones.
    deps = plan_dependencies(model, hw)
    learnable = [t for t in model._pe_tensors() if t.requires_grad]
    assert deps or not learnable, \
        f'{name} {join}: the plan depends on no parameter'
    for key in deps:
        with torch.no_grad():
            step = torch.randn_like(model.get_parameter(key)) * 0.1
            model.get_parameter(key).add_(step)
            plain.get_parameter(key).add_(step)
            assert model.pe_plan(hw) is not plan, key
            assert_same(outputs(model, img), outputs(plain, img), msg=key)
            plan = model.pe_plan(hw)
    with torch.no_grad():  # the changes reached the outputs
        assert not deps or any(not torch.equal(a, b)
                               for a, b in zip(outputs(model, img), first))
    # load_state_dict copies in place: the cache follows; train() empties
    # it.
    other = tiny(name, join).eval()
    model.load_state_dict(other.state_dict())
    with torch.no_grad():
        assert_same(outputs(model, img), outputs(other, img))
    model.train()
    assert not model._plan_cache


@pytest.mark.parametrize('name,join', CASES)
def test_cached_plan_follows_precision_devices_and_fused_steps(name, join):
    """The cache serves a forward no other values than the plain plan:
    under autocast and without it whichever filled it (Swin's plan passes
    the PE through its patch merging, which autocast casts); after a fused
    optimizer's step, which leaves the version counters as they were, taken
    in eval mode; on the device the model moved to (a rotary PE alone
    depends on no tensor); and a pickled model starts with an empty cache
    (a rotary plan holds local functions)."""
    model = tiny(name, join).eval()
    plain = copy.deepcopy(model)
    plain.cache_pe_plan = False
    img = image(model)
    with torch.no_grad():
        for fill in (True, False):
            model.train().eval()
            with torch.autocast('cpu', dtype=torch.bfloat16, enabled=fill):
                outputs(model, img)
            for amp in (not fill, fill):
                with torch.autocast('cpu', dtype=torch.bfloat16, enabled=amp):
                    assert_same(
                        outputs(model, img),
                        outputs(plain, img),
                        msg=f'filled with autocast={fill}, '
                        f'served with autocast={amp}')
        assert model._plan_cache
        before = outputs(model, img)
    # a training step in eval mode, with a fused optimizer
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    sum(o.float().square().sum() for o in outputs(model, img)).backward()
    assert not model._plan_cache  # a forward with autograd empties it
    opt.step()
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        after = outputs(model, img)
        assert_same(after, outputs(plain, img))
        assert any(not torch.equal(a, b) for a, b in zip(after, before))
        assert model._plan_cache
        clone = pickle.loads(pickle.dumps(model))
        assert not clone._plan_cache
        assert_same(outputs(clone, img), after)
        if not any(isinstance(m, DeformAttn) for m in model.modules()):
            # mmcv's deformable attention has no meta kernel
            moved = [
                o.device for o in outputs(model.to('meta'), img.to('meta'))
            ]
            assert moved == [torch.device('meta')] * len(after)


@pytest.mark.parametrize('name,join', CASES)
def test_checkpointing_equals_the_plain_forward(name, join):
    model = tiny(name, join).train()
    ckpt = tiny(name, join, with_cp=True).train()
    ckpt.load_state_dict(model.state_dict())
    img = image(model)
    # The same dropout masks in both (the family's parts have dropout): the
    # recomputation restores the RNG state it started from.
    torch.manual_seed(1)
    outs = outputs(model, img)
    torch.manual_seed(1)
    outs_cp = outputs(ckpt, img)
    assert_same(outs_cp, outs)
    weights = [torch.randn_like(o) for o in outs]
    weighted_sum(outs, weights).backward()
    weighted_sum(outs_cp, weights).backward()
    for (key, p), q in zip(model.named_parameters(), ckpt.parameters()):
        assert q.grad is not None, f'{name} {join}: no gradient for {key}'
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=key)


@pytest.mark.parametrize('name,join', CASES)
def test_save_and_load_round_trip(name, join, tmp_path):
    model = tiny(name, join).eval()
    img = image(model)
    with torch.no_grad():
        want = outputs(model, img)
    path = save_backbone_checkpoint(model, tmp_path / 'backbone.pth')
    clone = tiny_backbone(
        name,
        join,
        init_cfg=dict(type='Pretrained', checkpoint=path, prefix='backbone.'))
    clone.init_weights()
    other = tiny_backbone(name, join)
    torch.save(model.state_dict(), tmp_path / 'plain.pth')
    other.load_state_dict(
        torch.load(tmp_path / 'plain.pth', weights_only=True), strict=True)
    with torch.no_grad():
        assert_same(outputs(clone.eval(), img), want)
        assert_same(outputs(other.eval(), img), want)


def test_the_contract_covers_every_backbone_and_join():
    """A new backbone class or join is in the suite, or this fails."""
    import mmlape.models  # noqa: F401  (registers every backbone)
    from mmlape.models.backbones.base import LaPEBackbone
    from mmlape.models.layers import pe_join_names

    classes, todo = set(), [LaPEBackbone]
    while todo:
        for sub in todo.pop().__subclasses__():
            classes.add(sub.__name__)
            todo.append(sub)
    assert classes == {cls for cls, _, _ in TINY_BACKBONES.values()}
    assert {join
            for _, join in (c.values for c in CASES)} == set(pe_join_names())
