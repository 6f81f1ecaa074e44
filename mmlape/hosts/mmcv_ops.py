"""mmcv's compiled ops in float32 under mixed precision, during the steps
of the models that need it.

mmcv 2.1.0's RoIAlign and deformable attention kernels take no bfloat16,
NMS no half at all (open-mmlab/mmcv #2878, #3061). Inside
:func:`float32_mmcv_ops`, the Functions of :data:`MMCV_FLOAT32_OPS` get
float32 inputs with autocast off (under autocast, or when an input is
half); the result comes back in the first floating input's dtype (mmdet's
``SingleRoIExtractor`` needs it), the gradients in the inputs' dtypes.
Outside the context the wrapped Functions behave as mmcv ships them.
:class:`Float32MmcvOpsHook` opens the context around a run's steps (the
ViT-Adapter's ``DeformAttn`` samples in float32 itself).
"""
import contextlib
import functools
import importlib
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Tuple

import torch
from mmengine.hooks import Hook
from torch import Tensor

from mmlape.registry import HOOKS

__all__ = [
    'MMCV_FLOAT32_OPS', 'Float32MmcvOpsHook', 'float32_autograd_function',
    'float32_mmcv_ops', 'install_float32_mmcv_ops', 'use_float32_mmcv_ops'
]

#: ``(module, class)`` of the mmcv autograd Functions whose kernels take no
#: bfloat16.
MMCV_FLOAT32_OPS: Tuple[Tuple[str, str], ...] = (
    ('mmcv.ops.multi_scale_deform_attn', 'MultiScaleDeformableAttnFunction'),
    ('mmcv.ops.roi_align', 'RoIAlignFunction'),
    ('mmcv.ops.nms', 'NMSop'),
)

_HALF = (torch.float16, torch.bfloat16)
_MARK = '_mmlape_float32'
_PLAN = '_mmlape_float32_plan'
#: How many :func:`float32_mmcv_ops` contexts are open.
_ACTIVE = 0


class _Plan(NamedTuple):
    """What the forward changed, for the backward to undo."""
    device_type: str
    in_dtypes: Tuple[Optional[torch.dtype], ...]  # per positional input
    out_dtype: Optional[torch.dtype]  # that of the first floating input


def _autocast_enabled(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except RuntimeError:  # a device type autocast does not know
        return False


def _to_float32(value: Any) -> Any:
    if (isinstance(value, Tensor) and value.is_floating_point()
            and value.dtype in _HALF):
        return value.float()
    return value


def _to_dtype(value: Any, dtype: Optional[torch.dtype]) -> Any:
    if (dtype is not None and isinstance(value, Tensor)
            and value.is_floating_point() and value.dtype != dtype):
        return value.to(dtype)
    return value


def _plan(args: tuple, kwargs: dict) -> Optional[_Plan]:
    """``None`` when the op can run as it is, else how to run it."""
    if not _ACTIVE:
        return None
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
    if not tensors:
        return None
    device_type = tensors[0].device.type
    if not (_autocast_enabled(device_type) or any(t.dtype in _HALF
                                                  for t in tensors)):
        return None
    in_dtypes = tuple(
        a.dtype if isinstance(a, Tensor) and a.is_floating_point() else None
        for a in args)
    first = next((d for d in in_dtypes if d is not None), None)
    return _Plan(device_type, in_dtypes, first)


def _wrap_forward(forward: Callable) -> Callable:

    @functools.wraps(forward)
    def float32_forward(ctx, *args, **kwargs):
        plan = _plan(args, kwargs)
        setattr(ctx, _PLAN, plan)
        if plan is None:
            return forward(ctx, *args, **kwargs)
        args = tuple(_to_float32(a) for a in args)
        kwargs = {k: _to_float32(v) for k, v in kwargs.items()}
        with torch.autocast(plan.device_type, enabled=False):
            out = forward(ctx, *args, **kwargs)
        if isinstance(out, tuple):
            return tuple(_to_dtype(o, plan.out_dtype) for o in out)
        return _to_dtype(out, plan.out_dtype)

    setattr(float32_forward, _MARK, True)
    return float32_forward


def _wrap_backward(backward: Callable) -> Callable:

    @functools.wraps(backward)
    def float32_backward(ctx, *grads):
        plan = getattr(ctx, _PLAN, None)
        if plan is None:
            return backward(ctx, *grads)
        with torch.autocast(plan.device_type, enabled=False):
            out = backward(ctx, *(_to_float32(g) for g in grads))
        if not isinstance(out, tuple):
            return _to_dtype(out, plan.in_dtypes[0])
        return tuple(
            _to_dtype(g, d)
            for g, d in zip(out, plan.in_dtypes)) + out[len(plan.in_dtypes):]

    setattr(float32_backward, _MARK, True)
    return float32_backward


def float32_autograd_function(cls: type) -> bool:
    """Make an autograd Function hand its kernel no half tensor inside
    :func:`float32_mmcv_ops` (wraps ``forward``/``backward`` in place;
    ``forward`` must take ``ctx`` first, as mmcv's do).

    Args:
        cls (type): A subclass of :class:`torch.autograd.Function`.

    Returns:
        bool: True if this call wrapped it, False if it was wrapped already.

    Example:
        >>> class Double(torch.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         assert x.dtype == torch.float32
        ...         return x * 2
        ...     @staticmethod
        ...     def backward(ctx, grad):
        ...         return grad * 2
        >>> float32_autograd_function(Double)
        True
        >>> float32_autograd_function(Double)
        False
        >>> x = torch.ones(2, dtype=torch.bfloat16, requires_grad=True)
        >>> with float32_mmcv_ops(), torch.autocast('cpu',
        ...                                         dtype=torch.bfloat16):
        ...     y = Double.apply(x)  # forward sees float32
        >>> y.dtype
        torch.bfloat16
        >>> y.sum().backward()
        >>> x.grad
        tensor([2., 2.], dtype=torch.bfloat16)
    """
    if not (isinstance(cls, type)
            and issubclass(cls, torch.autograd.Function)):
        raise TypeError(f'float32_autograd_function takes a subclass of '
                        f'torch.autograd.Function, not {cls!r}')
    if getattr(cls.forward, _MARK, False):
        return False
    cls.forward = staticmethod(_wrap_forward(cls.forward))
    if 'backward' in vars(cls):
        cls.backward = staticmethod(_wrap_backward(cls.backward))
    return True


def install_float32_mmcv_ops() -> List[type]:
    """Apply :func:`float32_autograd_function` to the Functions of
    :data:`MMCV_FLOAT32_OPS`. Idempotent.

    Returns:
        list[type]: The Functions this call wrapped (empty when done
        before).
    """
    wrapped = []
    for module, name in MMCV_FLOAT32_OPS:
        cls = getattr(importlib.import_module(module), name)
        if float32_autograd_function(cls):
            wrapped.append(cls)
    return wrapped


@contextlib.contextmanager
def float32_mmcv_ops() -> Iterator[None]:
    """Inside, mmcv's ops of :data:`MMCV_FLOAT32_OPS` hand their kernels
    float32 (this module's docstring); contexts nest.

    Example:
        >>> from mmcv.ops import nms
        >>> boxes = torch.tensor([[0., 0., 4., 4.], [1., 1., 5., 5.]])
        >>> with float32_mmcv_ops():
        ...     _, keep = nms(boxes.bfloat16(), torch.tensor([.9, .8]), .3)
        >>> keep
        tensor([0])
    """
    global _ACTIVE
    install_float32_mmcv_ops()
    _ACTIVE += 1
    try:
        yield
    finally:
        _ACTIVE -= 1


#: The model methods a runner calls for one step.
STEPS = ('train_step', 'val_step', 'test_step')


@HOOKS.register_module()
class Float32MmcvOpsHook(Hook):
    """Run each train, val and test step of the runner's model inside
    :func:`float32_mmcv_ops`; restored after the run. The tools add it to
    every mmdet run (``dict(type='mmlape.Float32MmcvOpsHook')``).
    """

    priority = 'VERY_HIGH'

    def before_run(self, runner) -> None:
        model = runner.model
        self._wrapped = (model, {})
        for name in STEPS:
            step = getattr(model, name, None)
            if step is not None:
                self._wrapped[1][name] = vars(model).get(name)
                setattr(model, name, _in_float32(step))

    def after_run(self, runner) -> None:
        model, saved = getattr(self, '_wrapped', (None, {}))
        for name, own in saved.items():
            if own is None:
                delattr(model, name)
            else:
                setattr(model, name, own)
        self._wrapped = (None, {})


def _in_float32(step: Callable) -> Callable:

    @functools.wraps(step)
    def float32_step(*args, **kwargs):
        with float32_mmcv_ops():
            return step(*args, **kwargs)

    return float32_step


def use_float32_mmcv_ops(cfg) -> bool:
    """Add :class:`Float32MmcvOpsHook` to an mmdet config's
    ``custom_hooks`` unless it is there; return whether it was added."""
    if cfg.get('default_scope') != 'mmdet':
        return False
    hooks = list(cfg.get('custom_hooks') or [])
    if any(
            str(h.get('type', '')).split('.')[-1] ==
            Float32MmcvOpsHook.__name__ for h in hooks if isinstance(h, dict)):
        return False
    cfg.custom_hooks = hooks + [dict(type='mmlape.Float32MmcvOpsHook')]
    return True
