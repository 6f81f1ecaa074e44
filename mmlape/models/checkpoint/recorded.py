"""The model a checkpoint records, against the model it goes into.

The weights cannot show the backbone type, ``pe_type`` or join
(``Default`` and ``Share`` have the same keys); :func:`model_differences`
compares these, read from ``meta['cfg']`` or an official LaPE run's
``args``, and :func:`another_model` says the differences in one line.
"""
import ast
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch.nn as nn

from mmlape.registry import MODELS
from ..layers.parts import init_defaults
from ..layers.pe_join import resolve_pe_join
from ..layers.pe_join_base import CONTEXT_ARGS, BasePEJoin
from .official_lape import OfficialRun, options_text

__all__ = [
    'COMPARED_FIELDS', 'another_model', 'model_differences',
    'recorded_backbone', 'recorded_model', 'recorded_run_config',
    'recorded_setting'
]

#: What the weights cannot show, compared in this order.
COMPARED_FIELDS = ('type', 'pe_type', 'ape_type', 'pe_join')


class _Text(str):
    """A config value that is not a literal: its source text."""

    def __repr__(self) -> str:
        return str(self)


def _literal(node: ast.AST) -> Any:
    """``node``'s value where it is a literal or ``dict(...)`` (mmengine
    writes a dict whose keys are no names as ``dict({...})``), else its
    source text; nothing is run."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == 'dict' and len(node.args) <= 1
            and all(kw.arg for kw in node.keywords)):
        first = _literal(node.args[0]) if node.args else {}
        if isinstance(first, dict):
            return dict(first,
                        **{kw.arg: _literal(kw.value)
                           for kw in node.keywords})
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
        return _Text(ast.unparse(node))


def recorded_setting(meta_cfg: Any, name: str) -> Any:
    """The top-level entry ``name`` of a recorded config text
    (``meta['cfg']``), or None. Literals, containers and ``dict(...)`` are
    evaluated; any other expression stays as its text; nothing is run.

    Example:
        >>> recorded_setting("optim_wrapper = dict(optimizer=dict("
        ...                  "type='SGD', lr=0.1))", 'optim_wrapper')
        {'optimizer': {'type': 'SGD', 'lr': 0.1}}
    """
    try:
        tree = ast.parse(meta_cfg) if isinstance(meta_cfg, str) else None
    except (SyntaxError, ValueError):
        tree = None
    for node in tree.body if tree else []:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], 'id', None) == name):
            return _literal(node.value)
    return None


def recorded_model(meta_cfg: Any) -> Optional[dict]:
    """The ``model`` dict of a recorded config text (``meta['cfg']``), or
    None (see :func:`recorded_setting`).

    Example:
        >>> recorded_model("model = dict(backbone=dict(type='LaPEViT'))")
        {'backbone': {'type': 'LaPEViT'}}
    """
    model = recorded_setting(meta_cfg, 'model')
    return model if isinstance(model, dict) else None


def recorded_run_config(ckpt: Any) -> Optional[str]:
    """The config text (``meta['cfg']``) of a checkpoint that an mmlape
    run saved (its ``model.backbone`` one of mmlape's classes), else None:
    a converter keeps it, so that the converted file still says which
    model it is. Another library's run (an mmpretrain
    ``VisionTransformer``) records a model the converted keys no longer
    are, and is not kept."""
    meta = ckpt.get('meta') if isinstance(ckpt, Mapping) else None
    text = meta.get('cfg') if isinstance(meta, Mapping) else None
    backbone = (recorded_model(text) or {}).get('backbone')
    if not isinstance(backbone, dict) or not backbone.get('type'):
        return None
    try:
        cls = MODELS.get(str(backbone['type']).split('.')[-1])
    except KeyError:
        cls = None
    if isinstance(cls, type) and cls.__module__.startswith('mmlape.'):
        return text
    return None


def recorded_backbone(ckpt: Any) -> Optional[Tuple[str, dict]]:
    """What a loaded checkpoint records of its backbone, and where from:
    ``('', backbone config)`` of an mmengine run's config, or ``(' (the
    official LaPE run ...)', its pe_type and pe_join)`` of a converted
    official file; None when it records neither."""
    meta = ckpt.get('meta') if isinstance(ckpt, Mapping) else None
    if not isinstance(meta, Mapping):
        return None
    backbone = (recorded_model(meta.get('cfg')) or {}).get('backbone')
    if isinstance(backbone, dict):
        return '', backbone
    if isinstance(meta.get('official_lape'), Mapping):
        run = OfficialRun.from_meta(meta['official_lape'])
        options = run.backbone()
        # the run states these options of its join; the others it has not
        join = options['pe_join']
        cls, _ = resolve_pe_join(join['type'])
        unstated = {k: None for k in _options(cls) if k not in join}
        return (f' (the official LaPE run {run.describe()}, mmlape\'s '
                f'{options_text(options)})',
                dict(options, pe_join=dict(join, **unstated)))
    return None


def _options(cls: type) -> Dict[str, Any]:
    """A join class's options (what a config may set) and defaults."""
    skip = CONTEXT_ARGS + ('kwargs', )
    return {k: v for k, v in init_defaults(cls).items() if k not in skip}


def _join(cfg: Any) -> Dict[str, Any]:
    """A join config (or a built join) as ``dict(type=name, **options)``,
    options not given filled in with the class's defaults."""
    if isinstance(cfg, BasePEJoin):
        names = [k for k in _options(type(cfg)) if hasattr(cfg, k)]
        return dict(type=cfg.name, **{k: getattr(cfg, k) for k in names})
    try:
        cls, options = resolve_pe_join(cfg)
    except (ValueError, TypeError):  # a join this process does not know
        return dict(cfg) if isinstance(cfg, dict) else dict(type=cfg)
    return dict(type=cls.name, **dict(_options(cls), **options))


_ABSENT = object()


def _identity(backbone: Any) -> Dict[str, Any]:
    """The type, ``pe_type``, ``ape_type`` and join of a backbone config or
    module."""
    if isinstance(backbone, nn.Module):
        join = getattr(backbone, 'pe_join', None)
        ape_type = getattr(backbone, 'ape_type', _ABSENT)
        return dict(
            type=type(backbone).__name__,
            pe_type=getattr(backbone, 'pe_type', None)
            or getattr(join, 'pe_type', None),
            ape_type=None if ape_type is _ABSENT else ape_type or 'none',
            pe_join=_join(join) if isinstance(join, BasePEJoin) else None)
    kind = backbone.get('type')
    out = dict(type=str(kind).split('.')[-1] if kind else None)
    try:
        cls = MODELS.get(out['type']) if kind else None
    except KeyError:
        cls = None
    defaults = init_defaults(cls) if isinstance(cls, type) else {}
    pe_type = backbone.get('pe_type', defaults.get('pe_type'))
    if pe_type is None and hasattr(cls, 'pick_option'):
        # None: the arch's, else the class's (the constructor's rule)
        arch = cls.arch_settings_of(backbone.get('arch', defaults.get('arch')))
        pe_type = cls.pick_option('pe_type', None, arch)
    out['pe_type'] = pe_type
    # an absolute PE beside a rotary one (None: none, which a fixed
    # sin-cos one, stored nowhere, cannot be told from by the weights)
    out['ape_type'] = (backbone.get('ape_type', defaults['ape_type'])
                       or 'none') if 'ape_type' in defaults else None
    out['pe_join'] = _join(backbone.get('pe_join'))
    return out


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return 'dict(' + ', '.join(f'{k}={_show(v)}'
                                   for k, v in value.items()) + ')'
    return repr(value)


def model_differences(recorded: Mapping,
                      current: Any) -> List[Tuple[str, str, str]]:
    """Where a recorded backbone and the current one differ in what the
    weights cannot show, as ``(field, recorded value, current value)``
    texts: the type alone if it differs, else ``pe_type`` and the join.

    Each side is a backbone config (class defaults filled in) or a built
    backbone; a None on either side is not compared.

    Example:
        >>> model_differences(
        ...     dict(type='LaPEViT', pe_join=dict(type='Default')),
        ...     dict(type='LaPEViT', pe_join=dict(type='Share')))
        [('pe_join', "dict(type='Default')", "dict(type='Share')")]
    """
    theirs, ours = _identity(recorded), _identity(current)
    out = []
    for field in COMPARED_FIELDS:
        a, b = theirs[field], ours[field]
        if None in (a, b):
            continue
        if field == 'pe_join' and a['type'] == b['type']:
            keys = [k for k in a if a[k] is not None and b.get(k) is not None]
            a, b = ({k: d[k] for k in keys} for d in (a, b))
        if a != b:
            out.append((field, _show(a), _show(b)))
            if field == 'type':
                break
    return out


def another_model(differences: List[Tuple[str, str, str]],
                  source: str = '',
                  where: str = 'config') -> str:
    """``was saved from another model{source}: model.backbone.pe_join is
    A there but B in this config`` (one line; ``model.backbone.`` only
    where the current model is a config's)."""
    prefix = 'model.backbone.' if where == 'config' else ''
    parts = '; '.join(f'{prefix}{field} is {theirs} there but {ours} in '
                      f'this {where}' for field, theirs, ours in differences)
    return f'was saved from another model{source}: {parts}'
