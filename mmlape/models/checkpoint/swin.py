"""Swin checkpoint layouts, their conversion to mmlape, and the fit.

mmlape's Swin keeps the official layout with ``pos_embed`` and an output
norm ``norm{s}`` per output stage; mmpretrain's (also mmdet's and mmseg's)
merging weights are permuted to the official channel order.

References:
    microsoft/Swin-Transformer; mmpretrain's ``SwinTransformer``.
"""
import math
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from torch import Tensor

from .common import (CheckpointFamily, Converted, Layout, Rules,
                     check_pe_norms, check_pe_width, fit_patch_rows,
                     rename_keys, select_backbone)

__all__ = [
    'SWIN', 'SWIN_FORMATS', 'SwinSpec', 'detect_swin_format',
    'convert_official_swin', 'convert_mmpretrain_swin',
    'convert_swin_backbone', 'convert_swin_checkpoint'
]

SWIN_FORMATS = ('mmlape', 'official', 'mmpretrain')

_SWIN_DROPPED = (r'\.relative_position_index$', r'\.attn_mask$')
_SWIN_OFFICIAL_RULES: Rules = [
    (r'^patch_embed\.(proj|norm)\.', r'patch_embed.\1.'),
    (r'^absolute_pos_embed$', 'pos_embed'),
    (r'^layers\.(\d+)\.blocks\.(\d+)\.(norm1|norm2|attn\.qkv|attn\.proj|'
     r'mlp\.fc1|mlp\.fc2)\.', r'layers.\1.blocks.\2.\3.'),
    (r'^layers\.(\d+)\.blocks\.(\d+)\.attn\.relative_position_bias_table$',
     r'layers.\1.blocks.\2.attn.relative_position_bias_table'),
    (r'^layers\.(\d+)\.downsample\.(norm|reduction)\.',
     r'layers.\1.downsample.\2.'),
]
_SWIN_MMPRETRAIN_RULES: Rules = [
    (r'^patch_embed\.projection\.', 'patch_embed.proj.'),
    (r'^patch_embed\.norm\.', 'patch_embed.norm.'),
    (r'^absolute_pos_embed$', 'pos_embed'),
    (r'^stages\.(\d+)\.blocks\.(\d+)\.(norm1|norm2)\.',
     r'layers.\1.blocks.\2.\3.'),
    (r'^stages\.(\d+)\.blocks\.(\d+)\.attn\.w_msa\.(qkv|proj)\.',
     r'layers.\1.blocks.\2.attn.\3.'),
    (r'^stages\.(\d+)\.blocks\.(\d+)\.attn\.w_msa\.'
     r'relative_position_bias_table$',
     r'layers.\1.blocks.\2.attn.relative_position_bias_table'),
    (r'^stages\.(\d+)\.blocks\.(\d+)\.ffn\.layers\.0\.0\.',
     r'layers.\1.blocks.\2.mlp.fc1.'),
    (r'^stages\.(\d+)\.blocks\.(\d+)\.ffn\.layers\.1\.',
     r'layers.\1.blocks.\2.mlp.fc2.'),
    (r'^stages\.(\d+)\.downsample\.(norm|reduction)\.',
     r'layers.\1.downsample.\2.'),
    (r'^(norm\d+)\.', r'\1.'),
]


def detect_swin_format(state_dict: Mapping) -> str:
    """Which layout a Swin state dict uses.

    Args:
        state_dict (Mapping): A (possibly ``backbone.``-prefixed) state dict.

    Returns:
        str: ``'mmlape'``, ``'official'`` or ``'mmpretrain'``.

    Raises:
        ValueError: If the keys look like no known Swin.
    """
    keys = list(select_backbone(state_dict))
    if any(k.startswith('stages.') and '.attn.w_msa.' in k for k in keys):
        return 'mmpretrain'
    if any(k.startswith('layers.') and '.blocks.' in k for k in keys):
        own = any(
            k == 'pos_embed' or '.pe_norm.' in k or re.match(r'^norm\d+\.', k)
            for k in keys)
        return 'mmlape' if own else 'official'
    raise ValueError('Not a Swin checkpoint mmlape knows: expected keys like '
                     '"layers.0.blocks.0.norm1.weight" (official/mmlape) or '
                     '"stages.0.blocks.0.attn.w_msa.qkv.weight" (mmpretrain);'
                     f' got e.g. {list(state_dict)[:5]}')


def _unfold_to_official(tensor: Tensor) -> Tensor:
    """Permute the ``4C`` last axis from ``nn.Unfold``'s order (channel
    major; neighbours (0,0), (0,1), (1,0), (1,1)) to the official one
    (neighbour major; (0,0), (1,0), (0,1), (1,1))."""
    *lead, four_c = tensor.shape
    grouped = tensor.reshape(*lead, four_c // 4, 4)[..., [0, 2, 1, 3]]
    return grouped.transpose(-1, -2).reshape(*lead, four_c)


def convert_official_swin(state_dict: Mapping) -> Dict[str, Tensor]:
    """Official Swin backbone keys to mmlape's.

    The index and mask buffers are dropped, ``absolute_pos_embed`` becomes
    ``pos_embed`` and the final ``norm`` becomes ``norm{last stage}``; the
    classifier (``head.*``) is left out (see :func:`convert_swin_checkpoint`).
    """
    sd = OrderedDict(
        (k, v) for k, v in state_dict.items() if not k.startswith('head.'))
    stages = [
        int(m.group(1)) for m in (re.match(r'^layers\.(\d+)\.', k) for k in sd)
        if m
    ]
    last = max(stages, default=0)
    rules = _SWIN_OFFICIAL_RULES + [(r'^norm\.', f'norm{last}.')]
    return rename_keys(sd, rules, 'an official Swin', _SWIN_DROPPED)


def convert_mmpretrain_swin(state_dict: Mapping) -> Dict[str, Tensor]:
    """mmpretrain ``SwinTransformer`` backbone keys to mmlape's, with the
    patch-merging norm and reduction permuted to the official order. A
    file of mmpretrain's first layout (version 1: a final ``norm``, stored
    ``attn_mask`` buffers) converts as upstream loads it: ``norm`` becomes
    ``norm{last stage}``, the masks are dropped."""
    stages = [
        int(m.group(1))
        for m in (re.match(r'^stages\.(\d+)\.', k) for k in state_dict) if m
    ]
    rules = _SWIN_MMPRETRAIN_RULES + [
        (r'^norm\.', f'norm{max(stages, default=0)}.')
    ]
    out = rename_keys(state_dict, rules, 'an mmpretrain Swin', _SWIN_DROPPED)
    for key in out:
        if '.downsample.' in key:
            out[key] = _unfold_to_official(out[key])
    return out


_SWIN_CONVERTERS = {
    'mmlape': lambda sd: OrderedDict(sd),
    'official': convert_official_swin,
    'mmpretrain': convert_mmpretrain_swin,
}


# ----------------------------------------------------------------------
# fitting a Swin checkpoint to one LaPESwin
@dataclass(frozen=True)
class SwinSpec:
    """What one :class:`~mmlape.models.backbones.LaPESwin` expects of a
    checkpoint.

    Attributes:
        pos_embed_shape (tuple[int, int, int], optional): ``(1, N, C)`` of
            the absolute PE; None without one (the official Swin-T).
        grid_size (tuple[int, int]): The PE's patch grid.
        window_size (int): Window side; the relative-bias tables have
            ``(2 * window_size - 1) ** 2`` rows.
        interpolate_mode (str): How the PE is resized to another grid.
        join (str): The PE join's name, for messages.
        pe_norm_blocks (tuple[str]): Blocks (``layers.{s}.blocks.{j}``)
            that own a PE norm.
    """
    pos_embed_shape: Optional[Tuple[int, int, int]]
    grid_size: Tuple[int, int]
    window_size: int
    interpolate_mode: str = 'bicubic'
    join: str = 'Default'
    pe_norm_blocks: Tuple[str, ...] = ()


# ----------------------------------------------------------------------
# the Swin path
class SwinCheckpoints(CheckpointFamily):
    """The checkpoint path of :class:`~mmlape.models.backbones.LaPESwin`."""
    name = 'Swin'
    formats = SWIN_FORMATS
    heads = {'linear': 'head.fc.', 'none': None}
    default_head = 'linear'

    def detect(self, state_dict: Mapping) -> str:
        return detect_swin_format(state_dict)

    def convert(self,
                state_dict: Mapping,
                fmt: Optional[str] = None) -> Converted:
        fmt = self.check_format(fmt) or detect_swin_format(state_dict)
        head = OrderedDict()
        if fmt == 'official':  # its classifier
            head = OrderedDict((suffix, state_dict['head.' + suffix])
                               for suffix in ('weight', 'bias')
                               if 'head.' + suffix in state_dict)
        return Converted(
            _SWIN_CONVERTERS[fmt](state_dict), Layout(fmt, fmt), head=head)

    def check(self, state_dict: Mapping, spec: SwinSpec) -> None:
        """The blocks that own a PE norm must be the model's."""
        check_pe_norms(state_dict, spec.pe_norm_blocks, spec.join)

    def fit(self, state_dict: Dict[str, Tensor], prefix: str,
            spec: SwinSpec) -> List[str]:
        """The absolute PE (no extra rows) is resized to this grid; another
        width, a PE that is not a square grid, or relative-bias tables of
        another window size are refused."""
        notes: List[str] = []
        key = prefix + 'pos_embed'
        dst = spec.pos_embed_shape
        if key in state_dict and dst is not None:
            check_pe_width(state_dict[key], dst, key)
            state_dict[key], notes = fit_patch_rows(state_dict[key], 0,
                                                    spec.grid_size,
                                                    spec.interpolate_mode, key)
        rows = (2 * spec.window_size - 1)**2
        for k, v in state_dict.items():
            if (k.startswith(prefix)
                    and k.endswith('relative_position_bias_table')
                    and v.shape[0] != rows):
                raise ValueError(
                    f'Checkpoint does not fit: {k} has {v.shape[0]} rows, a '
                    f'window of {math.isqrt(v.shape[0]) // 2 + 1}; this '
                    f'model has window_size={spec.window_size} ({rows} '
                    f'rows)')
        return notes


#: The Swin checkpoint path.
SWIN = SwinCheckpoints()
#: Backbone keys of any layout the path reads, in mmlape's names
#: (see :meth:`~.common.CheckpointFamily.convert_backbone`).
convert_swin_backbone = SWIN.convert_backbone

#: A whole Swin checkpoint to an mmlape one (an official ``head.*`` goes to
#: ``head.fc`` with ``head='linear'``).
convert_swin_checkpoint = SWIN.convert_checkpoint
