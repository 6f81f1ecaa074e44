"""The per-layer add of a PE to the attention input, where it costs least.

Under autocast ``norm1(x)`` is float32 and the projection casts it; the
add writes the autocast dtype directly (``torch.add(..., out=...)``), so it
replaces that cast instead of adding one more pass over ``(B, N, C)``, with
the same values (the float32 sum rounded once). Without autocast, and under
``torch.compile``, it is a plain add.
"""
from typing import Optional

import torch
from torch import Tensor

__all__ = ['add_attn_pe']


class _AddToDtype(torch.autograd.Function):
    """``(h + pe).to(dtype)`` in one op; the gradient of ``pe`` is summed
    over the broadcast batch in float32."""

    @staticmethod
    def forward(ctx, h: Tensor, pe: Tensor, dtype: torch.dtype) -> Tensor:
        ctx.h_dtype, ctx.pe_dtype = h.dtype, pe.dtype
        return torch.add(h, pe, out=torch.empty_like(h, dtype=dtype))

    @staticmethod
    def backward(ctx, grad: Tensor):
        grad_h = grad_pe = None
        if ctx.needs_input_grad[0]:
            grad_h = grad.to(ctx.h_dtype)
        if ctx.needs_input_grad[1]:
            grad_pe = grad.sum(0, keepdim=True, dtype=ctx.pe_dtype)
        return grad_h, grad_pe, None


def _autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return None


def add_attn_pe(h: Tensor, pe: Tensor) -> Tensor:
    """``norm1(x) + pe`` as the attention consumes it.

    Args:
        h (Tensor): The normalised tokens ``(B, N, C)``, a LayerNorm's
            output (not needed by its backward, so it may be overwritten).
        pe (Tensor): The layer's PE ``(1, N, C)``.

    Returns:
        Tensor: The sum, in the autocast dtype when autocast is on for
        ``h``'s device and ``h`` is of another dtype; else ``h`` itself,
        added to in place.

    Example:
        >>> h, pe = torch.randn(2, 5, 8), torch.randn(1, 5, 8)
        >>> with torch.autocast('cpu', dtype=torch.bfloat16):
        ...     out = add_attn_pe(h.clone(), pe)
        >>> out.dtype
        torch.bfloat16
        >>> torch.equal(out, (h + pe).to(torch.bfloat16))
        True
    """
    if torch.compiler.is_compiling():
        return h + pe
    dtype = _autocast_dtype(h.device.type)
    if dtype is None or dtype == h.dtype or not h.is_floating_point():
        return h.add_(pe)
    if torch.is_grad_enabled() and (h.requires_grad or pe.requires_grad):
        return _AddToDtype.apply(h, pe, dtype)
    return torch.add(h, pe, out=torch.empty_like(h, dtype=dtype))
