"""Rotary position embeddings for the ViT: RoPE-Axial and RoPE-Mixed.

Channel pair ``j`` of a head's query and key at column ``x``, row ``y`` is
rotated by ``x * fx[j] + y * fy[j]`` (interleaved pairs; the class token is
not rotated), so a logit depends on the patches' offset only. One layer's
frequencies are ``(2, heads, head_dims / 2)``, with ``m = head_dims / 4``:

- ``rope_axial``: fixed, the first ``m`` pairs turn with the column at
  ``theta^(-j / m)`` (``theta = 100``), the others with the row.
- ``rope_mixed``: learnable per layer and head (``blocks.{l}.attn.
  rope_freqs``), starting at magnitudes ``theta^(-j / m)`` (``theta = 10``)
  along a random angle ``a`` per head (``a + pi / 2`` for the second half).

Another grid gives other positions, no resize. Angles are float32.

References:
    Heo et al., "Rotary Position Embedding for Vision Transformer", ECCV
    2024; timm's ``RotaryEmbeddingCat``/``RotaryEmbeddingMixed`` for the
    layout.
"""
import math
from typing import Sequence, Tuple

import torch
from torch import Tensor

from .pe_plan import QKFn

__all__ = [
    'rope_magnitudes', 'axial_freqs', 'mixed_freqs', 'init_mixed_freqs',
    'rotary_tables', 'rotate_pairs', 'apply_rotary', 'rotary_qk'
]


def rope_magnitudes(head_dims: int, theta: float) -> Tensor:
    """``theta^(-j / m)`` for ``j = 0 .. m-1``, ``m = head_dims / 4``.

    Raises:
        ValueError: ``head_dims`` is not a multiple of 4 (two axes, each a
            whole number of channel pairs).
    """
    if head_dims % 4:
        raise ValueError(f'a 2D rotary PE needs head_dims (embed_dims / '
                         f'num_heads) divisible by 4, got {head_dims}')
    m = head_dims // 4
    exponent = torch.arange(m, dtype=torch.float64) / m
    return (theta**-exponent).float()


def axial_freqs(head_dims: int, num_heads: int, theta: float) -> Tensor:
    """RoPE-Axial's frequencies ``(2, heads, head_dims / 2)``: the first
    half of the pairs turn with the column (``fx``), the second with the
    row (``fy``), at the same magnitudes.

    Example:
        >>> axial_freqs(8, 1, 100.)
        tensor([[[1.0000, 0.1000, 0.0000, 0.0000]],
        <BLANKLINE>
                [[0.0000, 0.0000, 1.0000, 0.1000]]])
    """
    mag = rope_magnitudes(head_dims, theta)
    zero = torch.zeros_like(mag)
    fx = torch.cat([mag, zero]).expand(num_heads, -1)
    fy = torch.cat([zero, mag]).expand(num_heads, -1)
    return torch.stack([fx, fy]).contiguous()


def mixed_freqs(head_dims: int, num_heads: int, theta: float,
                angles: Tensor) -> Tensor:
    """RoPE-Mixed's frequencies ``(2, heads, head_dims / 2)`` along the
    direction ``angles`` (one per head, radians): the first half of the
    pairs along ``a``, the second along ``a + pi / 2``."""
    mag = rope_magnitudes(head_dims, theta)
    a = angles.reshape(num_heads, 1).float()
    fx = torch.cat([mag * torch.cos(a), mag * torch.cos(a + math.pi / 2)], -1)
    fy = torch.cat([mag * torch.sin(a), mag * torch.sin(a + math.pi / 2)], -1)
    return torch.stack([fx, fy])


def init_mixed_freqs(freqs: Tensor, theta: float) -> None:
    """Fill one layer's RoPE-Mixed frequencies ``(2, heads, head_dims / 2)``
    in place, along angles uniform in ``[0, 2 pi)`` drawn per head (the
    paper's initialisation)."""
    _, heads, half = freqs.shape
    angles = torch.rand(heads) * 2 * math.pi
    with torch.no_grad():
        freqs.copy_(mixed_freqs(2 * half, heads, theta, angles))


def rotary_tables(freqs: Tensor,
                  grid_hw: Sequence[int],
                  num_extra_tokens: int = 0) -> Tuple[Tensor, Tensor]:
    """The cosines and sines that rotate one layer's queries and keys.

    Args:
        freqs (Tensor): ``(2, heads, head_dims / 2)``, ``(fx, fy)``.
        grid_hw (Sequence[int]): The patch grid ``(H, W)``; tokens in raster
            order.
        num_extra_tokens (int): Leading tokens that are not patches (a class
            token): cosine 1 and sine 0, i.e. not rotated. Defaults to 0.

    Returns:
        tuple[Tensor, Tensor]: ``cos`` and ``sin``, float32, each
        ``(1, heads, extra + H*W, head_dims)``, every value repeated for
        the two channels of its pair.

    Example:
        >>> cos, sin = rotary_tables(axial_freqs(8, 2, 100.), (3, 4), 1)
        >>> cos.shape, bool(cos[0, :, 0].eq(1).all())
        (torch.Size([1, 2, 13, 8]), True)
    """
    h, w = grid_hw
    freqs = freqs.float()
    ys, xs = torch.meshgrid(
        torch.arange(h, dtype=torch.float32, device=freqs.device),
        torch.arange(w, dtype=torch.float32, device=freqs.device),
        indexing='ij')
    xs, ys = xs.reshape(-1, 1), ys.reshape(-1, 1)
    angles = xs * freqs[0][:, None] + ys * freqs[1][:, None]  # heads, N, d/2
    cos = angles.cos().repeat_interleave(2, dim=-1)
    sin = angles.sin().repeat_interleave(2, dim=-1)
    if num_extra_tokens:
        pad = (0, 0, num_extra_tokens, 0)
        cos = torch.nn.functional.pad(cos, pad, value=1.)
        sin = torch.nn.functional.pad(sin, pad, value=0.)
    return cos[None], sin[None]


def rotate_pairs(x: Tensor) -> Tensor:
    """Each channel pair ``(a, b)`` of the last axis as ``(-b, a)``: a
    quarter turn."""
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the channel pairs of ``x`` ``(B, heads, N, head_dims)`` by the
    angles of ``cos`` and ``sin`` (broadcast to it); the result in ``x``'s
    dtype."""
    return (x * cos + rotate_pairs(x) * sin).to(x.dtype)


def rotary_qk(cos: Tensor, sin: Tensor) -> QKFn:
    """The plan's q/k map of one layer
    (:attr:`~mmlape.models.layers.pe_plan.LayerPE.qk`): both rotated by
    the same tables."""

    def rotate(q: Tensor, k: Tensor) -> Tuple[Tensor, Tensor]:
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)

    return rotate
