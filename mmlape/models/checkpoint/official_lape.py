"""The official LaPE code's checkpoints and recorded run, in mmlape's terms.

:data:`OFFICIAL_JOINS` maps each official PE and join to mmlape's options
(docs/methods.md, "Official LaPE checkpoints"); the weights are converted
here for the ViT's path (:mod:`.vit`).

References:
    The official LaPE code (Ingrid725/LaPE): ``main.py`` saves ``{'model',
    'args'}`` (``--pe``, ``--join-type``; the first release's
    ``--pe_joining``); fixed PEs are stored as frozen parameters.
"""
import math
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor

from ..layers.block import relative_position_index
from ..layers.pos_embed import build_1d_sincos, build_2d_sincos

__all__ = [
    'OFFICIAL_PES', 'OFFICIAL_JOINS', 'OfficialRun', 'read_official_run',
    'check_fixed_pe', 'options_text', 'LAPE_REL_NORM', 'LAPE_REL_INDEX',
    'PE_NORM_KEY', 'stack_unshared', 'convert_lape_relative', 'drop_fixed_pe',
    'check_run_weights'
]

#: ``--pe`` -> mmlape's ``pe_type`` (``RPE`` is the first release's name).
OFFICIAL_PES = {
    'learnable': 'learnable',
    '1D_sin': 'sincos1d',
    '2D_sin': 'sincos2d',
    '2D_RPE': 'relative',
    'RPE': 'relative',
}

#: ``(release, PE kind, official join) -> (mmlape join, hierarchical)``;
#: ``hierarchical`` is None where it does not apply (relative PEs).
OFFICIAL_JOINS: Dict[Tuple[str, str, str], Tuple[str, Optional[bool]]] = {
    ('current', 'absolute', 'basic'): ('Default', None),
    ('current', 'absolute', 'share'): ('Share', None),
    ('current', 'absolute', 'unshare'): ('Unshare', None),
    ('current', 'absolute', 'LaPE'): ('LaPE', True),
    ('current', 'relative', 'basic'): ('Default', None),
    ('current', 'relative', 'share'): ('Default', None),
    ('current', 'relative', 'LaPE'): ('Default', None),
    ('current', 'relative', 'LN'): ('LaPE', None),
    ('first', 'absolute', 'default'): ('Default', None),
    ('first', 'absolute', 'LaPE'): ('LaPE', False),
    ('first', 'relative', 'default'): ('Default', None),
    ('first', 'relative', 'LaPE'): ('LaPE', None),
}

#: The ``--pe`` choices of each release's ``main.py``.
_RELEASE_PES = {
    'current': ('learnable', '1D_sin', '2D_sin', '2D_RPE'),
    'first': ('learnable', '1D_sin', '2D_sin', 'RPE'),
}

#: Keys of the official LaPE code's relative-PE blocks.
LAPE_REL_NORM = re.compile(r'^blocks\.(\d+)\.attn\.pe_norm\.(weight|bias)$')
LAPE_REL_INDEX = re.compile(r'^blocks\.(\d+)\.attn\.relative_position_index$')
#: mmlape's PE norms of a ViT's layers (``blocks.{i}.pe_norm.*``).
PE_NORM_KEY = re.compile(r'^blocks\.(\d+)\.pe_norm\.')

# deit_{tiny,small,base}[_distilled]_patch{P}_{S}: the official models.
_MODEL_NAME = re.compile(
    r'^deit_(tiny|small|base)(_distilled)?_patch(\d+)_(\d+)$')


@dataclass(frozen=True)
class OfficialRun:
    """What an official LaPE checkpoint's ``args`` record.

    Attributes:
        release (str): ``'current'`` (``--join-type``) or ``'first'``
            (``--pe_joining``, the September 2023 code).
        pe (str): ``--pe``.
        join (str): ``--join-type`` / ``--pe_joining``.
        model (str, optional): ``--model``.
        input_size (int, optional): ``--input-size``.
    """
    release: str
    pe: str
    join: str
    model: Optional[str] = None
    input_size: Optional[int] = None

    @property
    def option(self) -> str:
        """The command-line name of the join option."""
        return '--join-type' if self.release == 'current' else '--pe_joining'

    def describe(self) -> str:
        """E.g. ``--pe 1D_sin --join-type LaPE`` (with the model)."""
        text = f'--pe {self.pe} {self.option} {self.join}'
        return f'{text} (--model {self.model})' if self.model else text

    def backbone(self) -> Dict[str, Any]:
        """The mmlape backbone options of this run: ``pe_type`` and
        ``pe_join`` (with ``hierarchical`` for an absolute LaPE).

        Raises:
            ValueError: A PE or join the official code does not offer, or a
                combination that has no mmlape counterpart.
        """
        names = _RELEASE_PES[self.release]
        pe_type = OFFICIAL_PES.get(self.pe) if self.pe in names else None
        if pe_type is None:
            raise ValueError(f'the checkpoint\'s args record --pe '
                             f'{self.pe}, which the official LaPE code '
                             f'({self.release} release) does not offer '
                             f'(it offers {list(names)})')
        kind = 'relative' if pe_type == 'relative' else 'absolute'
        found = OFFICIAL_JOINS.get((self.release, kind, self.join))
        if found is None:
            joins = sorted(j for r, k, j in OFFICIAL_JOINS
                           if r == self.release and k == kind)
            raise ValueError(f'the checkpoint\'s args record '
                             f'{self.describe()}: mmlape has no counterpart '
                             f'(with --pe {self.pe} the official code '
                             f'joins {joins})')
        join, hierarchical = found
        pe_join: Dict[str, Any] = dict(type=join)
        if hierarchical is not None:
            pe_join['hierarchical'] = hierarchical
        return dict(pe_type=pe_type, pe_join=pe_join)

    def arch(self) -> Optional[Dict[str, Any]]:
        """mmlape's ``arch``, ``patch_size`` and ``img_size`` of the
        official model, or None for a model name the official code does
        not register."""
        m = _MODEL_NAME.match(self.model or '')
        if m is None:
            return None
        return dict(
            arch=f'deit-{m.group(1)}',
            patch_size=int(m.group(3)),
            img_size=self.input_size or int(m.group(4)))

    def as_meta(self) -> Dict[str, Any]:
        """The run and its mmlape options, for a converted file's ``meta``
        (plain values: a converted file needs no allow-listed class)."""
        return dict(
            release=self.release,
            pe=self.pe,
            join=self.join,
            model=self.model,
            input_size=self.input_size,
            backbone=self.backbone())

    @classmethod
    def from_meta(cls, meta: Mapping) -> 'OfficialRun':
        return cls(meta['release'], meta['pe'], meta['join'],
                   meta.get('model'), meta.get('input_size'))


def _field(args: Any, name: str) -> Any:
    if isinstance(args, Mapping):
        return args.get(name)
    return getattr(args, name, None)


def read_official_run(checkpoint: Any) -> Optional[OfficialRun]:
    """The run an official LaPE checkpoint records (its ``args``, or a
    converted file's ``meta['official_lape']``), or None (also for
    ``args`` without ``pe``, e.g. a plain DeiT run's).

    Args:
        checkpoint: The loaded file.

    Returns:
        OfficialRun | None: The run.
    """
    if not isinstance(checkpoint, Mapping):
        return None
    meta = checkpoint.get('meta')
    if isinstance(meta, Mapping) and isinstance(
            meta.get('official_lape'), Mapping):
        return OfficialRun.from_meta(meta['official_lape'])
    args = checkpoint.get('args')
    pe = _field(args, 'pe')
    if args is None or pe is None:
        return None
    join = _field(args, 'join_type')
    release = 'current'
    if join is None and _field(args, 'pe_joining') is not None:
        join, release = _field(args, 'pe_joining'), 'first'
    if join is None:
        join = 'basic'  # main.py's default
    size = _field(args, 'input_size')
    return OfficialRun(release, str(pe), str(join), _field(args, 'model'),
                       int(size) if isinstance(size, int) else None)


# ----------------------------------------------------------------------
# the stored fixed PE
def _fixed_pe(pe_type: str, rows: int, dims: int) -> Optional[Tensor]:
    """mmlape's fixed PE of ``rows`` rows: the 1D sinusoid (class token at
    position 0), or the 2D one with or without a zero class-token row."""
    if pe_type == 'sincos1d':
        return build_1d_sincos(rows, dims) if dims % 2 == 0 else None
    if dims % 4:
        return None
    for extra in (1, 0):
        side = math.isqrt(max(rows - extra, 0))
        if side * side == rows - extra and side:
            return build_2d_sincos((side, side), dims, bool(extra))
    return None


def _tolerance(rows: int) -> float:
    """Rounding allowed between the official float32 table and mmlape's
    (float64, then rounded): the official code rounds each angle, up to
    ``rows`` radians, to float32 before taking its sine."""
    return max(1e-4, 4 * rows * torch.finfo(torch.float32).eps)


def check_fixed_pe(value: Tensor,
                   pe_type: Optional[str],
                   key: str = 'pos_embed') -> Optional[str]:
    """Whether a stored PE is a fixed sin-cos PE that mmlape rebuilds as a
    buffer (official ``1D_sin``: ``(N + 1, C)``; ``2D_sin``:
    ``(1, N + 1, C)`` with a zero class-token row).

    Args:
        value (Tensor): The stored PE.
        pe_type (str, optional): ``'sincos1d'`` or ``'sincos2d'`` when the
            checkpoint says its PE is fixed (its recorded ``args``); None
            to recognise one by its values (a 2-D PE can only be the
            official ``1D_sin``); another type: a learned PE, kept.
        key (str): The key, for messages. Defaults to ``'pos_embed'``.

    Returns:
        str | None: The ``pe_type`` of the fixed PE, or None for a learned
        one.

    Raises:
        ValueError: A PE that must be fixed but is not mmlape's table; the
            message names the largest difference and where it is.
    """
    if pe_type is not None and pe_type not in ('sincos1d', 'sincos2d'):
        return None
    table = value.detach().float()
    table = table[None] if table.dim() == 2 else table
    if table.dim() != 3 or table.shape[0] != 1:
        if pe_type is None:
            return None
        raise ValueError(f'{key} of shape {tuple(value.shape)} cannot be '
                         f'the fixed PE (pe_type={pe_type!r})')
    rows, dims = table.shape[1:]
    candidates = [pe_type] if pe_type else (
        ['sincos1d'] if value.dim() == 2 else ['sincos1d', 'sincos2d'])
    tol = _tolerance(rows)
    worst = None
    for kind in candidates:
        expected = _fixed_pe(kind, rows, dims)
        if expected is None:
            continue
        diff = (table - expected).abs()
        if float(diff.max()) <= tol:
            return kind
        row, channel = divmod(int(diff.flatten().argmax()), dims)
        if worst is None or float(diff.max()) < worst[1]:
            worst = (kind, float(diff.max()), row, channel)
    if pe_type is None and value.dim() == 3:
        return None  # a learned PE
    if worst is None:
        need = ('an even width' if candidates[0] == 'sincos1d' else
                'a width divisible by 4 and a square grid')
        raise ValueError(
            f'{key} of shape {tuple(value.shape)} has no fixed sin-cos '
            f'counterpart in mmlape (pe_type={candidates[0]!r} needs '
            f'{need})')
    kind, largest, row, channel = worst
    raise ValueError(
        f'{key} is not the fixed PE mmlape builds for pe_type={kind!r}: '
        f'the largest difference is {largest:.3g} (row {row}, channel '
        f'{channel}; tolerance {tol:.1e}), so dropping it would change the '
        f'model')


# ----------------------------------------------------------------------
# the official code's weights in mmlape's names
def stack_unshared(state_dict: Mapping) -> Dict[str, Tensor]:
    """``pos_embed0..pos_embed{L-1}`` (the LaPE code's unshared PE) stacked
    into one ``(L, N', C)`` ``pos_embed``."""
    out, per_layer = OrderedDict(), {}
    for key, value in state_dict.items():
        m = re.match(r'^pos_embed(\d+)$', key)
        if m:
            per_layer[int(m.group(1))] = value
        else:
            out[key] = value
    if per_layer:
        if sorted(per_layer) != list(range(len(per_layer))):
            raise ValueError('Unshared PEs pos_embed0..N are not contiguous:'
                             f' {sorted(per_layer)}')
        out['pos_embed'] = torch.cat(
            [per_layer[i] for i in range(len(per_layer))], dim=0)
    return out


def convert_lape_relative(state_dict: Mapping,
                          notes: List[str]) -> Dict[str, Tensor]:
    """The LaPE code's relative-PE blocks in mmlape's names.

    ``blocks.{i}.attn.pe_norm`` becomes ``blocks.{i}.pe_norm``; a stored
    ``relative_position_index`` is checked against mmlape's and dropped
    (another index would read the table with other offsets: refused).
    """
    out = OrderedDict()
    checked = 0
    for key, value in state_dict.items():
        m = LAPE_REL_NORM.match(key)
        if m:
            out[f'blocks.{m.group(1)}.pe_norm.{m.group(2)}'] = value
            continue
        m = LAPE_REL_INDEX.match(key)
        if m:
            n = value.shape[0]
            side = math.isqrt(n)
            if value.shape != (n, n) or side * side != n or not torch.equal(
                    value.long(), relative_position_index((side, side))):
                raise ValueError(
                    f'{key} of shape {tuple(value.shape)} is not the '
                    f'relative position index of a square patch grid as '
                    f'mmlape computes it; the bias table would be read with '
                    f'other offsets')
            checked += 1
            continue
        out[key] = value
    if checked:
        notes.append(f'checked and dropped {checked} stored '
                     f'relative_position_index buffers (mmlape computes '
                     f'the same index)')
    return out


def drop_fixed_pe(sd: Dict[str, Tensor], pe_type: Optional[str],
                  notes: List[str]) -> None:
    """Check a stored fixed sin-cos PE against mmlape's and drop it (see
    :func:`check_fixed_pe`)."""
    pe = sd.get('pos_embed')
    if pe is None:
        return
    kind = check_fixed_pe(pe, pe_type)
    if kind is None:
        return
    del sd['pos_embed']
    notes.append(f'pos_embed of shape {tuple(pe.shape)} is the fixed '
                 f'{kind} PE: checked against mmlape\'s and dropped (mmlape '
                 f'builds it; load into a model with pe_type={kind!r})')


# ----------------------------------------------------------------------
# the weights of a recorded run
def check_run_weights(run: OfficialRun, options: Mapping,
                      state_dict: Mapping) -> None:
    """The converted weights must be the recorded run's: PE norms exactly
    where its join has them, relative bias tables with the relative PE, a
    stored PE with a learnable one."""
    norms = any(PE_NORM_KEY.match(k) for k in state_dict)
    tables = any(
        k.endswith('attn.relative_position_bias_table') for k in state_dict)
    lape = options['pe_join']['type'] == 'LaPE'
    relative = options['pe_type'] == 'relative'
    problem = None
    if norms != lape:
        problem = ('PE norms (blocks.{i}.pe_norm, blocks.{i}.attn.pe_norm)'
                   if lape else 'no PE norms') + ' are expected, '
        problem += 'none are there' if lape else 'the weights have some'
    elif tables != relative:
        problem = ('relative bias tables are expected, none are there'
                   if relative else 'the weights have relative bias tables')
    elif options['pe_type'] == 'learnable' and 'pos_embed' not in state_dict:
        problem = 'a learnable pos_embed is expected, none is there'
    if problem:
        raise ValueError(f'the checkpoint records the official LaPE run '
                         f'{run.describe()} but its weights are not that '
                         f'model\'s: {problem}')


# ----------------------------------------------------------------------
# the run in mmlape's terms
def options_text(options: Mapping) -> str:
    """``pe_type='...', pe_join=dict(...)`` of :meth:`OfficialRun.backbone`'s
    options."""
    join = ', '.join(f'{k}={v!r}' for k, v in options['pe_join'].items())
    return f'pe_type={options["pe_type"]!r}, pe_join=dict({join})'
