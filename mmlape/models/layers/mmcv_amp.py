"""mmcv's compiled ops in float32 under mixed precision.

References:
    mmcv 2.1.0's op wrappers (``mmcv/ops/multi_scale_deform_attn.py``,
    ``roi_align.py``, ``nms.py``) and their kernels: the CUDA kernels of
    deformable attention and RoIAlign dispatch float32, float64 and float16
    (not bfloat16), NMS reads float32 only (open-mmlab/mmcv issues #2878,
    #3061); ``torch.amp.custom_fwd(cast_inputs=torch.float32)``, which the
    official ViT-Adapter code puts on its deformable-attention function.

Under bfloat16 autocast on a GPU, ViT-Adapter's deformable attention hands
mmcv's CUDA kernel a bfloat16 ``value`` and Mask R-CNN's RoIAlign a
bfloat16 feature map, and both stop with a dtype error; NMS stops on any
half-precision box. On CPU the deformable attention takes mmcv's PyTorch
path, so CPU runs never showed it.

:func:`install_float32_mmcv_ops` (called by ``import mmlape``) wraps the
``forward`` and ``backward`` of the autograd Functions listed in
:data:`MMCV_FLOAT32_OPS` so that no float16/bfloat16 tensor reaches mmcv's
compiled dispatch:

- inside autocast of the inputs' device type (``cuda`` on a GPU, ``cpu`` in
  the tests), floating inputs are cast to float32 and the op runs with
  autocast disabled, as ``torch.amp.custom_fwd(cast_inputs=torch.float32)``
  runs a function;
- outside autocast, an op that receives a float16/bfloat16 tensor computes
  in float32;
- either way the result comes back in the dtype the op would have returned
  (that of its first floating input), because callers rely on it: mmdet's
  ``SingleRoIExtractor`` writes RoIAlign's output into a tensor of the
  features' dtype, which refuses float32 under bf16 autocast. (Where
  ``custom_fwd`` would return float32, as ViT-Adapter's deformable attention
  does, the next op is a linear layer that autocast casts to the half dtype
  anyway: the same numbers.)
- float32 inputs without autocast run the op untouched.

The gradients flow back to the original inputs in the inputs' own dtypes.
The deformable attention therefore runs in float32 under float16 autocast
too (as in the official ViT-Adapter), where mmcv's half kernel would have
taken it. The wrapping is idempotent and keeps the original functions as
``__wrapped__``. It lives with the layers because it concerns the mmcv ops
the models run (``adapter.py`` imports ``mmcv.ops`` already); ``utils``
knows no model and imports no ops.
"""
import contextlib
import functools
import importlib
from typing import (Any, Callable, ContextManager, List, NamedTuple, Optional,
                    Tuple)

import torch
from torch import Tensor

__all__ = [
    'MMCV_FLOAT32_OPS', 'float32_autograd_function', 'install_float32_mmcv_ops'
]

#: ``(module, class)`` of the mmcv autograd Functions mmlape's models and
#: configs run: ViT-Adapter's deformable attention, Mask R-CNN's RoIAlign
#: (mmdet's ``SingleRoIExtractor``) and NMS (mmdet's RPN and box
#: post-processing, through ``batched_nms``).
MMCV_FLOAT32_OPS: Tuple[Tuple[str, str], ...] = (
    ('mmcv.ops.multi_scale_deform_attn', 'MultiScaleDeformableAttnFunction'),
    ('mmcv.ops.roi_align', 'RoIAlignFunction'),
    ('mmcv.ops.nms', 'NMSop'),
)

_HALF = (torch.float16, torch.bfloat16)
_MARK = '_mmlape_float32'
_PLAN = '_mmlape_float32_plan'


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


def _no_autocast(device_type: str) -> ContextManager:
    """Autocast of ``device_type`` off inside, when it is on."""
    if _autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def _plan(args: tuple, kwargs: dict) -> Optional[_Plan]:
    """``None`` when the op can run as it is, else how to run it."""
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
        with _no_autocast(plan.device_type):
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
        with _no_autocast(plan.device_type):
            out = backward(ctx, *(_to_float32(g) for g in grads))
        if not isinstance(out, tuple):
            return _to_dtype(out, plan.in_dtypes[0])
        return tuple(
            _to_dtype(g, d)
            for g, d in zip(out, plan.in_dtypes)) + out[len(plan.in_dtypes):]

    setattr(float32_backward, _MARK, True)
    return float32_backward


def float32_autograd_function(cls: type) -> bool:
    """Make an autograd Function hand its compiled kernel no half tensor.

    Wraps ``cls.forward`` (and ``cls.backward`` where the class defines one)
    in place, with the rules of this module's docstring. The Function must
    take ``ctx`` as the first argument of ``forward`` (the classic style,
    as mmcv's Functions do).

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
        >>> with torch.autocast('cpu', dtype=torch.bfloat16):
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
    """Apply :func:`float32_autograd_function` to the mmcv Functions of
    :data:`MMCV_FLOAT32_OPS`. Idempotent; ``import mmlape`` calls it.

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
