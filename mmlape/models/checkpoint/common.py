"""The checkpoint path every backbone family fills in.

A family (:class:`CheckpointFamily`) reads the backbone part, converts
its layout to mmlape's names, checks it against the join and the recorded
model, fits it in the backbone's ``load_state_dict`` pre-hook and reports
missing, unexpected and new keys.

References:
    timm's ``checkpoint_filter_fn`` (a pure filter beside the model).
"""
import math
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from mmengine.logging import print_log
from torch import Tensor

from mmlape.utils.errors import CheckpointError
from mmlape.utils.safe_load import load_checkpoint
from ..layers.pos_embed import resize_pos_embed
from .recorded import (another_model, model_differences, recorded_backbone,
                       recorded_run_config)

__all__ = [
    'check_pe_norms', 'describe_keys', 'BACKBONE_PREFIX', 'FROM_DEFAULT',
    'JOIN_KEY', 'Layout', 'Converted', 'CheckpointFamily', 'unwrap_state_dict',
    'strip_prefix', 'select_backbone', 'rename_keys', 'table_rules',
    'is_square', 'check_pe_width', 'fit_patch_rows', 'load_and_report'
]

#: The prefix of a backbone's keys in a whole model's state dict (mmengine
#: classifiers, detectors and segmentors all name their backbone so).
BACKBONE_PREFIX = 'backbone.'

#: ``(pattern, replacement)`` pairs for :func:`rename_keys`.
Rules = List[Tuple[str, str]]


@dataclass(frozen=True)
class Layout:
    """How a checkpoint's backbone is laid out.

    Attributes:
        name (str): The layout, e.g. ``'deit-distilled'``, ``'vit-adapter'``
            or ``'official'`` (see each family's ``detect_layout``).
        naming (str): The key naming, one of the family's formats.
        extra_rows (tuple[str]): What each ``pos_embed`` row before the patch
            rows holds, in order (``'cls'``, ``'dist'`` or ``'unused'``).
    """
    name: str
    naming: str
    extra_rows: Tuple[str, ...] = ()

    def describe(self) -> str:
        rows = ', '.join(self.extra_rows) or 'none'
        return f'{self.name} layout ({self.naming} names, extra PE rows: ' \
               f'{rows})'


@dataclass
class Converted:
    """A backbone state dict in mmlape's names and PE layout.

    Attributes:
        state_dict (dict): mmlape backbone keys, no prefix.
        layout (Layout): The layout it came from.
        notes (list[str]): What the conversion dropped or changed.
        head (dict): A bare model's classifier (``weight``, ``bias``);
            empty when the source has none.
        meta (dict): What the source records about the model (e.g. the
            official LaPE run's args).
    """
    state_dict: Dict[str, Tensor]
    layout: Layout
    notes: List[str] = field(default_factory=list)
    head: Dict[str, Tensor] = field(default_factory=dict)
    meta: Dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------
# reading
def unwrap_state_dict(checkpoint: Mapping) -> Dict[str, Tensor]:
    """The state dict inside a checkpoint (``state_dict`` or ``model``),
    without a DDP ``module.`` prefix."""
    sd = checkpoint
    for key in ('state_dict', 'model', 'module'):
        if isinstance(sd, Mapping) and key in sd and isinstance(
                sd[key], Mapping):
            sd = sd[key]
            break
    return OrderedDict(
        (k[len('module.'):] if k.startswith('module.') else k, v)
        for k, v in sd.items())


def strip_prefix(state_dict: Mapping, prefix: str) -> Dict[str, Tensor]:
    """The entries under ``prefix``, with the prefix removed."""
    return OrderedDict((k[len(prefix):], v) for k, v in state_dict.items()
                       if k.startswith(prefix))


def select_backbone(state_dict: Mapping,
                    prefix: Optional[str] = None) -> Dict[str, Tensor]:
    """The backbone part of a state dict.

    Args:
        state_dict (Mapping): A whole model's or a bare backbone's state.
        prefix (str, optional): Keep the keys under this prefix, stripped.
            None takes :data:`BACKBONE_PREFIX` when any key has it and the
            whole dict otherwise (an official DeiT file is a bare backbone
            plus its head). Defaults to None.

    Raises:
        CheckpointError: An explicit ``prefix`` that no key has (a
            ``ValueError``, as every refusal of a checkpoint here).
    """
    if prefix is None:
        if any(k.startswith(BACKBONE_PREFIX) for k in state_dict):
            return strip_prefix(state_dict, BACKBONE_PREFIX)
        return OrderedDict(state_dict)
    selected = strip_prefix(state_dict, prefix)
    if not selected:
        raise CheckpointError(
            f'the checkpoint has no keys under prefix '
            f'"{prefix}" (keys start e.g. with '
            f'{sorted({k.split(".")[0] for k in state_dict})[:5]}'
            f')')
    return selected


# ----------------------------------------------------------------------
# converting and fitting
def rename_keys(state_dict: Mapping,
                rules: Rules,
                source: str,
                dropped: tuple = ()) -> Dict[str, Tensor]:
    """Rename every key by the first of ``rules`` that matches it; keys
    matching a ``dropped`` pattern (rebuilt buffers) are left out.

    Raises:
        CheckpointError: A key no rule matches.
    """
    out = OrderedDict()
    for key, value in state_dict.items():
        if any(re.search(p, key) for p in dropped):
            continue
        for pattern, repl in rules:
            if re.match(pattern, key):
                out[re.sub(pattern, repl, key)] = value
                break
        else:
            raise CheckpointError(f'Cannot convert key "{key}" of {source} '
                                  f'checkpoint: mmlape has no counterpart')
    return out


#: What a slot of a name table matches: ``{i}`` an index, ``{p}`` a
#: weight or bias.
_SLOTS = {'i': r'(\d+)', 'p': r'(weight|bias)'}


def table_rules(table: Sequence[Tuple[str, str]],
                reverse: bool = False) -> Rules:
    """The :func:`rename_keys` rules of a name table: ``(source name,
    mmlape name)`` pairs, each a prefix when it ends in ``.``, else a whole
    key, with slots ``{i}`` and ``{p}`` (see :data:`_SLOTS`). ``reverse``
    gives the rules from mmlape's names to the source's.

    Example:
        >>> rules = table_rules([('layers.{i}.ln1.', 'blocks.{i}.norm1.')])
        >>> list(rename_keys({'layers.3.ln1.bias': 0}, rules, 'a ViT'))
        ['blocks.3.norm1.bias']
    """
    rules = []
    for pair in table:
        src, dst = pair[::-1] if reverse else pair
        slots = re.findall(r'\{(\w)\}', src)
        pattern = re.escape(src)
        for n, slot in enumerate(slots, 1):
            pattern = pattern.replace(re.escape(f'{{{slot}}}'), _SLOTS[slot])
            dst = dst.replace(f'{{{slot}}}', f'\\{n}')
        rules.append(('^' + pattern + ('' if src.endswith('.') else '$'), dst))
    return rules


def is_square(n: int) -> bool:
    return n >= 0 and math.isqrt(n)**2 == n


def check_pe_width(src: Tensor, shape: Tuple[int, ...], key: str) -> None:
    """Refuse a PE that is not ``(P, rows, C)`` with the model's ``C``.

    Raises:
        CheckpointError: Names the key and both shapes.
    """
    if src.dim() != 3 or src.shape[-1] != shape[-1]:
        raise CheckpointError(
            f'Checkpoint does not fit: its {key} has shape '
            f'{tuple(src.shape)} but this model has {tuple(shape)} '
            f'(embed_dims {shape[-1]}). Use a checkpoint of the same width.')


#: Keys of what a join adds to the default join: the per-layer PE norms
#: and MPVG's last-norm PE (``pe_join.last_norm``).
JOIN_KEY = re.compile(r'(^|\.)pe_norm\.|^pe_join\.')

#: The ``init_cfg`` option that starts a join from a default-join file.
FROM_DEFAULT = 'join_from_default'


def check_pe_norms(state_dict: Mapping, owners: Sequence[str],
                   join: str) -> None:
    """Refuse a file whose PE-norm owners (``{owner}.pe_norm.*``) are not
    the model's ``owners`` (another join's file). An MPVG file may
    initialise a PVG model."""
    found = sorted(
        {k.rsplit('.pe_norm.', 1)[0]
         for k in state_dict if '.pe_norm.' in k})
    if found == sorted(owners):
        return
    if not found:
        raise CheckpointError(
            f'Checkpoint does not fit the join: it is a default-join '
            f'checkpoint (no PE norms) but this model (pe_join.type='
            f'{join!r}) has them in {len(owners)} blocks. To fine-tune '
            f'this join from it, set {FROM_DEFAULT}=True in the '
            f'backbone\'s init_cfg (the PE norms start fresh; the papers '
            f'train each join from scratch), or initialise from a '
            f'checkpoint trained with the same join.')
    raise CheckpointError(
        f'Checkpoint does not fit the join: it has PE norms in '
        f'{len(found)} blocks but this model (pe_join.type={join!r}) '
        f'has them in {len(owners)}. Initialise from a checkpoint '
        f'trained with the same join (e.g. a LaPE ImageNet checkpoint '
        f'for a LaPE model, an MPVG one for PVG/MPVG).')


def _span(indices: Sequence[int]) -> str:
    """``3``, or ``{0-2,5}`` for several indices."""
    indices = sorted(set(indices))
    if len(indices) == 1:
        return str(indices[0])
    runs: List[List[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return '{' + ','.join(f'{r[0]}-{r[-1]}' if len(r) > 1 else str(r[0])
                          for r in runs) + '}'


def describe_keys(keys: Sequence[str], limit: int = 12) -> str:
    """Keys in short: the keys that differ only in their first index
    (``blocks.{i}.x``) as one entry, at most ``limit`` entries.

    Example:
        >>> describe_keys(['blocks.0.pe_norm.weight', 'blocks.1.pe_norm.'
        ...                'weight', 'pe_join.last_norm.bias'])
        'blocks.{0-1}.pe_norm.weight, pe_join.last_norm.bias'
    """
    groups: Dict[str, List[int]] = OrderedDict()
    for key in keys:
        found = re.match(r'^(.*?)(?<![^.])(\d+)\.(.*)$', key)
        if found:
            head, index, tail = found.groups()
            groups.setdefault(f'{head}{{}}.{tail}', []).append(int(index))
        else:
            groups.setdefault(key, [])
    parts = []
    for pattern, indices in groups.items():
        if not indices:
            parts.append(pattern)
            continue
        parts.append(pattern.replace('{}', _span(indices)))
    if len(parts) > limit:
        parts = parts[:limit] + [f'and {len(parts) - limit} more']
    return ', '.join(parts)


def fit_patch_rows(src: Tensor, num_extra: int, grid: Tuple[int, int],
                   mode: str, key: str) -> Tuple[Tensor, List[str]]:
    """Resize the square patch grid of ``src`` (after its ``num_extra``
    rows) to ``grid``.

    Returns:
        tuple[Tensor, list[str]]: The PE and a note when it was resized.

    Raises:
        CheckpointError: Patch rows of another count that are not a square
            grid.
    """
    n = src.shape[1] - num_extra
    grid = tuple(grid)
    if n == grid[0] * grid[1]:
        return src, []
    side = math.isqrt(n)
    if side * side != n:
        raise CheckpointError(
            f'Checkpoint does not fit: after its extra rows, {key} has '
            f'{n} patch rows, which is not a square grid; cannot resize '
            f'it to this model\'s {grid[0]}x{grid[1]} grid')
    src = resize_pos_embed(
        src, (side, side), grid, mode=mode, num_extra_tokens=num_extra)
    return src, [
        f'{key}: resized from a {side}x{side} to a {grid[0]}x{grid[1]} '
        f'grid ({mode})'
    ]


# ----------------------------------------------------------------------
# loading
def load_and_report(module: torch.nn.Module,
                    state_dict: Dict[str, Tensor],
                    checkpoint: str,
                    new_key_pattern: Optional[str] = None,
                    family: str = 'backbone',
                    fresh_join: Optional[str] = None) -> None:
    """Load a converted backbone state dict (not strictly), logging the
    missing, unexpected and new (``new_key_pattern``) keys; a shape that
    does not fit is a :class:`~mmlape.utils.errors.CheckpointError` naming
    the file.

    ``fresh_join`` (a join's name) says that the file is a default-join
    one starting that join: one line then lists what loaded and the join's
    keys (:data:`JOIN_KEY`) that start fresh; any other missing key is
    still warned about."""
    try:
        missing, unexpected = module.load_state_dict(state_dict, strict=False)
    except (RuntimeError, ValueError) as err:
        raise CheckpointError(f'Checkpoint "{checkpoint}" does not fit this '
                              f'{type(module).__name__}: {err}') from None
    fresh = [k for k in missing if fresh_join and JOIN_KEY.search(k)]
    new = [
        k for k in missing
        if k not in fresh and new_key_pattern and re.match(new_key_pattern, k)
    ]
    missing = [k for k in missing if k not in new and k not in fresh]
    loaded = [k for k in state_dict if k not in unexpected]
    if fresh_join:
        print_log(
            f'{fresh_join} from the default-join checkpoint "{checkpoint}" '
            f'({FROM_DEFAULT}=True): loaded {len(loaded)} tensors '
            f'({describe_keys(loaded)}); starting fresh: {len(fresh)} '
            f'tensors ({describe_keys(fresh) or "none"})',
            logger='current')
    if new:
        print_log(
            f'{len(new)} tensors of modules that a {family} checkpoint does '
            f'not have are initialised afresh',
            logger='current')
    if missing:
        print_log(
            f'Keys missing from "{checkpoint}" (left as initialised): '
            f'{missing}',
            logger='current',
            level=30)
    if unexpected:
        print_log(
            f'Unexpected keys in "{checkpoint}" (ignored): {unexpected}',
            logger='current',
            level=30)
    print_log(
        f'Loaded {len(loaded)} tensors from "{checkpoint}"', logger='current')


class CheckpointFamily:
    """The checkpoint path of one backbone family.

    A family fills in :meth:`detect`, :meth:`convert`, :meth:`check`,
    :meth:`fit` (and :meth:`read` for files with several state dicts).

    Attributes:
        name (str): The family, in messages (``'ViT'``, ``'Swin'``).
        formats (tuple[str]): The source layouts it reads.
        heads (dict): ``head`` option -> where a bare model's classifier
            goes in a whole mmlape checkpoint (None: dropped).
        default_head (str): The ``head`` option of mmlape's configs.
    """
    name: str = 'backbone'
    formats: Tuple[str, ...] = ()
    heads: Dict[str, Optional[str]] = {'none': None}
    default_head: str = 'none'

    # -- what a family fills in -------------------------------------------
    def detect(self, state_dict: Mapping) -> Optional[str]:
        """The format (one of :attr:`formats`) of a whole or a bare
        backbone state dict; None or a ValueError when it has none."""
        raise NotImplementedError

    def convert(self,
                state_dict: Mapping,
                fmt: Optional[str] = None) -> Converted:
        """Backbone keys (no prefix) of format ``fmt`` (detected when None)
        in mmlape's names and PE layout, with a bare model's classifier in
        :attr:`Converted.head`.

        Raises:
            ValueError: An unknown format or a key with no counterpart.
        """
        raise NotImplementedError

    def check(self, state_dict: Mapping, spec: Any) -> None:
        """Refuse converted backbone keys of another PE join than the
        backbone ``spec`` describes (a ValueError naming both)."""
        raise NotImplementedError

    def check_architecture(self, state_dict: Mapping, spec: Any) -> None:
        """Refuse converted backbone keys of another architecture than
        ``spec`` describes (a ValueError naming the setting to change);
        nothing is checked by default."""

    def fit(self, state_dict: Dict[str, Tensor], prefix: str,
            spec: Any) -> List[str]:
        """Fit the keys under ``prefix`` to the backbone ``spec`` describes,
        in place (the backbone's ``load_state_dict`` pre-hook).

        Returns:
            list[str]: Notes on what changed.
        """
        raise NotImplementedError

    def convert_file(self,
                     checkpoint: Mapping,
                     state_dict: Mapping,
                     fmt: Optional[str] = None) -> Converted:
        """:meth:`convert` of the file's backbone keys; a family whose files
        record the model (official LaPE ``args``) puts it in ``meta``."""
        return self.convert(state_dict, fmt)

    def check_model(self, converted: Converted,
                    module: torch.nn.Module) -> None:
        """Refuse a file whose recorded model (:attr:`Converted.meta`) is
        another than ``module`` (a ValueError naming each difference)."""
        recorded = recorded_backbone(dict(meta=converted.meta))
        wrong = model_differences(recorded[1], module) if recorded else []
        if wrong:
            raise CheckpointError(
                'it ' + another_model(wrong, recorded[0], 'backbone'))

    def read(self, checkpoint: Mapping, **options) -> Dict[str, Tensor]:
        """The state dict a loaded file holds (see
        :func:`unwrap_state_dict`)."""
        return unwrap_state_dict(checkpoint)

    def backbone_state(self, checkpoint: Mapping,
                       prefix: Optional[str]) -> Dict[str, Tensor]:
        """The backbone keys (no prefix) of a loaded file (see
        :func:`select_backbone`)."""
        return select_backbone(self.read(checkpoint), prefix)

    # -- the same for every family ------------------------------------------
    def check_format(self, fmt: Optional[str]) -> Optional[str]:
        """``fmt`` when it is None or one of :attr:`formats`."""
        if fmt is not None and fmt not in self.formats:
            raise ValueError(f'Unknown {self.name} checkpoint format '
                             f'{fmt!r}; choose one of {list(self.formats)}')
        return fmt

    def convert_backbone(self,
                         state_dict: Mapping,
                         fmt: Optional[str] = None) -> Dict[str, Tensor]:
        """The backbone keys of a whole or bare state dict of format
        ``fmt`` (detected when None) in mmlape's names, no prefix."""
        fmt = fmt or self.detect(state_dict)
        return self.convert(select_backbone(state_dict), fmt).state_dict

    def convert_checkpoint(self,
                           checkpoint: Mapping,
                           fmt: Optional[str] = None,
                           head: Optional[str] = None,
                           backbone: Any = None,
                           **options) -> Dict:
        """A whole checkpoint to an mmlape (mmengine-style) one.

        The config an mmlape run recorded (``meta['cfg']``, see
        :func:`~.recorded.recorded_run_config`) is kept: the weights cannot
        show the join (``Default`` and ``Share`` have the same keys), so
        the converted file is checked against a config as the source is.

        Args:
            checkpoint (Mapping): The loaded file, of any layout the family
                reads.
            fmt (str, optional): The source format; detected when None.
            head (str, optional): Where a bare model's classifier goes (a
                key of :attr:`heads`); an OpenMMLab model's other parts are
                kept. Defaults to :attr:`default_head`.
            backbone (optional): A config's backbone (a config dict or the
                built module): a file whose recorded model is another is
                refused. Defaults to None.
            **options: For :meth:`read` (e.g. ``use_ema``).

        Returns:
            dict: ``{'state_dict': {'backbone.*': ..., ...}, 'meta':
            {'converted_from': fmt, 'layout': name, 'notes': [...]}}``,
            ``meta['cfg']`` kept from an mmlape run's file.

        Raises:
            CheckpointError: The recorded model is not ``backbone`` (one
                line naming each difference with both values).
        """
        head = self.default_head if head is None else head
        if head not in self.heads:
            raise ValueError(f'head={head!r}; choose one of '
                             f'{list(self.heads)}')
        sd = self.read(checkpoint, **options)
        fmt = fmt or self.detect(sd)
        prefixed = any(k.startswith(BACKBONE_PREFIX) for k in sd)
        conv = self.convert_file(checkpoint, select_backbone(sd), fmt)
        out = OrderedDict(
            (BACKBONE_PREFIX + k, v) for k, v in conv.state_dict.items())
        if prefixed:
            out.update((k, v) for k, v in sd.items()
                       if not k.startswith(BACKBONE_PREFIX))
        elif self.heads[head] and conv.head:
            out.update((self.heads[head] + k, v) for k, v in conv.head.items())
            moved = ', '.join(f'head.{k} -> {self.heads[head]}{k}'
                              for k in conv.head)
            conv.notes.append(f'the classifier went to the model\'s head '
                              f'(head={head!r}): {moved}')
        meta = dict(
            converted_from=fmt,
            layout=conv.layout.name,
            notes=conv.notes,
            **conv.meta)
        recorded_cfg = recorded_run_config(checkpoint)
        if recorded_cfg is not None:
            meta['cfg'] = recorded_cfg
        converted = dict(state_dict=out, meta=meta)
        recorded = recorded_backbone(converted)
        wrong = model_differences(recorded[1], backbone) \
            if recorded and backbone is not None else []
        if wrong:
            raise CheckpointError('the checkpoint ' +
                                  another_model(wrong, recorded[0]))
        return converted

    def load(self,
             module: torch.nn.Module,
             checkpoint: str,
             prefix: Optional[str],
             spec: Any,
             new_key_pattern: Optional[str] = None,
             join_from_default: bool = False) -> None:
        """Read, convert, check and load a checkpoint into a backbone.

        The file, local or by URL, is read by
        :func:`~mmlape.utils.safe_load.load_checkpoint`; the backbone's
        pre-hook fits the keys (:meth:`fit`).

        Args:
            module (nn.Module): The backbone.
            checkpoint (str): Path or URL of the checkpoint.
            prefix (str, optional): See :func:`select_backbone`.
            spec: The backbone's ``checkpoint_spec()``.
            new_key_pattern (str, optional): Keys the family's checkpoints
                cannot have, summarised instead of listed as missing.
                Defaults to None.
            join_from_default (bool): The file is a default-join one (no
                PE norms) and starts ``module``'s join: its PE norms (and
                MPVG's last-norm PE) start fresh, listed in one line.
                Defaults to False.

        Raises:
            CheckpointError: No keys under ``prefix``, a layout the family
                does not read, another join or architecture, or a
                checkpoint that does not fit (the message says why). An
                input error, so the tools end with its one line wherever
                it surfaces (``init_cfg`` loads inside ``runner.train()``).
        """
        ckpt = load_checkpoint(checkpoint, 'cpu')
        join = getattr(spec, 'join', 'Default')
        try:
            conv = self.convert_file(ckpt, self.backbone_state(ckpt, prefix))
            self.check_architecture(conv.state_dict, spec)
            if join_from_default:
                own = [k for k in conv.state_dict if JOIN_KEY.search(k)]
                if own:
                    raise CheckpointError(
                        f'{FROM_DEFAULT}=True starts a join from a '
                        f'default-join checkpoint, but this one has the '
                        f'keys of a join ({describe_keys(own)}); drop '
                        f'{FROM_DEFAULT} to load them')
            else:
                self.check(conv.state_dict, spec)
            self.check_model(conv, module)
        except ValueError as err:
            raise CheckpointError(
                f'Checkpoint "{checkpoint}": {err}') from None
        print_log(
            f'"{checkpoint}" is a {conv.layout.describe()}', logger='current')
        for note in conv.notes:
            print_log(note, logger='current')
        load_and_report(
            module,
            conv.state_dict,
            checkpoint,
            new_key_pattern,
            self.name,
            fresh_join=join if join_from_default else None)
