"""The per-layer add of a PE to the attention input, where it costs least.

Under autocast ``norm1(x)`` is float32 and the projection casts it; the
add writes the autocast dtype directly, so it replaces that cast instead of
adding one more pass over ``(B, N, C)``, with the same values (the float32
sum rounded once). Without autocast, under ``torch.compile`` and in a
``torch.jit`` trace, it is a plain add.

On CUDA, PyTorch's add with a broadcast operand and a cast runs in its
generic elementwise kernel, at a third of the cast's bandwidth (docs/gpu.md,
"The eval gap profiled"). Opt-in (:func:`use_triton`, the runtime setting
``speedups.triton_pe_add``; off by default, since no GPU figure on the
user's path has shown that it pays: in the one full-model figure, LaPE's
DeiT-Ti b256 training step took 1.135x the default join's with it on an
H200, against 1.021x with PyTorch's add on an H100): where Triton is
installed a small Triton kernel with contiguous loads does the add of a
large tensor instead (8M values or more in eval, 16M in training; a small
one is bound by the launch, which costs the host less in PyTorch). Its
first result per device and dtype is checked against
PyTorch's add; on a difference or an error PyTorch's add is used from then
on, said once in the log.
"""
from contextlib import nullcontext
from typing import Dict, Tuple

import torch
from mmengine.logging import print_log
from torch import Tensor

from .pe_plan import autocast_dtype

__all__ = ['add_attn_pe', 'add_to_dtype', 'use_triton']

#: Values of a sample a Triton program adds.
_BLOCK = 1024
#: Samples a Triton program adds its block of the PE to (the PE block is
#: read once for them).
_SAMPLES = 4
#: Fewest values of ``h`` the Triton kernel is launched for, by whether the
#: add records autograd (``'train'``) or not (``'eval'``). A launch costs
#: the host 12-17 us against PyTorch's 6 us (H200); after the LayerNorm the
#: kernel saves the GPU 2.1-2.5 us per million values against PyTorch's add
#: (H100: 24.6 us a layer at DeiT-Ti b256, 41.7 at DeiT-B b128). In eval
#: from 8M values on: at DeiT-Ti b256 (9.7M) PyTorch's add takes 25.5 us a
#: layer more than the default join's cast, 12 layers 0.31 ms of a 7.9 ms
#: step (less the default join's own input add, 34 us): 1.035x, where LaPE
#: and PVG measured 1.039-1.041x. With autograd from 16M values on: at
#: DeiT-Ti b256 LaPE's train step was 1.135x the default join's with the
#: kernel (H200; 1.021x with PyTorch's add on the H100), a cost not yet
#: explained.
_TRITON_MIN_NUMEL = {'train': 1 << 24, 'eval': 1 << 23}
#: (device index, dtype) -> whether the Triton add gave PyTorch's result.
_TRITON_CHECKED: Dict[Tuple[int, torch.dtype], bool] = {}
_TRITON_KERNEL = None
#: Whether a large CUDA add may take the Triton kernel (:func:`use_triton`).
_USE_TRITON = False


def use_triton(enabled: bool = True) -> None:
    """Let the per-layer PE add of a large CUDA tensor take the Triton
    kernel (``speedups.triton_pe_add``, :mod:`mmlape.hosts.speedups`), or
    keep PyTorch's add (the default) with ``enabled=False``."""
    global _USE_TRITON
    _USE_TRITON = bool(enabled)


def _triton_kernel():
    """The Triton kernel, built on first use; ``False`` without Triton."""
    global _TRITON_KERNEL
    if _TRITON_KERNEL is None:
        try:
            import triton
            import triton.language as tl
        except Exception:  # not installed, or unusable on this host
            _TRITON_KERNEL = False
            return _TRITON_KERNEL

        @triton.jit
        def add_pe(h_ptr, pe_ptr, out_ptr, per_sample, batch,
                   BLOCK: tl.constexpr, SAMPLES: tl.constexpr):
            # one block of the PE, loaded once, added to SAMPLES samples
            col = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            first = tl.program_id(1) * SAMPLES
            mask = col < per_sample
            pe = tl.load(pe_ptr + col, mask=mask)
            for i in tl.static_range(SAMPLES):
                keep = mask & (first + i < batch)
                at = (first + i).to(tl.int64) * per_sample + col
                h = tl.load(h_ptr + at, mask=keep)
                out = (h + pe).to(
                    out_ptr.dtype.element_ty, fp_downcast_rounding='rtne')
                tl.store(out_ptr + at, out, mask=keep)

        _TRITON_KERNEL = (triton.cdiv, add_pe)
    return _TRITON_KERNEL


def _worth_triton(h: Tensor, grad: bool = False) -> bool:
    """Whether ``h`` is large enough for the kernel to pay its launch, in
    a step with autograd (``grad``) or without."""
    return h.numel() >= _TRITON_MIN_NUMEL['train' if grad else 'eval']


def _triton_fits(h: Tensor,
                 pe: Tensor,
                 dtype: torch.dtype,
                 grad: bool = False) -> bool:
    return (h.is_cuda and pe.device == h.device
            and _shapes_fit(h, pe, dtype, grad))


def _shapes_fit(h: Tensor,
                pe: Tensor,
                dtype: torch.dtype,
                grad: bool = False) -> bool:
    """Whether the kernel takes these tensors, wherever they are."""
    return (_worth_triton(h, grad) and h.dtype == pe.dtype == torch.float32
            and dtype in (torch.bfloat16, torch.float16) and h.dim() >= 2
            and pe.shape == (1, ) + h.shape[1:] and h.is_contiguous()
            and pe.is_contiguous() and 0 < h.shape[0] < 65536
            and pe.numel() < 2**31 - _BLOCK)  # the kernel's int32 columns


def _launch(h: Tensor,
            pe: Tensor,
            out: Tensor,
            samples: int = _SAMPLES) -> Tensor:
    cdiv, kernel = _triton_kernel()
    per_sample, batch = pe.numel(), h.shape[0]
    grid = (cdiv(per_sample, _BLOCK), cdiv(batch, samples))
    # entering the device costs the host a few us: only when it differs
    other = h.is_cuda and h.device.index != torch.cuda.current_device()
    with (torch.cuda.device(h.device) if other else nullcontext()):
        kernel[grid](
            h, pe, out, per_sample, batch, BLOCK=_BLOCK, SAMPLES=samples)
    return out


def _first_launch(h: Tensor, pe: Tensor, out: Tensor, key) -> Tensor:
    """The first add on a device and dtype: the Triton kernel's result is
    compared with PyTorch's add, which is kept on any difference."""
    if _triton_kernel() is False:
        _TRITON_CHECKED[key] = False
        return torch.add(h, pe, out=out)
    want = torch.add(h, pe, out=torch.empty_like(out))
    try:
        got = _launch(h, pe, out)
        ok = bool(((got == want) | (got.isnan() & want.isnan())).all())
        why = 'its result differs from PyTorch\'s add'
    except Exception as exc:  # a compiler or driver this Triton cannot use
        ok, why = False, f'{type(exc).__name__}: {exc}'.splitlines()[0]
    _TRITON_CHECKED[key] = ok
    if not ok:
        print_log(
            f'the per-layer PE add uses PyTorch\'s kernel on {h.device} '
            f'({out.dtype}): the Triton kernel is not used, {why}',
            logger='current')
        return want
    return out


def add_to_dtype(h: Tensor,
                 pe: Tensor,
                 dtype: torch.dtype,
                 grad: bool = False) -> Tensor:
    """``(h + pe).to(dtype)`` in one kernel: the float32 sum rounded once.

    Differentiable: where autograd records and ``h`` or ``pe`` requires a
    gradient, the add goes through :class:`_AddToDtype` (the training
    threshold).

    Args:
        h (Tensor): ``(B, ...)`` values.
        pe (Tensor): ``(1, ...)``, broadcast over ``h``'s first dimension.
        dtype (torch.dtype): The result's dtype.
        grad (bool): Whether the step records autograd (training), which
            sets the size from which a CUDA add takes the Triton kernel.
            Defaults to False.

    Returns:
        Tensor: The sum, of ``h``'s shape, in ``dtype``.

    Example:
        >>> h, pe = torch.randn(2, 5, 8), torch.randn(1, 5, 8)
        >>> out = add_to_dtype(h, pe, torch.float16)
        >>> torch.equal(out, (h + pe).half())
        True
    """
    if torch.is_grad_enabled() and (h.requires_grad or pe.requires_grad):
        return _AddToDtype.apply(h, pe, dtype)
    out = torch.empty_like(h, dtype=dtype)
    key = (h.device.index, dtype)
    ok = _TRITON_CHECKED.get(key)
    if not _USE_TRITON or ok is False or not _triton_fits(h, pe, dtype, grad):
        return torch.add(h, pe, out=out)
    if ok:
        return _launch(h, pe, out)
    if _capturing(h):  # the check reads the result: not while capturing
        return torch.add(h, pe, out=out)
    return _first_launch(h, pe, out, key)


def _capturing(h: Tensor) -> bool:
    """Whether a CUDA graph is being captured on the current stream (a
    capture makes its device the current one)."""
    return h.is_cuda and torch.cuda.is_current_stream_capturing()


class _AddToDtype(torch.autograd.Function):
    """``(h + pe).to(dtype)`` in one op; the gradient of ``pe`` is summed
    over the dimensions it was broadcast along, in ``pe``'s dtype."""

    @staticmethod
    def forward(ctx, h: Tensor, pe: Tensor, dtype: torch.dtype) -> Tensor:
        ctx.h_dtype, ctx.pe_dtype, ctx.pe_shape = h.dtype, pe.dtype, pe.shape
        return add_to_dtype(h, pe, dtype, grad=True)

    @staticmethod
    def backward(ctx, grad: Tensor):
        grad_h = grad_pe = None
        if ctx.needs_input_grad[0]:
            grad_h = grad.to(ctx.h_dtype)
        if ctx.needs_input_grad[1]:
            grad_pe = _sum_to(grad, ctx.pe_shape, ctx.pe_dtype)
        return grad_h, grad_pe, None


def _sum_to(grad: Tensor, shape: torch.Size, dtype: torch.dtype) -> Tensor:
    """``grad`` summed over the dimensions that broadcast ``shape`` to it,
    accumulated and returned in ``dtype`` (one reduction, no copy)."""
    lead = grad.dim() - len(shape)
    dims = list(range(lead)) + [
        lead + i
        for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1
    ]
    if not dims:
        return grad.to(dtype)
    return grad.sum(dims, keepdim=True, dtype=dtype).reshape(shape)


#: The dtypes autocast casts (a float64 tensor it leaves as it is).
_AUTOCAST_CASTS = (torch.float32, torch.float16, torch.bfloat16)


def add_attn_pe(h: Tensor, pe: Tensor) -> Tensor:
    """``norm1(x) + pe`` as the attention consumes it.

    Args:
        h (Tensor): The normalised tokens ``(B, N, C)``, a LayerNorm's
            output (not needed by its backward, so it may be overwritten).
        pe (Tensor): The layer's PE ``(1, N, C)``.

    Returns:
        Tensor: The sum, in the autocast dtype when autocast is on for
        ``h``'s device and would cast ``h`` (float32, or the other half
        type); else ``h`` itself, added to in place. Compiled or traced,
        ``h + pe``.

    Example:
        >>> h, pe = torch.randn(2, 5, 8), torch.randn(1, 5, 8)
        >>> with torch.autocast('cpu', dtype=torch.bfloat16):
        ...     out = add_attn_pe(h.clone(), pe)
        >>> out.dtype
        torch.bfloat16
        >>> torch.equal(out, (h + pe).to(torch.bfloat16))
        True
    """
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return h + pe  # a trace records no Triton launch
    dtype = autocast_dtype(h.device.type)
    if dtype is None or dtype == h.dtype or h.dtype not in _AUTOCAST_CASTS:
        return h.add_(pe)
    return add_to_dtype(h, pe, dtype)
