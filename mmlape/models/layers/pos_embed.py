"""Absolute position embeddings: builders and the one resize.

References:
    Vaswani et al., 2017 (1D sin-cos); the LaPE paper and code (the PE
    types, a zero class-token position); RoPE-ViT (Heo et al., ECCV 2024)
    for the rotary types (:mod:`.rope`). The PE types and the resizing
    order: docs/methods.md ("PE types and resizing").
"""
from typing import Dict, Literal, Optional, Sequence, Tuple, get_args

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    'ABSOLUTE_PE_TYPES', 'PE_TYPES', 'PEType', 'ROTARY_PE_TYPES',
    'check_pe_setting', 'join_pe_type', 'pe_settings', 'pe_setting_name',
    'parse_pe_setting', 'build_1d_sincos', 'build_2d_sincos',
    'resize_pos_embed'
]

#: Position-embedding types a backbone accepts (``pe_type=...``), written
#: only here.
PEType = Literal['learnable', 'sincos1d', 'sincos2d', 'relative', 'rope_axial',
                 'rope_mixed']
PE_TYPES: Tuple[str, ...] = get_args(PEType)
#: The rotary types (:mod:`.rope`); an absolute PE may sit beside one
#: (``ape_type``).
ROTARY_PE_TYPES: Tuple[str, ...] = tuple(
    t for t in PE_TYPES if t.startswith('rope_'))
#: The types that are a PE tensor added to tokens (all but ``relative``,
#: a bias on the attention logits, and the rotary ones).
ABSOLUTE_PE_TYPES: Tuple[str, ...] = tuple(
    t for t in PE_TYPES if t != 'relative' and t not in ROTARY_PE_TYPES)
#: How a rotary type and the absolute PE beside it are written as one
#: setting (:func:`pe_setting_name`).
_SETTING_SEP = '+'


def check_pe_setting(pe_type: str,
                     ape_type: Optional[str] = None,
                     rope_theta: Optional[float] = None) -> None:
    """Refuse a backbone's PE arguments that do not go together.

    Raises:
        ValueError: An unknown ``pe_type``, or an ``ape_type`` or
            ``rope_theta`` without a rotary ``pe_type``.
    """
    if pe_type not in PE_TYPES:
        raise ValueError(f'Unknown pe_type={pe_type!r}; choose one of '
                         f'{list(PE_TYPES)}')
    rotary = pe_type in ROTARY_PE_TYPES
    if ape_type is not None:
        if ape_type not in ABSOLUTE_PE_TYPES:
            raise ValueError(f'Unknown ape_type={ape_type!r}; the absolute '
                             f'PE beside a rotary one is one of '
                             f'{list(ABSOLUTE_PE_TYPES)}')
        if not rotary:
            raise ValueError(
                f'ape_type={ape_type!r} is an absolute PE beside a rotary '
                f'pe_type ({list(ROTARY_PE_TYPES)}); pe_type={pe_type!r} '
                f'is not rotary')
    if rope_theta is not None and not rotary:
        raise ValueError(f'rope_theta={rope_theta!r} is the theta of a '
                         f'rotary pe_type ({list(ROTARY_PE_TYPES)}); '
                         f'pe_type={pe_type!r} is not rotary')


def pe_settings() -> Tuple[str, ...]:
    """Every PE setting a ViT takes: each ``pe_type``, then each rotary
    type with an absolute PE beside it (``'rope_mixed+learnable'``).

    Example:
        >>> 'rope_axial+sincos2d' in pe_settings()
        True
    """
    return PE_TYPES + tuple(
        pe_setting_name(r, a) for r in ROTARY_PE_TYPES
        for a in ABSOLUTE_PE_TYPES)


def pe_setting_name(pe_type: str, ape_type: Optional[str] = None) -> str:
    """The name of a backbone's PE setting: ``pe_type``, or
    ``'{pe_type}+{ape_type}'`` with an absolute PE beside a rotary one."""
    return pe_type if ape_type is None else \
        f'{pe_type}{_SETTING_SEP}{ape_type}'


def parse_pe_setting(name: str) -> Dict[str, Optional[str]]:
    """The backbone arguments of a setting name: ``dict(pe_type=...,
    ape_type=...)`` (see :func:`pe_settings`).

    Raises:
        ValueError: Not a setting; the message lists them.
    """
    if name not in pe_settings():
        raise ValueError(f'Unknown PE setting {name!r}; choose one of '
                         f'{list(pe_settings())}')
    pe_type, _, ape_type = name.partition(_SETTING_SEP)
    return dict(pe_type=pe_type, ape_type=ape_type or None)


def join_pe_type(name: str) -> str:
    """The PE type a setting's joins act on: the absolute one beside a
    rotary PE, else ``pe_type``.

    Example:
        >>> join_pe_type('rope_mixed+learnable'), join_pe_type('rope_mixed')
        ('learnable', 'rope_mixed')
    """
    setting = parse_pe_setting(name)
    return setting['ape_type'] or setting['pe_type']


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
                     num_extra_tokens: int = 1,
                     antialias: bool = False) -> Tensor:
    """Resize an absolute PE from one patch grid to another.

    Takes mmpretrain's ``resize_pos_embed`` arguments. Extra rows are
    kept; patch rows are interpolated as an image (``align_corners=False``,
    float32). mmlape's only PE resize, applied to the RAW PE before any PE
    norm. ``antialias`` resizes as timm's ``resample_abs_pos_embed``
    (low-pass when shrinking; bicubic ``a = -0.5``, not ``-0.75``).

    Args:
        pos_embed (Tensor): Shape ``(B, extra + Hs*Ws, C)``; ``B`` is 1, or
            the number of layers for per-layer PEs.
        src_shape (tuple[int, int]): Source grid ``(Hs, Ws)``.
        dst_shape (tuple[int, int]): Target grid ``(Hd, Wd)``.
        mode (str): Interpolation mode of ``F.interpolate``. Defaults to
            ``'bicubic'``.
        num_extra_tokens (int): Leading rows that are not patches (1 for a
            class token). Defaults to 1.
        antialias (bool): Antialiased interpolation (``'bilinear'`` and
            ``'bicubic'`` only). Defaults to False.

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
    if antialias and mode not in ('bilinear', 'bicubic'):
        raise ValueError(f'resize_pos_embed: antialias needs mode '
                         f"'bilinear' or 'bicubic', got {mode!r}")
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
    align = False if mode in ('bilinear', 'bicubic') else None
    grid = F.interpolate(
        grid,
        size=dst_shape,
        mode=mode,
        align_corners=align,
        antialias=antialias)
    grid = grid.flatten(2).transpose(1, 2).to(pos_embed.dtype)
    return torch.cat([extra, grid], dim=1)
