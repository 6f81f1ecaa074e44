"""The model a checkpoint records, against the config of a run.

mmengine saves a run's config text in a checkpoint (``meta['cfg']``).
:func:`recorded_model` reads its ``model`` without running the text;
:func:`backbone_differences` compares the recorded backbone with this run's:
the type, then the options its class declares in ``STRUCTURAL_OPTIONS``
(those that change the parameter layout or what the model computes), each
filled in as the class fills it in: the argument, else the arch's setting,
else the class's default.
"""
import ast
import inspect
import os
from typing import Any, Dict, List, Optional, Tuple

import torch
from mmengine.config import Config
from mmengine.logging import print_log

from mmlape.models.checkpoint import unwrap_state_dict
from mmlape.models.checkpoint.official_lape import (OfficialRun,
                                                    backbone_contradictions,
                                                    backbone_options,
                                                    contradiction_message)
from mmlape.models.layers.parts import init_defaults
from mmlape.models.layers.pe_join import BasePEJoin
from mmlape.registry import FFNS, MODELS, PE_JOINS, POOLINGS, TOKENIZERS
from mmlape.utils.errors import CheckpointError
from mmlape.utils.safe_load import safe_torch_load

__all__ = [
    'COMPARED_FIELDS', 'backbone_differences', 'check_checkpoint_fits',
    'note_finetune_sources', 'recorded_model'
]

#: Compared for a backbone class that declares no ``STRUCTURAL_OPTIONS``
#: (``type`` is always compared first).
COMPARED_FIELDS = ('type', 'arch', 'img_size', 'pe_type', 'with_cls_token',
                   'pe_join')
#: The pluggable parts: their registry and the type that None stands for.
_PARTS = dict(
    pe_join=(PE_JOINS, 'Default'),
    tokenizer=(TOKENIZERS, 'Patch'),
    ffn=(FFNS, 'MLP'),
    pooling=(POOLINGS, None))
_ADVICE = ('Use a checkpoint saved with this config (to initialise from '
           'another model, use --cfg-options load_from=... or the backbone '
           'init_cfg instead).')


class _Opaque(str):
    """A config value that is not a literal: its source text."""

    def __repr__(self) -> str:
        return str(self)


def _literal(node: ast.AST) -> Any:
    """``node``'s value where it is a literal or ``dict(...)`` (containers
    evaluated item by item), else its source text; nothing is run."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == 'dict' and not node.args
            and all(kw.arg for kw in node.keywords)):
        return {kw.arg: _literal(kw.value) for kw in node.keywords}
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {
            _literal(k): _literal(v)
            for k, v in zip(node.keys, node.values)
        }
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _Opaque(ast.unparse(node))


def recorded_model(meta_cfg: Any) -> Optional[dict]:
    """The ``model`` dict of the config text a checkpoint records
    (``meta['cfg']``), or None. Only literals, lists, tuples and
    ``dict(...)`` are evaluated; any other expression stays as its text.

    Example:
        >>> recorded_model("model = dict(backbone=dict(type='LaPEViT'))")
        {'backbone': {'type': 'LaPEViT'}}
    """
    try:
        tree = ast.parse(meta_cfg) if isinstance(meta_cfg, str) else None
    except (SyntaxError, ValueError):
        tree = None
    for node in tree.body if tree else []:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == 'model'):
            model = _literal(node.value)
            return model if isinstance(model, dict) else None
    return None


def _part_cfg(kind: str, cfg: Any) -> Any:
    """A part's config with its type's registered name and every option's
    value (defaults filled in; a join's context arguments left out)."""
    registry, none_type = _PARTS[kind]
    cfg = dict(cfg) if isinstance(cfg, dict) else dict(
        type=none_type if cfg is None else cfg)
    lookup = {k.lower(): (k, v) for k, v in registry.module_dict.items()}
    name, cls = lookup.get(str(cfg.get('type')).lower(), (None, None))
    if cls is None:
        return cfg
    context = inspect.signature(BasePEJoin.__init__).parameters
    out = dict(type=name)
    for key, value in init_defaults(cls).items():
        if kind != 'pe_join' or key not in context:
            out[key] = cfg.get(key, value)
    return dict(out, **{k: v for k, v in cfg.items() if k not in out})


def _tuples(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _describe(cls: Optional[type], backbone: dict,
              options: Tuple[str, ...]) -> Dict[str, tuple]:
    """``option -> (value to show, value to compare)``, each value as the
    class fills it in (``structural_config``)."""
    resolve = getattr(cls, 'structural_config', None)
    given = resolve(backbone) if resolve else backbone
    settings = cls.arch_settings_of(given.get('arch')) if resolve else {}
    out = {}
    for name in (n for n in options if n in given):
        value = compare = given[name]
        if name == 'arch':
            compare = {k: v for k, v in settings.items() if k not in options}
        elif name == 'img_size' and isinstance(value, int):
            compare = (value, value)
        elif name in _PARTS:
            compare = _part_cfg(name, value)
            value = compare if name == 'pe_join' else value
        out[name] = (value, _tuples(compare))
    return out


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return 'dict(' + ', '.join(f'{k}={_show(v)}'
                                   for k, v in value.items()) + ')'
    return repr(value)


def backbone_differences(recorded: dict,
                         current: dict) -> List[Tuple[str, str, str]]:
    """The options in which two backbone configs differ, as
    ``(option, recorded value, current value)`` texts: the type alone if it
    differs, else those of the class's ``STRUCTURAL_OPTIONS``
    (:data:`COMPARED_FIELDS` for a class that declares none), defaults
    filled in from the class.

    Example:
        >>> backbone_differences(
        ...     dict(type='LaPEViT', pe_join=dict(type='Default')),
        ...     dict(type='LaPEViT', pe_join=dict(type='Share')))
        [('pe_join', "dict(type='Default')", "dict(type='Share')")]
    """
    types = [
        str(b.get('type', '')).split('.')[-1] for b in (recorded, current)
    ]
    if types[0] != types[1]:
        return [('type', repr(types[0]), repr(types[1]))]
    try:
        cls = MODELS.get(types[0])
    except KeyError:
        cls = None
    options = tuple(getattr(cls, 'STRUCTURAL_OPTIONS', COMPARED_FIELDS[1:]))
    theirs, ours = (_describe(cls, b, options) for b in (recorded, current))
    return [
        (name, _show(theirs[name][0]), _show(ours[name][0]))
        for name in options
        if name in theirs and name in ours and theirs[name][1] != ours[name][1]
    ]


def _backbone(model: Any) -> Optional[dict]:
    backbone = model.get('backbone') if isinstance(model, dict) else None
    return backbone if isinstance(backbone, dict) else None


def _recorded_backbone(ckpt: Any) -> Optional[dict]:
    meta = ckpt.get('meta') if isinstance(ckpt, dict) else None
    return _backbone(
        recorded_model(meta.get('cfg')) if isinstance(meta, dict) else None)


def check_checkpoint_fits(model: torch.nn.Module,
                          filename: str,
                          purpose: str,
                          cfg: Optional[Config] = None) -> dict:
    """Refuse a checkpoint of another model than ``model``.

    With ``cfg`` and a checkpoint that records its config, the backbones
    must not differ (:func:`backbone_differences`); then the weights must
    match ``model``'s keys and shapes exactly.

    Args:
        model (nn.Module): The built model.
        filename (str): The checkpoint.
        purpose (str): What it is for, to start the message (``'--resume'``).
        cfg (Config, optional): The run's config. Defaults to None.

    Returns:
        dict: The checkpoint's state dict (read safely).

    Raises:
        CheckpointError: The file cannot be read, or is another model's: one
            line naming each differing option with both values, or the
            missing, unexpected and mismatched keys.
    """
    if not os.path.isfile(filename):
        raise CheckpointError(
            f'{purpose}: checkpoint "{filename}" does not exist')
    try:
        ckpt = safe_torch_load(filename, 'cpu')
    except CheckpointError as err:
        raise type(err)(f'{purpose}: {err}') from None
    recorded = _recorded_backbone(ckpt)
    backbone = _backbone(cfg.get('model')) if cfg is not None else None
    if recorded is not None and backbone is not None:
        parts = '; '.join(f'model.backbone.{field} is {theirs} there but '
                          f'{ours} in this config'
                          for field, theirs, ours in backbone_differences(
                              recorded, backbone))
        if parts:
            raise CheckpointError(f'{purpose}: "{filename}" was saved from '
                                  f'another model: {parts}. {_ADVICE}')
    _check_official_run(model, ckpt, filename, purpose)
    state = unwrap_state_dict(ckpt)
    own = getattr(model, 'module', model).state_dict()
    problems = {
        'missing': [k for k in own if k not in state],
        'unexpected': [k for k in state if k not in own],
        'shape mismatch': [
            f'{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}'
            for k in own
            if k in state and tuple(state[k].shape) != tuple(own[k].shape)
        ]
    }
    parts = '; '.join(f'{len(keys)} {label} (e.g. {keys[:3]})'
                      for label, keys in problems.items() if keys)
    if parts:
        raise CheckpointError(f'{purpose}: "{filename}" is a checkpoint of '
                              f'another model: {parts}. {_ADVICE}')
    return state


def _check_official_run(model: torch.nn.Module, ckpt: Any, filename: str,
                        purpose: str) -> None:
    """A file converted from an official LaPE checkpoint records the run
    (``meta['official_lape']``): the model's backbone must be that run's
    (PE type, join, ``hierarchical``), which the keys alone cannot tell."""
    meta = ckpt.get('meta') if isinstance(ckpt, dict) else None
    run = meta.get('official_lape') if isinstance(meta, dict) else None
    backbone = getattr(getattr(model, 'module', model), 'backbone', None)
    options = backbone_options(backbone)
    if not isinstance(run, dict) or options is None:
        return
    run = OfficialRun.from_meta(run)
    wrong = backbone_contradictions(run, options)
    if wrong:
        raise CheckpointError(f'{purpose}: "{filename}": ' +
                              contradiction_message(run, wrong, 'config'))


def note_finetune_sources(cfg: Config) -> None:
    """Log a note for each weight source saved from another backbone:
    ``load_from``, and a backbone ``init_cfg=dict(type='Pretrained',
    prefix='backbone.')``.

    Fine-tuning may start from another model (an MPVG checkpoint initialises
    a PVG ViT-Adapter), so this is not refused. Only the file's ``meta`` is
    read (tensors are memory-mapped).

    Raises:
        CheckpointError: A source cannot be read; names where it is set.
    """
    backbone = _backbone(cfg.get('model')) or {}
    init = backbone.get('init_cfg')
    sources = [
        ('load_from', cfg.load_from)
    ] if (cfg.get('load_from') and not cfg.get('resume') and backbone) else []
    if (isinstance(init, dict) and init.get('type') == 'Pretrained'
            and init.get('checkpoint')
            and init.get('prefix') in ('backbone.', 'backbone')):
        sources.append(('model.backbone.init_cfg', init['checkpoint']))
    for where, filename in sources:
        if '://' in str(filename):
            continue
        try:
            ckpt = safe_torch_load(filename, 'cpu', mmap=True)
        except CheckpointError as err:
            raise type(err)(f'{where}: {err}') from None
        recorded = _recorded_backbone(ckpt)
        text = '; '.join(
            f'{field} {theirs} there, {ours} here' for field, theirs, ours in (
                backbone_differences(recorded, backbone) if recorded else []))
        if text:
            print_log(
                f'{where}: "{filename}" was saved from another backbone '
                f'({text}); its weights initialise this one for fine-tuning '
                f'(keys that do not fit are logged as it loads)',
                logger='current')
