"""Position embeddings: the PE types as declared parts, their builders and
the one resize.

A PE type (``pe_type=...``) is one class registered here
(:class:`BasePEType`): its ``kind`` (``'absolute'``: a table added to the
tokens, on which the joins act; ``'relative'``: a bias per layer on the
attention logits, which the joins place; ``'rotary'``: a map of each
layer's queries and keys, applied as it is), the tensors it owns and which
of them skip weight decay, and what it contributes to a plan. The
backbone, the joins, the checkpoints and the tools ask the declaration;
none of them branches on a type's name. A type's per-layer tensors live in
each layer's attention, under the names checkpoints know
(``blocks.{i}.attn.relative_position_bias_table``,
``blocks.{i}.attn.rope_freqs``): the declaration attaches and reads them.

A new PE type is one class here and its name in :data:`PEType` (a rotary
one also its frequencies in :mod:`.rope`): at most two library files. A
type registered elsewhere (a test's toy type) works as well: the checks
read the registry.

References:
    Vaswani et al., 2017 (1D sin-cos); the LaPE paper and code (the PE
    types, a zero class-token position); RoPE-ViT (Heo et al., ECCV 2024)
    for the rotary types (:mod:`.rope`). The PE types and the resizing
    order: docs/methods.md ("PE types and resizing").
"""
from typing import Dict, List, Literal, Optional, Sequence, Tuple, get_args

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .rope import (axial_freqs, init_mixed_freqs, rope_magnitudes, rotary_qk,
                   rotary_tables)

__all__ = [
    'ABSOLUTE_PE_TYPES', 'PE_TYPES', 'PEType', 'ROTARY_PE_TYPES', 'BasePEType',
    'register_pe_type', 'pe_type_part', 'pe_type_names',
    'relative_position_index', 'check_pe_setting', 'join_pe_type',
    'pe_settings', 'pe_setting_name', 'parse_pe_setting', 'build_1d_sincos',
    'build_2d_sincos', 'resize_pos_embed'
]

#: The position-embedding types mmlape ships (``pe_type=...``), written
#: only here; each has its declaration below.
PEType = Literal['learnable', 'sincos1d', 'sincos2d', 'relative', 'rope_axial',
                 'rope_mixed']
PE_TYPES: Tuple[str, ...] = get_args(PEType)
#: How a rotary type and the absolute PE beside it are written as one
#: setting (:func:`pe_setting_name`).
_SETTING_SEP = '+'
#: name -> declaration (an instance), in registration order.
_REGISTRY: Dict[str, 'BasePEType'] = {}


def register_pe_type(cls: type) -> type:
    """Register a :class:`BasePEType` subclass under its ``name``."""
    _REGISTRY[cls.name] = cls()
    return cls


def pe_type_names(kind: Optional[str] = None) -> Tuple[str, ...]:
    """The registered PE types (of ``kind``, when given)."""
    return tuple(name for name, part in _REGISTRY.items()
                 if kind is None or part.kind == kind)


def pe_type_part(name: str) -> 'BasePEType':
    """The declaration of ``pe_type=name``.

    Raises:
        ValueError: An unknown type; the message lists the known ones.
    """
    if name not in _REGISTRY:
        raise ValueError(f'Unknown pe_type={name!r}; choose one of '
                         f'{list(_REGISTRY)}')
    return _REGISTRY[name]


def check_pe_setting(pe_type: str,
                     ape_type: Optional[str] = None,
                     rope_theta: Optional[float] = None) -> None:
    """Refuse a backbone's PE arguments that do not go together.

    Raises:
        ValueError: An unknown ``pe_type``, or an ``ape_type`` or
            ``rope_theta`` without a rotary ``pe_type``.
    """
    rotary = pe_type_part(pe_type).kind == 'rotary'
    absolute = pe_type_names('absolute')
    rotaries = list(pe_type_names('rotary'))
    if ape_type is not None:
        if ape_type not in absolute:
            raise ValueError(f'Unknown ape_type={ape_type!r}; the absolute '
                             f'PE beside a rotary one is one of '
                             f'{list(absolute)}')
        if not rotary:
            raise ValueError(
                f'ape_type={ape_type!r} is an absolute PE beside a rotary '
                f'pe_type ({rotaries}); pe_type={pe_type!r} is not rotary')
    if rope_theta is not None and not rotary:
        raise ValueError(f'rope_theta={rope_theta!r} is the theta of a '
                         f'rotary pe_type ({rotaries}); '
                         f'pe_type={pe_type!r} is not rotary')


def pe_settings() -> Tuple[str, ...]:
    """Every PE setting a ViT takes: each ``pe_type``, then each rotary
    type with an absolute PE beside it (``'rope_mixed+learnable'``).

    Example:
        >>> 'rope_axial+sincos2d' in pe_settings()
        True
    """
    return pe_type_names() + tuple(
        pe_setting_name(r, a) for r in pe_type_names('rotary')
        for a in pe_type_names('absolute'))


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


class BasePEType:
    """What one PE type is; the backbone and the joins ask it.

    Attributes:
        name (str): ``pe_type`` in configs.
        kind (str): ``'absolute'``, ``'relative'`` or ``'rotary'``.
        learnable (bool): The tensors it owns are learned (an absolute
            table is then a parameter, else a fixed buffer).
        no_decay (tuple[str]): Its parameters' names (the last part of the
            state-dict key), which the recipes exclude from weight decay.
    """
    name: str = ''
    kind: str = 'absolute'
    learnable: bool = False
    no_decay: Tuple[str, ...] = ()

    # -- an absolute type ------------------------------------------------
    def table(self, num_tables: int, rows: int, grid: Sequence[int], dims: int,
              with_cls_token: bool) -> Optional[Tensor]:
        """The initial PE table ``(num_tables, rows, dims)`` of an absolute
        type (a learnable one is then drawn by the backbone's init); None
        for the other kinds."""
        return None

    # -- per-layer tensors, in each layer's attention ---------------------
    def attach(self, attn: nn.Module, grid: Sequence[int],
               theta: Optional[float]) -> None:
        """Give one layer's attention (``num_heads``, ``head_dims``) the
        tensors this type owns there. Nothing by default."""

    def layer_tensors(self, attn: nn.Module) -> List[Tensor]:
        """The tensors of ``attn`` a plan depends on (its cache key)."""
        return []

    def plan_terms(self, attns: Sequence[nn.Module], hw: Tuple[int, int],
                   grid: Tuple[int, int], num_extra: int) -> Dict[str, list]:
        """What the type contributes to a plan on the patch grid ``hw``
        (the type's own grid: ``grid``): ``{'bias': [raw per-layer bias
        (heads, N, N)]}`` for the join to place, ``{'qk': [map]}`` applied
        as it is, or nothing."""
        return {}


# ----------------------------------------------------------------------
# absolute


@register_pe_type
class Learnable(BasePEType):
    """A learned table, truncated normal (std 0.02, the arch's)."""
    name = 'learnable'
    learnable = True
    no_decay = ('pos_embed', )

    def table(self, num_tables, rows, grid, dims, with_cls_token):
        return torch.zeros(num_tables, rows, dims)


@register_pe_type
class SinCos1D(BasePEType):
    """The Transformer paper's fixed 1D sin-cos, the class token first."""
    name = 'sincos1d'

    def table(self, num_tables, rows, grid, dims, with_cls_token):
        return build_1d_sincos(rows, dims)


@register_pe_type
class SinCos2D(BasePEType):
    """A fixed 2D sin-cos of the patch grid; the class token's row zero."""
    name = 'sincos2d'

    def table(self, num_tables, rows, grid, dims, with_cls_token):
        return build_2d_sincos(grid, dims, with_cls_token)


# ----------------------------------------------------------------------
# relative


def relative_position_index(grid_hw: Sequence[int]) -> Tensor:
    """Index into a ``(2H-1)*(2W-1)`` relative-bias table for every pair.

    Args:
        grid_hw (Sequence[int]): Patch grid ``(H, W)``.

    Returns:
        Tensor: Long tensor of shape ``(H*W, H*W)``.
    """
    h, w = grid_hw
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing='ij')
    coords = torch.stack([ys.flatten(), xs.flatten()])  # 2, N
    rel = coords[:, :, None] - coords[:, None, :]  # 2, N, N
    return (rel[0] + h - 1) * (2 * w - 1) + (rel[1] + w - 1)


@register_pe_type
class Relative(BasePEType):
    """A learned 2D relative bias table per layer, on the patch-patch
    logits, defined for the PE's own grid."""
    name = 'relative'
    kind = 'relative'
    learnable = True
    no_decay = ('relative_position_bias_table', )

    def attach(self, attn, grid, theta):
        h, w = int(grid[0]), int(grid[1])
        attn.rel_pos_grid = (h, w)
        attn.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * h - 1) * (2 * w - 1), attn.num_heads))
        nn.init.trunc_normal_(attn.relative_position_bias_table, std=.02)
        attn.register_buffer(
            'relative_position_index',
            relative_position_index((h, w)),
            persistent=False)

    def layer_tensors(self, attn):
        return [attn.relative_position_bias_table]

    def plan_terms(self, attns, hw, grid, num_extra):
        if tuple(hw) != tuple(grid):
            raise ValueError(
                f'pe_type="relative" is defined for the {tuple(grid)} patch '
                f'grid only; got an input grid of {tuple(hw)}')
        biases = []
        for attn in attns:
            index = attn.relative_position_index
            n = index.shape[0]
            bias = attn.relative_position_bias_table[index.reshape(-1)]
            biases.append(bias.reshape(n, n, -1).permute(2, 0, 1))
        return {'bias': biases}


# ----------------------------------------------------------------------
# rotary


class _Rotary(BasePEType):
    """Each layer rotates its queries and keys by the patches' positions
    (:mod:`.rope`); the class token is not rotated, and another grid needs
    no resize."""
    kind = 'rotary'
    #: One table serves every layer (the frequencies are fixed).
    shared: bool = False
    #: The paper's ``theta`` (``rope_theta=None``).
    theta: float = 0.

    def attach(self, attn, grid, theta):
        attn.rope_type = self.name
        attn.rope_theta = float(self.theta if theta is None else theta)
        rope_magnitudes(attn.head_dims, attn.rope_theta)  # checks dims

    def frequencies(self, attn: nn.Module) -> Tensor:
        """One layer's frequencies ``(2, heads, head_dims / 2)``."""
        raise NotImplementedError

    def tables(self, attn: nn.Module, hw: Sequence[int],
               num_extra: int) -> Tuple[Tensor, Tensor]:
        """One layer's ``cos`` and ``sin`` on the grid ``hw`` (a shared
        table: one head, broadcast)."""
        freqs = self.frequencies(attn)
        return rotary_tables(freqs[:, :1] if self.shared else freqs, hw,
                             num_extra)

    def plan_terms(self, attns, hw, grid, num_extra):
        layers = attns[:1] if self.shared else attns
        maps = [rotary_qk(*self.tables(a, hw, num_extra)) for a in layers]
        return {'qk': maps * (len(attns) // len(maps))}


@register_pe_type
class RopeAxial(_Rotary):
    """RoPE-Axial: fixed frequencies (``theta`` 100), column then row."""
    name = 'rope_axial'
    shared = True
    theta = 100.

    def frequencies(self, attn):
        return axial_freqs(attn.head_dims, attn.num_heads,
                           attn.rope_theta).to(attn.qkv.weight.device)


@register_pe_type
class RopeMixed(_Rotary):
    """RoPE-Mixed: frequencies learned per layer and head
    (``rope_freqs``, ``theta`` 10)."""
    name = 'rope_mixed'
    learnable = True
    theta = 10.
    no_decay = ('rope_freqs', )

    def attach(self, attn, grid, theta):
        super().attach(attn, grid, theta)
        attn.rope_freqs = nn.Parameter(
            torch.zeros(2, attn.num_heads, attn.head_dims // 2))
        init_mixed_freqs(attn.rope_freqs, attn.rope_theta)

    def frequencies(self, attn):
        return attn.rope_freqs

    def layer_tensors(self, attn):
        return [attn.rope_freqs]


#: The rotary types; an absolute PE may sit beside one (``ape_type``).
ROTARY_PE_TYPES: Tuple[str, ...] = pe_type_names('rotary')
#: The types that are a PE table added to tokens.
ABSOLUTE_PE_TYPES: Tuple[str, ...] = pe_type_names('absolute')
assert PE_TYPES == pe_type_names(), 'every PEType has its declaration'
