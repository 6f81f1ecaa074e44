"""mmcv's compiled ops get float32 under mixed precision (issue 19, req. 5),
inside :func:`mmlape.hosts.float32_mmcv_ops` (what
:class:`~mmlape.hosts.Float32MmcvOpsHook` opens around a model's steps);
mmlape's own deformable attention without it.

mmcv 2.1.0's CUDA kernels of deformable attention and RoIAlign take
float32/float16 only, NMS float32 only; under bf16 (or fp16 with mixed
input dtypes) autocast on a GPU they stop. On CPU the same Functions reach
the same compiled entry points (``mmcv._ext``), so a spy on those entry
points records the dtype a GPU kernel would get. mmcv has no CPU kernel of
deformable attention: there the spy stands in for it, computing with mmcv's
PyTorch implementation. RoIAlign and NMS run their real CPU kernels.
"""
import importlib
import os.path as osp
import sys

import pytest
import torch
from conftest import ROOT
from mmcv.ops import RoIAlign, batched_nms
from mmcv.ops import multi_scale_deform_attn as msda_module
from mmcv.ops import nms
from mmcv.ops.multi_scale_deform_attn import MultiScaleDeformableAttnFunction
from mmcv.ops.nms import NMSop
from mmcv.ops.roi_align import RoIAlignFunction

from mmlape.hosts.mmcv_ops import (MMCV_FLOAT32_OPS, Float32MmcvOpsHook,
                                   float32_autograd_function, float32_mmcv_ops,
                                   install_float32_mmcv_ops,
                                   use_float32_mmcv_ops)
from mmlape.models import LaPEViTAdapter

# The wrapping, installed as an entry point's first float32_mmcv_ops() does.
install_float32_mmcv_ops()

HALF = (torch.bfloat16, torch.float16)
IDS = ['bf16', 'fp16']
FUNCTIONS = (MultiScaleDeformableAttnFunction, RoIAlignFunction, NMSop)
PYTORCH_MSDA = msda_module.multi_scale_deformable_attn_pytorch

#: Tiny models run far faster on one thread of a shared machine.
pytestmark = pytest.mark.usefixtures('one_thread')


def cpu_autocast_takes(dtype):
    with torch.autocast('cpu', dtype=dtype):
        return (torch.is_autocast_enabled('cpu')
                and torch.get_autocast_dtype('cpu') == dtype)


@pytest.fixture(params=HALF, ids=IDS)
def dtype(request):
    if not cpu_autocast_takes(request.param):
        pytest.skip(f'CPU autocast of this torch ({torch.__version__}) does '
                    f'not take {request.param}')
    return request.param


class KernelSpy:
    """Records the floating dtypes each compiled entry point receives."""

    def __init__(self):
        self.calls = []

    def record(self, name, args, kwargs):
        dtypes = [
            a.dtype for a in (*args, *kwargs.values())
            if isinstance(a, torch.Tensor) and a.is_floating_point()
        ]
        self.calls.append((name, dtypes))

    def names(self):
        return {name for name, _ in self.calls}

    def dtypes(self):
        return {d for _, dtypes in self.calls for d in dtypes}

    def through(self, name, kernel):
        """The real kernel, recorded."""

        def spy(*args, **kwargs):
            self.record(name, args, kwargs)
            return kernel(*args, **kwargs)

        return spy

    def msda_forward(self, value, shapes, starts, loc, attn, im2col_step):
        """Stand-in kernel: mmcv's PyTorch path, in float32, output in the
        dtype of ``value`` (as the CUDA kernel returns it)."""
        self.record('ms_deform_attn_forward',
                    (value, shapes, starts, loc, attn), {})
        with torch.autocast('cpu', enabled=False):
            out = PYTORCH_MSDA(value.float(), shapes, loc.float(),
                               attn.float())
        return out.to(value.dtype)

    def msda_backward(self, value, shapes, starts, loc, attn, grad_output,
                      grad_value, grad_loc, grad_attn, im2col_step):
        """Stand-in kernel: fills the three gradient buffers in place."""
        self.record('ms_deform_attn_backward',
                    (value, shapes, starts, loc, attn, grad_output, grad_value,
                     grad_loc, grad_attn), {})
        inputs = [
            t.detach().float().requires_grad_() for t in (value, loc, attn)
        ]
        with torch.enable_grad(), torch.autocast('cpu', enabled=False):
            out = PYTORCH_MSDA(inputs[0], shapes, inputs[1], inputs[2])
            grads = torch.autograd.grad(out, inputs, grad_output.float())
        for buffer, grad in zip((grad_value, grad_loc, grad_attn), grads):
            buffer.copy_(grad)


@pytest.fixture
def spy(monkeypatch):
    spy = KernelSpy()
    ext = msda_module.ext_module  # mmcv._ext, shared by every op module
    monkeypatch.setattr(ext, 'ms_deform_attn_forward', spy.msda_forward)
    monkeypatch.setattr(ext, 'ms_deform_attn_backward', spy.msda_backward)
    for name in ('roi_align_forward', 'roi_align_backward', 'nms'):
        monkeypatch.setattr(ext, name, spy.through(name, getattr(ext, name)))
    return spy


def unwrap(monkeypatch):
    """Put back mmcv's Functions as mmcv ships them (until the test ends)."""
    for cls in FUNCTIONS:
        for name in ('forward', 'backward'):
            fn = vars(cls).get(name)
            if fn is not None and hasattr(fn.__func__, '__wrapped__'):
                monkeypatch.setattr(cls, name,
                                    staticmethod(fn.__func__.__wrapped__))


@pytest.fixture
def unwrapped(monkeypatch):
    unwrap(monkeypatch)


@pytest.fixture
def float32_ops():
    """Inside the adjustment, as a model's steps run under the hook."""
    with float32_mmcv_ops():
        yield


# The ops, each ``run(dtype, amp, reference=False) -> (out, inputs)``:
# half inputs as autocast makes them (under autocast), all inputs half
# (without); ``reference`` runs the same values in float32, no autocast.


def _inputs(tensors, reference):
    """Leaves that take gradients, in float32 for the reference."""
    return [(t.float() if reference else t).detach().requires_grad_()
            for t in tensors]


def run_msda(dtype, amp, reference=False):
    g = torch.Generator().manual_seed(1)
    shapes = torch.tensor([[6, 4], [3, 2]])
    starts = torch.tensor([0, 24])
    value = torch.randn(2, 30, 2, 8, generator=g).to(dtype)
    loc = torch.rand(2, 5, 2, 2, 3, 2, generator=g)
    attn = torch.rand(2, 5, 2, 2, 3, generator=g).softmax(-1)
    if not amp:  # a model cast to half as a whole
        loc, attn = loc.to(dtype), attn.to(dtype)
    value, loc, attn = _inputs((value, loc, attn), reference)
    with torch.autocast('cpu', dtype=dtype, enabled=amp and not reference):
        out = MultiScaleDeformableAttnFunction.apply(value, shapes, starts,
                                                     loc, attn, 64)
    return out, [value, loc, attn]


def run_roi_align(dtype, amp, reference=False):
    g = torch.Generator().manual_seed(2)
    feat = torch.randn(2, 4, 16, 20, generator=g).to(dtype)
    rois = torch.tensor([[0., 1., 2., 20., 14.], [1., 6., 0., 37., 30.],
                         [0., 10., 12., 30., 31.]])
    if not amp:
        rois = rois.to(dtype)
    feat, = _inputs((feat, ), reference)
    rois = rois.float() if reference else rois
    op = RoIAlign((3, 3), spatial_scale=0.5, sampling_ratio=2)
    with torch.autocast('cpu', dtype=dtype, enabled=amp and not reference):
        out = op(feat, rois)
    return out, [feat]


def _boxes(dtype):
    g = torch.Generator().manual_seed(3)
    xy = torch.rand(40, 2, generator=g) * 50
    boxes = torch.cat([xy, xy + 5 + torch.rand(40, 2, generator=g) * 20], 1)
    scores = torch.rand(40, generator=g)
    return boxes.to(dtype), scores.to(dtype)


def run_nms(dtype, amp, reference=False):
    boxes, scores = _boxes(dtype)
    if reference:
        boxes, scores = boxes.float(), scores.float()
    with torch.autocast('cpu', dtype=dtype, enabled=amp and not reference):
        dets, keep = nms(boxes, scores, 0.3)
    return keep, []


def run_batched_nms(dtype, amp, reference=False):
    boxes, scores = _boxes(dtype)
    if reference:
        boxes, scores = boxes.float(), scores.float()
    idxs = torch.arange(40) % 3
    with torch.autocast('cpu', dtype=dtype, enabled=amp and not reference):
        dets, keep = batched_nms(boxes, scores, idxs, dict(iou_threshold=0.3))
    return keep, []


OPS = {
    'msda': (run_msda, {'ms_deform_attn_forward', 'ms_deform_attn_backward'}),
    'roi_align': (run_roi_align, {'roi_align_forward', 'roi_align_backward'}),
    'nms': (run_nms, {'nms'}),
    'batched_nms': (run_batched_nms, {'nms'}),
}


def forward_backward(op, dtype, amp):
    out, inputs = OPS[op][0](dtype, amp)
    if inputs:
        weight = torch.randn(
            out.shape, generator=torch.Generator().manual_seed(4))
        (out.float() * weight).sum().backward()
    return out, inputs


@pytest.mark.parametrize('op', OPS)
def test_without_the_wrapping_half_reaches_the_kernels(op, dtype, spy,
                                                       unwrapped):
    """The spy catches what the wrapping prevents: without it, autocast
    hands mmcv's entry points half tensors (on a GPU: a dtype error)."""
    try:
        forward_backward(op, dtype, amp=True)
    except RuntimeError:  # a real CPU kernel may refuse it, as CUDA does
        pass
    assert spy.dtypes() & set(HALF), spy.calls


@pytest.mark.parametrize('op', OPS)
def test_outside_the_context_the_ops_are_as_mmcv_ships_them(op, dtype, spy):
    """Installed, the wrapping changes nothing outside float32_mmcv_ops():
    another model of the process hands the kernels what it hands them."""
    try:
        forward_backward(op, dtype, amp=True)
    except RuntimeError:
        pass
    assert spy.dtypes() & set(HALF), spy.calls


@pytest.mark.parametrize('op', OPS)
def test_kernels_get_float32_under_autocast(op, dtype, spy, float32_ops):
    out, inputs = forward_backward(op, dtype, amp=True)
    assert spy.names() == OPS[op][1]
    assert spy.dtypes() == {torch.float32}, spy.calls
    ref, ref_inputs = OPS[op][0](dtype, amp=True, reference=True)
    if not inputs:  # NMS: the kept indices, as in float32
        assert torch.equal(out, ref)
        return
    # computed in float32, returned in the dtype mmcv's op returns
    assert out.dtype == inputs[0].dtype == dtype
    torch.testing.assert_close(out, ref.to(dtype), rtol=0, atol=0)
    (ref * torch.randn(ref.shape, generator=torch.Generator().manual_seed(4))
     ).sum().backward()
    for x, x_ref in zip(inputs, ref_inputs):
        assert x.grad is not None and x.grad.dtype == x.dtype
        torch.testing.assert_close(
            x.grad.float(), x_ref.grad, rtol=0.02, atol=0.02)


@pytest.mark.parametrize('op', OPS)
def test_half_inputs_without_autocast_compute_in_float32(
        op, dtype, spy, float32_ops):
    """A model cast to half as a whole: the kernels get float32, the op
    returns its result in the inputs' dtype."""
    out, inputs = forward_backward(op, dtype, amp=False)
    assert spy.dtypes() == {torch.float32}, spy.calls
    ref, _ = OPS[op][0](dtype, amp=False, reference=True)
    if not inputs:
        assert torch.equal(out, ref)
        return
    assert out.dtype == dtype
    torch.testing.assert_close(out, ref.to(dtype))
    for x in inputs:
        assert x.grad is not None and x.grad.dtype == dtype


@pytest.mark.parametrize('op', OPS)
def test_float32_without_autocast_is_untouched(op, spy, monkeypatch,
                                               float32_ops):
    """Outside autocast float32 runs the op exactly as mmcv ships it."""
    out, inputs = forward_backward(op, torch.float32, amp=False)
    assert spy.dtypes() == {torch.float32}
    with monkeypatch.context() as patch:
        unwrap(patch)
        want, want_inputs = forward_backward(op, torch.float32, amp=False)
    assert torch.equal(out, want)
    for x, x_want in zip(inputs, want_inputs):
        assert torch.equal(x.grad, x_want.grad)


def test_install_wraps_the_listed_functions_once():
    for module, name in MMCV_FLOAT32_OPS:
        cls = getattr(importlib.import_module(module), name)
        forward = vars(cls)['forward'].__func__
        assert forward.__name__ == 'forward'
        # one layer: the function under the wrapper is mmcv's own
        assert forward.__wrapped__.__module__ == module
        assert not hasattr(forward.__wrapped__, '__wrapped__')
    assert {c.__name__ for c in FUNCTIONS} == {n for _, n in MMCV_FLOAT32_OPS}
    before = {c: (c.forward, c.backward) for c in FUNCTIONS}
    assert install_float32_mmcv_ops() == []  # done above: nothing new
    assert not float32_autograd_function(RoIAlignFunction)
    assert {c: (c.forward, c.backward) for c in FUNCTIONS} == before


def test_wrapping_a_fresh_function_is_idempotent(float32_ops):

    class Scale(torch.autograd.Function):

        @staticmethod
        def forward(ctx, x, factor):
            ctx.factor = factor
            return x * factor

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.factor, None

    assert float32_autograd_function(Scale)
    forward, backward = Scale.forward, Scale.backward
    assert not float32_autograd_function(Scale)
    assert (Scale.forward, Scale.backward) == (forward, backward)
    assert not hasattr(Scale.forward.__wrapped__, '__wrapped__')
    x = torch.ones(3, dtype=torch.bfloat16, requires_grad=True)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        y = Scale.apply(x.float(), 3.0)
        assert y.dtype == torch.float32
        y = Scale.apply(x, 3.0)
    assert y.dtype == torch.bfloat16
    y.sum().backward()
    assert x.grad.dtype == torch.bfloat16
    assert torch.equal(x.grad, torch.full((3, ), 3., dtype=torch.bfloat16))
    with pytest.raises(TypeError, match='torch.autograd.Function'):
        float32_autograd_function(torch.nn.Linear)


class StepModel(torch.nn.Module):
    """A model whose steps run NMS on bfloat16 boxes under autocast."""

    def train_step(self, data, optim_wrapper=None):
        return run_nms(torch.bfloat16, amp=True)[0]

    def val_step(self, data):
        return self.train_step(data)

    test_step = val_step


def test_hook_runs_each_step_in_float32_and_restores_it(spy):

    class Runner:
        model = StepModel()

    hook, model = Float32MmcvOpsHook(), Runner.model
    hook.before_run(Runner)
    for step in ('train_step', 'val_step', 'test_step'):
        getattr(model, step)(None)
    assert spy.names() == {'nms'}
    assert spy.dtypes() == {torch.float32}, spy.calls
    hook.after_run(Runner)
    assert not {'train_step', 'val_step', 'test_step'} & set(vars(model))
    spy.calls.clear()
    try:
        model.test_step(None)
    except RuntimeError:
        pass
    assert spy.dtypes() == {torch.bfloat16}, spy.calls


def test_mmdet_runs_get_the_hook_once():
    from mmengine.config import Config
    cfg = Config(dict(default_scope='mmdet'))
    assert use_float32_mmcv_ops(cfg)
    assert cfg.custom_hooks == [dict(type='mmlape.Float32MmcvOpsHook')]
    assert not use_float32_mmcv_ops(cfg)
    assert len(cfg.custom_hooks) == 1
    assert not use_float32_mmcv_ops(Config(dict(default_scope='mmseg')))
    config = Config.fromfile(
        osp.join(
            ROOT, 'configs/vit_adapter/'
            'mask-rcnn_vit-adapter-tiny-lape_fpn_3x_coco.py'))
    assert config.custom_hooks == [dict(type='mmlape.Float32MmcvOpsHook')]
    assert not use_float32_mmcv_ops(config)


def through_the_kernel(value, shapes, loc, attn):
    """mmcv's CPU branch of the deformable attention sent down its GPU
    branch: the Function and its compiled entry points."""
    starts = torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])
    return MultiScaleDeformableAttnFunction.apply(value, shapes, starts, loc,
                                                  attn, 64)


def test_vit_adapter_trains_under_bf16_autocast_through_the_kernel(
        spy, monkeypatch):
    """ViT-Adapter's deformable attention routed through mmcv's compiled
    entry points (its GPU path) on CPU: forward and backward run under bf16
    autocast, every kernel call gets float32, and the pyramid stays close
    to the float32 one."""
    monkeypatch.setattr(msda_module, 'multi_scale_deformable_attn_pytorch',
                        through_the_kernel)
    model = LaPEViTAdapter(
        'test-tiny', img_size=64, pe_join='LaPE', window_size=[2, 0, 2,
                                                               0]).train()
    img = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        ref = model(img)
    spy.calls.clear()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        feats = model(img)
    sum(f.float().square().mean() for f in feats).backward()
    assert spy.names() == {'ms_deform_attn_forward', 'ms_deform_attn_backward'}
    assert spy.dtypes() == {torch.float32}, spy.calls
    for f, r in zip(feats, ref):
        assert torch.isfinite(f).all()
        torch.testing.assert_close(f.float(), r, rtol=0.1, atol=0.1)
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None, name
            assert p.grad.dtype == torch.float32, name
            assert torch.isfinite(p.grad).all(), name


@pytest.fixture(scope='module')
def mask_rcnn(tmp_path_factory):
    """The ViT-Adapter-LaPE Mask R-CNN config, shrunk (random init)."""
    from mmdet.registry import MODELS
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
    import bench_dense_learning as bench
    tmp = str(tmp_path_factory.mktemp('mask_rcnn'))
    overrides = bench.det_overrides(tmp + '/',
                                    bench.small_adapter(img_size=64), [96] * 4,
                                    1, 1e-4, 0)
    overrides['model']['train_cfg'] = dict(
        rpn_proposal=dict(nms_pre=200, max_per_img=50),
        rcnn=dict(sampler=dict(num=32)))
    # keep the untrained model's detections: the box NMS then runs
    overrides['model']['test_cfg'] = dict(
        rpn=dict(nms_pre=200, max_per_img=50),
        rcnn=dict(score_thr=0.0, max_per_img=20))
    config = bench.write_config(
        osp.join(tmp, 'config.py'), bench.DET_BASE.format('-lape'), overrides)
    init_default_scope('mmdet')
    model = MODELS.build(Config.fromfile(config).model)
    model.init_weights()
    return model


@pytest.mark.slow  # builds and runs a whole detector (about 20 s)
def test_mask_rcnn_trains_and_predicts_under_bf16_autocast(
        mask_rcnn, spy, monkeypatch, float32_ops):
    """The whole detector of mmlape's Mask R-CNN configs under bf16
    autocast, its deformable attention routed through the kernel: loss,
    backward and prediction run, and deformable attention, RoIAlign and
    NMS all hand their kernels float32 (on CPU, RoIAlign's and NMS's own
    kernels refuse bf16 too)."""
    from mmdet.testing import demo_mm_inputs
    monkeypatch.setattr(msda_module, 'multi_scale_deformable_attn_pytorch',
                        through_the_kernel)
    model = mask_rcnn.train()
    packed = demo_mm_inputs(
        2, [(3, 64, 96)] * 2, num_items=[3, 2], num_classes=80, with_mask=True)
    data = model.data_preprocessor(packed, True)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        losses = model(**data, mode='loss')
    loss, _ = model.parse_losses(losses)
    assert torch.isfinite(loss)
    model.zero_grad()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    model.eval()
    data = model.data_preprocessor(packed, False)
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        results = model(**data, mode='predict')
    assert all(len(r.pred_instances) > 0 for r in results)
    assert spy.names() == {
        'ms_deform_attn_forward', 'ms_deform_attn_backward',
        'roi_align_forward', 'roi_align_backward', 'nms'
    }
    assert spy.dtypes() == {torch.float32}, spy.calls
