"""Absolute position embeddings: builders and the one resize.

References:
    Vaswani et al., 2017 (1D sinusoidal PE); the LaPE paper and code
    (Yu et al., ICCV 2023) for the PE types it studies (learnable, 1D and 2D
    sin-cos with a zero class-token position); DeiT (Touvron et al., 2021)
    for truncated-normal initialisation. The PE types and the resizing
    order: docs/methods.md ("PE types and resizing").
"""
from typing import Literal, Sequence, Tuple, get_args

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    'ABSOLUTE_PE_TYPES', 'PE_TYPES', 'PEType', 'build_1d_sincos',
    'build_2d_sincos', 'resize_pos_embed'
]

#: Position-embedding types a backbone accepts (``pe_type=...``): the one
#: place they are written; everything else derives from it.
PEType = Literal['learnable', 'sincos1d', 'sincos2d', 'relative']
PE_TYPES: Tuple[str, ...] = get_args(PEType)
#: The types that are a PE tensor added to tokens (all but ``relative``,
#: a bias on the attention logits).
ABSOLUTE_PE_TYPES: Tuple[str,
                         ...] = tuple(t for t in PE_TYPES if t != 'relative')
#: Interpolation modes :func:`resize_pos_embed` accepts.
_RESIZE_MODES = ('nearest', 'bilinear', 'bicubic', 'area', 'nearest-exact')


def build_1d_sincos(num_positions: int,
                    embed_dims: int,
                    temperature: float = 10000.) -> Tensor:
    """The fixed 1D sin-cos PE of the Transformer paper.

    Position ``p``, channel ``2i``: ``sin(p / T^(2i/C))``; channel ``2i+1``:
    ``cos(p / T^(2i/C))``. With a class token, it is position 0 and the
    patches follow in raster order (as in the LaPE code).

    Args:
        num_positions (int): Number of rows (patches, plus 1 with a class
            token).
        embed_dims (int): Channels ``C``; must be even.
        temperature (float): ``T``. Defaults to 10000.

    Returns:
        Tensor: Shape ``(1, num_positions, embed_dims)``.

    Example:
        >>> build_1d_sincos(197, 192).shape
        torch.Size([1, 197, 192])
    """
    if embed_dims % 2:
        raise ValueError(f'pe_type="sincos1d" needs an even embed_dims, got '
                         f'{embed_dims}')
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    idx = torch.arange(0, embed_dims, 2, dtype=torch.float64)
    angle = pos / temperature**(idx / embed_dims)
    pe = torch.zeros(num_positions, embed_dims, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe.float()[None]


def build_2d_sincos(grid_hw: Sequence[int],
                    embed_dims: int,
                    with_cls_token: bool = False,
                    temperature: float = 10000.) -> Tensor:
    """The fixed 2D sin-cos PE: half the channels encode x, half encode y.

    Channels ``[0, C/2)`` hold ``sin, cos`` pairs of the column index and
    channels ``[C/2, C)`` those of the row index, each with frequencies
    ``1 / T^(4i/C)``. The class-token position (when present) is all zeros.

    Args:
        grid_hw (Sequence[int]): Patch grid ``(H, W)``.
        embed_dims (int): Channels ``C``; must be a multiple of 4.
        with_cls_token (bool): Prepend a zero row for the class token.
            Defaults to False.
        temperature (float): ``T``. Defaults to 10000.

    Returns:
        Tensor: Shape ``(1, H*W [+1], embed_dims)``.

    Example:
        >>> build_2d_sincos((14, 14), 192, with_cls_token=True).shape
        torch.Size([1, 197, 192])
    """
    if embed_dims % 4:
        raise ValueError(f'pe_type="sincos2d" needs embed_dims divisible by '
                         f'4, got {embed_dims}')
    h, w = grid_hw
    half = embed_dims // 2
    freq = 1.0 / temperature**(
        torch.arange(0, half, 2, dtype=torch.float64) / half)
    ys, xs = torch.meshgrid(
        torch.arange(h, dtype=torch.float64),
        torch.arange(w, dtype=torch.float64),
        indexing='ij')
    pe = torch.zeros(h * w, embed_dims, dtype=torch.float64)
    ax = xs.reshape(-1, 1) * freq
    ay = ys.reshape(-1, 1) * freq
    pe[:, 0:half:2] = torch.sin(ax)
    pe[:, 1:half:2] = torch.cos(ax)
    pe[:, half::2] = torch.sin(ay)
    pe[:, half + 1::2] = torch.cos(ay)
    if with_cls_token:
        pe = torch.cat([pe.new_zeros(1, embed_dims), pe], dim=0)
    return pe.float()[None]


def resize_pos_embed(pos_embed: Tensor,
                     src_shape: Tuple[int, int],
                     dst_shape: Tuple[int, int],
                     mode: str = 'bicubic',
                     num_extra_tokens: int = 1) -> Tensor:
    """Resize an absolute PE from one patch grid to another.

    The arguments and defaults are those of mmpretrain's
    ``resize_pos_embed`` (``src_shape, dst_shape, mode, num_extra_tokens``).
    The extra (class-token) rows are kept as they are; the patch rows are
    interpolated as an image (``align_corners=False``, in float32 because
    bicubic needs it). This is the only place mmlape resizes a PE: it is
    applied to the RAW PE, before any per-layer PE norm.

    Args:
        pos_embed (Tensor): Shape ``(B, extra + Hs*Ws, C)``; ``B`` is 1, or
            the number of layers for per-layer PEs.
        src_shape (tuple[int, int]): Source grid ``(Hs, Ws)``.
        dst_shape (tuple[int, int]): Target grid ``(Hd, Wd)``.
        mode (str): Interpolation mode of ``F.interpolate``. Defaults to
            ``'bicubic'``.
        num_extra_tokens (int): Leading rows that are not patches (1 for a
            class token). Defaults to 1.

    Returns:
        Tensor: Shape ``(B, extra + Hd*Wd, C)``; the input itself when the
        grids are equal.

    Example:
        >>> pe = torch.randn(1, 1 + 14 * 14, 192)
        >>> resize_pos_embed(pe, (14, 14), (32, 20), num_extra_tokens=1).shape
        torch.Size([1, 641, 192])
        >>> resize_pos_embed(pe[:, 1:], (14, 14), (7, 7),
        ...                  num_extra_tokens=0).shape
        torch.Size([1, 49, 192])
    """
    if mode not in _RESIZE_MODES:
        raise ValueError(f'resize_pos_embed: mode must be one of '
                         f'{list(_RESIZE_MODES)}, got {mode!r}')
    src_shape, dst_shape = tuple(src_shape), tuple(dst_shape)
    if src_shape == dst_shape:
        return pos_embed
    b, n, c = pos_embed.shape
    if n != num_extra_tokens + src_shape[0] * src_shape[1]:
        raise ValueError(
            f'pos_embed has {n} rows, which does not fit a {src_shape[0]}x'
            f'{src_shape[1]} grid with {num_extra_tokens} extra token(s)')
    extra = pos_embed[:, :num_extra_tokens]
    grid = pos_embed[:, num_extra_tokens:].reshape(b, *src_shape, c)
    grid = grid.permute(0, 3, 1, 2).float()
    # align_corners applies to the interpolating modes only.
    align = False if mode in ('bilinear', 'bicubic') else None
    grid = F.interpolate(grid, size=dst_shape, mode=mode, align_corners=align)
    grid = grid.flatten(2).transpose(1, 2).to(pos_embed.dtype)
    return torch.cat([extra, grid], dim=1)
