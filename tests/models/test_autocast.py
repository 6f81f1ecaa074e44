"""GPU hazards that a CPU can pin: mixed precision and host syncs.

Under autocast the PE plan (LayerNorms of the PE, relative-bias norms, the
MPVG final term) must stay in float32, so that a plan cached in one
precision serves the other unchanged, and every join must run forward and
backward with finite results close to float32. A forward pass must not read
tensor values on the host (``.item()``, ``bool(t)``, ``int(t)``...): on a
GPU each such read waits for the device.
"""
import sys

import pytest
import torch
from conftest import ROOT
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from mmlape.models import LaPEViT, LaPEViTAdapter

IMG = 32

#: Tiny models run far faster on one thread of a shared machine.
pytestmark = pytest.mark.usefixtures('one_thread')

DTYPES = (torch.bfloat16, torch.float16)
#: (join, pe_type, out_type): every join, both PE kinds that carry state
#: (learnable; relative bias, for the joins that take it) and MPVG's two
#: final-term paths (pooled and per token).
CASES = [
    ('Default', 'learnable', 'cls_token'),
    ('Default', 'relative', 'cls_token'),
    ('Share', 'learnable', 'cls_token'),
    ('Unshare', 'learnable', 'cls_token'),
    ('LaPE', 'learnable', 'cls_token'),
    ('LaPE', 'sincos2d', 'cls_token'),
    ('LaPE', 'relative', 'cls_token'),
    ('PVG', 'learnable', 'avg_featmap'),
    ('MPVG', 'learnable', 'avg_featmap'),
    ('MPVG', 'learnable', 'featmap'),
]


def build(join, pe_type, out_type):
    gap = join in ('PVG', 'MPVG')
    model = LaPEViT(
        'test-tiny',
        img_size=IMG,
        patch_size=8,
        pe_join=join,
        pe_type=pe_type,
        with_cls_token=not gap,
        out_type=out_type)
    with torch.no_grad():  # non-trivial PE norms
        for name, p in model.named_parameters():
            if 'norm' in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model


@pytest.mark.parametrize('dtype', DTYPES, ids=['bf16', 'fp16'])
@pytest.mark.parametrize('join,pe_type,out_type', CASES)
def test_autocast_forward_backward(join, pe_type, out_type, dtype):
    model = build(join, pe_type, out_type).train()
    img = torch.randn(2, 3, IMG, IMG)
    ref = model(img)[0]
    ref.square().mean().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    with torch.autocast('cpu', dtype=dtype):
        out = model(img)[0]
        plan = model.pe_plan(model.grid_size)
    # the final norm's output: float32, as on a GPU (layer_norm autocasts to
    # float32 there), and close to the float32 result
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=0.1, rtol=0.05)
    out.square().mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.dtype == p.dtype, name
        if ref_grads[name].abs().max() > 0:
            cos = torch.nn.functional.cosine_similarity(
                p.grad.flatten(), ref_grads[name].flatten(), dim=0)
            assert cos > 0.9, (name, cos.item())
    tensors = [plan.input, plan.final, plan.final_mean]
    tensors += plan.residual + plan.attn + plan.bias
    assert any(t is not None for t in tensors)
    for t in tensors:
        assert t is None or t.dtype == torch.float32


@pytest.mark.parametrize('join,pe_type,out_type', CASES)
def test_cached_plan_serves_both_precisions(join, pe_type, out_type):
    """A plan cached under autocast leaves a float32 forward's result
    exactly as it is (and the other way round)."""
    model = build(join, pe_type, out_type).eval()
    img = torch.randn(2, 3, IMG, IMG)
    with torch.no_grad():
        model.cache_pe_plan = False
        ref = model(img)[0]
        with torch.autocast('cpu', dtype=torch.bfloat16):
            ref_amp = model(img)[0]
        model.cache_pe_plan = True
        with torch.autocast('cpu', dtype=torch.bfloat16):
            model(img)  # fills the cache under autocast
        assert len(model._plan_cache) == 1
        torch.testing.assert_close(model(img)[0], ref, rtol=0, atol=0)
        model.train().eval()  # empties the cache
        model(img)  # fills it in float32
        with torch.autocast('cpu', dtype=torch.bfloat16):
            torch.testing.assert_close(model(img)[0], ref_amp, rtol=0, atol=0)


@pytest.mark.parametrize('join', ['Default', 'LaPE', 'PVG'])
def test_adapter_autocast(join):
    model = LaPEViTAdapter(
        'test-tiny', img_size=64, pe_join=join, window_size=[2, 0, 2,
                                                             0]).train()
    img = torch.randn(2, 3, 64, 96)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        feats = model(img)
    assert [f.shape[-1] for f in feats] == [24, 12, 6, 3]
    for f in feats:
        assert f.is_floating_point() and torch.isfinite(f).all()
    sum(f.float().square().mean() for f in feats).backward()
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.isfinite(p.grad).all(), name


MMLAPE = ROOT + '/mmlape/'
HOST_READS = ('item', 'tolist', '__bool__', '__int__', '__float__',
              '__index__', '__len__', '__format__', 'numpy', 'cpu')


class HostReads(TorchFunctionMode):
    """Records the tensor-to-host reads that mmlape's own code makes."""

    def __init__(self):
        super().__init__()
        self.found = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, '__name__', '')
        if name in HOST_READS:
            caller = sys._getframe(1)
            if caller.f_code.co_filename.startswith(MMLAPE):
                self.found.append(f'{name} at {caller.f_code.co_filename}:'
                                  f'{caller.f_lineno}')
        return func(*args, **(kwargs or {}))


def test_host_read_detector_works():
    """The detector sees a read made from an mmlape file."""
    code = compile('def read(t):\n    return t.item()\n',
                   MMLAPE + 'models/fake.py', 'exec')
    scope = {}
    exec(code, scope)
    with HostReads() as mode:
        scope['read'](torch.tensor(1.))
    assert len(mode.found) == 1 and 'item' in mode.found[0]


@pytest.mark.parametrize('join,pe_type,out_type', CASES)
def test_vit_forward_reads_nothing_on_the_host(join, pe_type, out_type):
    model = build(join, pe_type, out_type)
    img = torch.randn(2, 3, IMG, IMG)
    for train in (True, False):
        model.train(train)
        with torch.set_grad_enabled(train), HostReads() as mode:
            model(img)
            model(img)  # the second eval forward takes the cached plan
        assert mode.found == []


def test_adapter_forward_reads_nothing_on_the_host():
    """mmlape's part of ViT-Adapter (mmcv's deformable attention is not
    mmlape's: its CPU path and its input check read shapes)."""
    model = LaPEViTAdapter('test-tiny', img_size=64, pe_join='LaPE').train()
    with HostReads() as mode:
        model(torch.randn(1, 3, 64, 64))
    assert mode.found == []


@pytest.mark.parametrize('join', ['Default', 'LaPE', 'MPVG'])
def test_eval_plan_cache_does_not_break_compiled_graphs(join):
    """A second eval call (the cached plan) compiles into one graph."""
    import torch._dynamo as dynamo
    cls_token = join in ('Default', 'LaPE')
    model = LaPEViT(
        arch=dict(
            embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64),
        img_size=32,
        patch_size=8,
        pe_join=dict(type=join),
        with_cls_token=cls_token,
        out_type='cls_token' if cls_token else 'avg_featmap').eval()
    img = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        model(img)  # fills the plan cache
        dynamo.reset()
        explained = dynamo.explain(model)(img)
    assert explained.graph_break_count == 0, explained.break_reasons


def float32_add(h, pe):
    """The attention-input add as it was before it learned the autocast
    dtype: in float32, the projection casting the sum afterwards."""
    return h.add_(pe)


@pytest.mark.parametrize('dtype', DTYPES, ids=['bf16', 'fp16'])
@pytest.mark.parametrize('join,pe_type,out_type', CASES)
def test_pe_add_in_autocast_dtype_equals_float32_add(join, pe_type, out_type,
                                                     dtype, monkeypatch):
    """Writing the sum in the autocast dtype rounds the float32 sum once,
    as the projection's cast did: the same outputs to the bit, the same
    gradients up to the order of the PE gradient's batch sum."""
    import mmlape.models.layers.block as block
    model = build(join, pe_type, out_type).train()
    img = torch.randn(2, 3, IMG, IMG)
    results = []
    for add in (block.add_attn_pe, float32_add):
        monkeypatch.setattr(block, 'add_attn_pe', add)
        model.zero_grad()
        with torch.autocast('cpu', dtype=dtype):
            out = model(img)[0]
        out.float().square().mean().backward()
        results.append((out.detach(), {
            n: p.grad.clone()
            for n, p in model.named_parameters()
        }))
    (new, new_grads), (old, old_grads) = results
    torch.testing.assert_close(new, old, rtol=0, atol=0)
    for name, grad in old_grads.items():
        torch.testing.assert_close(
            new_grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)


class BigOps(TorchDispatchMode):
    """Bytes that ops read and write on tensors of ``numel`` elements (the
    ``(B, N, C)`` stream; views and allocations move nothing)."""

    def __init__(self, numel):
        super().__init__()
        self.numel, self.bytes = numel, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_leaves
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name.startswith(('empty', 'view', 'detach', 'expand', 't')) or \
                name in ('_unsafe_view', 'reshape', 'permute', 'transpose'):
            return out
        inputs = (args, {k: v for k, v in kwargs.items() if k != 'out'})
        for tree in (inputs, out):
            tensors = {
                id(t): t
                for t in tree_leaves(tree) if isinstance(t, torch.Tensor)
            }
            self.bytes += sum(t.numel() * t.element_size()
                              for t in tensors.values()
                              if t.numel() == self.numel)
        return out


@pytest.mark.parametrize('join', ['LaPE', 'PVG', 'MPVG'])
def test_pe_add_under_autocast_moves_no_more_than_the_cast(join, monkeypatch):
    """Under autocast the add writes the projection's input dtype, so in
    eval it replaces the projection's cast: the (B, N, C) stream moves as
    many bytes as with no add at all; in training the PE's gradient reads
    the (bf16) gradient once more per layer, and nothing more (the float32
    add cost 8 bytes an element more in eval)."""
    import mmlape.models.layers.block as block
    torch.manual_seed(0)
    gap = join != 'LaPE'
    model = LaPEViT(
        'test-tiny',
        img_size=IMG,
        patch_size=8,
        pe_join=join,
        with_cls_token=not gap,
        out_type='avg_featmap' if gap else 'cls_token')
    img = torch.randn(3, 3, IMG, IMG)  # no weight has B * N * C elements
    numel = 3 * (16 + (not gap)) * 64
    adds = {
        'add': block.add_attn_pe,
        'none': lambda h, pe: h,
        'float32': float32_add
    }
    moved = {}
    for name, add in adds.items():
        monkeypatch.setattr(block, 'add_attn_pe', add)
        for train in (False, True):
            model.train(train).zero_grad(set_to_none=True)
            with BigOps(numel) as ops:
                with torch.autocast('cpu', dtype=torch.bfloat16), \
                        torch.set_grad_enabled(train):
                    out = model(img)[0]
                if train:
                    out.float().sum().backward()
            moved[name, train] = ops.bytes
    layers = sum(p is not None for p in model.pe_plan(model.grid_size).attn)
    assert layers > 0
    assert moved['add', False] == moved['none', False]
    assert moved['float32', False] == moved['none', False] + layers * numel * 8
    assert moved['none', True] < moved['add', True] <= \
        moved['none', True] + layers * numel * 2 < moved['float32', True]
