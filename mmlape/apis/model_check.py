"""The model a checkpoint records, against the config of a run.

mmengine saves a run's config text in a checkpoint (``meta['cfg']``).
:func:`recorded_model` reads its ``model`` without running the text, and
:func:`backbone_differences` compares the recorded backbone with this
run's: the backbone type, then every option its class declares in
``STRUCTURAL_OPTIONS`` (those that change the parameter layout or what the
model computes), each filled in as the class fills it in (the argument,
else the arch's setting, else the class's default).
"""
import ast
import inspect
import os
from typing import Any, Dict, List, Optional, Tuple

import torch
from mmengine.config import Config
from mmengine.logging import print_log

from mmlape.models.checkpoint import unwrap_state_dict
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
_MISSING = object()
_ADVICE = ('Use a checkpoint saved with this config (to initialise from '
           'another model, use --cfg-options load_from=... or the backbone '
           'init_cfg instead).')


class _Opaque:
    """A config value that is not a literal; compared by its source."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, _Opaque) and other.source == self.source

    def __repr__(self) -> str:
        return self.source


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op,
                                                     (ast.USub, ast.UAdd))
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) in (int, float)):
        value = node.operand.value
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {
            _literal(k): _literal(v)
            for k, v in zip(node.keys, node.values)
        }
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == 'dict' and not node.args
            and all(kw.arg for kw in node.keywords)):
        return {kw.arg: _literal(kw.value) for kw in node.keywords}
    return _Opaque(ast.unparse(node))


def recorded_model(meta_cfg: Any) -> Optional[dict]:
    """The ``model`` dict of the config a checkpoint records
    (``meta['cfg']``, the config's text), read without running it.

    Only literals, lists, tuples and ``dict(...)`` are evaluated; any other
    expression is kept as its source text.

    Args:
        meta_cfg: ``checkpoint['meta']['cfg']``.

    Returns:
        dict | None: The model config, or None when there is none to read.

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


def _signature_default(cls: type, name: str) -> Any:
    """The default of ``cls``'s argument ``name`` (None if it has none)."""
    for klass in cls.__mro__:
        init = klass.__dict__.get('__init__')
        param = inspect.signature(init).parameters.get(name) if init else None
        if param is not None and param.default is not param.empty:
            return param.default
    return None


def _part_cfg(kind: str, cfg: Any) -> Any:
    """A part's config with its type's registered name and every option of
    the type that has a default (a join's context arguments left out)."""
    registry, none_type = _PARTS[kind]
    cfg = dict(type=none_type if cfg is None else cfg) if not isinstance(
        cfg, dict) else dict(cfg)
    lookup = {k.lower(): (k, v) for k, v in registry.module_dict.items()}
    name, cls = lookup.get(str(cfg.get('type')).lower(), (None, None))
    if cls is None:
        return cfg
    out = dict(type=name)
    skip = set(inspect.signature(BasePEJoin.__init__).parameters)
    for klass in cls.__mro__:
        if klass.__dict__.get('__init__') is None or klass.__module__ in (
                'torch.nn.modules.module', 'mmengine.model.base_module'):
            continue
        for pname, param in inspect.signature(
                klass.__init__).parameters.items():
            if (pname not in out and param.default is not param.empty
                    and (kind != 'pe_join' or pname not in skip)):
                out[pname] = cfg.get(pname, param.default)
    for key, value in cfg.items():  # options the type does not know
        out.setdefault(key, value)
    return out


def _arch_settings(cls: type, arch: Any) -> dict:
    """Everything the arch ``arch`` names sets (a ViT-Adapter preset names
    a ViT arch and adds options of the adapter)."""
    if isinstance(arch, dict):
        return dict(arch)
    preset = dict(getattr(cls, 'adapter_zoo', {}).get(arch) or {})
    arch = preset.pop('arch', arch)
    return dict(
        getattr(cls, 'arch_zoo', {}).get(arch, {'name': arch}), **preset)


def _tuples(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _describe_backbone(cls: Optional[type], backbone: dict,
                       options: Tuple[str, ...]) -> Dict[str, tuple]:
    """``option -> (value to show, value to compare)``, each filled in as
    ``cls`` fills it in: the argument, else the arch's, else the class's
    default."""
    arch = backbone.get('arch', _MISSING)
    if arch is _MISSING and cls is not None:
        arch = _signature_default(cls, 'arch')
    settings = _arch_settings(cls, arch) if cls else {}
    out = {}
    for name in options:
        value = backbone.get(name, _MISSING)
        if value is _MISSING and cls is None:
            continue
        if value is _MISSING:
            value = _signature_default(cls, name)
        if value is None and cls is not None:
            value = settings.get(name,
                                 getattr(cls, 'option_defaults', {}).get(name))
        compare = value
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
    """The options in which two backbone configs differ: the type, else the
    class's ``STRUCTURAL_OPTIONS`` (:data:`COMPARED_FIELDS` for a class
    that declares none), defaults filled in from the class.

    Args:
        recorded (dict): The backbone config a checkpoint records.
        current (dict): The backbone config of this run.

    Returns:
        list: ``(option, recorded value, current value)``, as text.

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
    theirs = _describe_backbone(cls, recorded, options)
    ours = _describe_backbone(cls, current, options)
    return [
        (name, _show(theirs[name][0]), _show(ours[name][0]))
        for name in options
        if name in theirs and name in ours and theirs[name][1] != ours[name][1]
    ]


def _recorded_backbone(ckpt: Any) -> Optional[dict]:
    meta = ckpt.get('meta') if isinstance(ckpt, dict) else None
    model = recorded_model(meta.get('cfg')) if isinstance(meta, dict) else None
    backbone = (model or {}).get('backbone')
    return backbone if isinstance(backbone, dict) else None


def _cfg_backbone(cfg: Any) -> Optional[dict]:
    model = cfg.get('model') if cfg is not None else None
    backbone = model.get('backbone') if isinstance(model, dict) else None
    return backbone if isinstance(backbone, dict) else None


def check_checkpoint_fits(model: torch.nn.Module,
                          filename: str,
                          purpose: str,
                          cfg: Optional[Config] = None) -> dict:
    """Refuse a checkpoint of another model than ``model``.

    When ``cfg`` is given and the checkpoint records its config
    (``meta['cfg']``, as mmengine saves it), the backbones must agree in
    type and structural options (:func:`backbone_differences`); then, and
    for a checkpoint without a recorded config, the weights must match
    ``model``'s keys and shapes exactly.

    Args:
        model (nn.Module): The built model.
        filename (str): The checkpoint.
        purpose (str): What the checkpoint is for, to start the message
            (``'--resume'``, ``'checkpoint'``).
        cfg (Config, optional): The run's config. Defaults to None.

    Returns:
        dict: The checkpoint's state dict (read safely), so that a caller
        need not read the file again.

    Raises:
        CheckpointError: The file cannot be read (names it and the reason),
            or is another model's: names each differing option with both
            values, or lists missing, unexpected and mismatched keys.
    """
    if not os.path.isfile(filename):
        raise CheckpointError(
            f'{purpose}: checkpoint "{filename}" does not exist')
    try:
        ckpt = safe_torch_load(filename, 'cpu')
    except CheckpointError as err:
        raise type(err)(f'{purpose}: {err}') from None
    recorded, backbone = _recorded_backbone(ckpt), _cfg_backbone(cfg)
    diffs = backbone_differences(recorded, backbone) if (
        recorded is not None and backbone is not None) else []
    if diffs:
        parts = '; '.join(f'model.backbone.{field} is {theirs} there but '
                          f'{ours} in this config'
                          for field, theirs, ours in diffs)
        raise CheckpointError(f'{purpose}: "{filename}" was saved from '
                              f'another model: {parts}. {_ADVICE}')
    state = unwrap_state_dict(ckpt)
    own = getattr(model, 'module', model).state_dict()
    problems = dict(
        missing=[k for k in own if k not in state],
        unexpected=[k for k in state if k not in own])
    problems['shape mismatch'] = [
        f'{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}' for k in own
        if k in state and tuple(state[k].shape) != tuple(own[k].shape)
    ]
    parts = [
        f'{len(keys)} {label} (e.g. {keys[:3]})'
        for label, keys in problems.items() if keys
    ]
    if parts:
        raise CheckpointError(f'{purpose}: "{filename}" is a checkpoint of '
                              f'another model: {"; ".join(parts)}. {_ADVICE}')
    return state


def note_finetune_sources(cfg: Config) -> None:
    """Log a note for each weight source (``load_from``, a backbone's
    ``init_cfg=dict(type='Pretrained', prefix='backbone.')``) saved from
    another backbone.

    Fine-tuning may start from another model (an MPVG checkpoint initialises
    a PVG ViT-Adapter; an ImageNet ViT a 512x512 Segmenter), so this is not
    refused: the differing options are logged, and the loader logs the keys
    that do not fit. The checkpoint's file is checked (and refused as
    :func:`~mmlape.utils.safe_load.safe_torch_load` refuses it); only its
    ``meta`` is read (tensors are memory-mapped, not loaded).

    Raises:
        CheckpointError: A source cannot be read; names where it is set.
    """
    backbone = _cfg_backbone(cfg)
    init = (backbone or {}).get('init_cfg')
    sources = []
    if cfg.get('load_from') and not cfg.get('resume') and backbone:
        sources.append(('load_from', cfg.load_from))
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
        diffs = backbone_differences(recorded, backbone) if recorded else []
        if diffs:
            text = '; '.join(f'{field} {theirs} there, {ours} here'
                             for field, theirs, ours in diffs)
            print_log(
                f'{where}: "{filename}" was saved from another backbone '
                f'({text}); its weights initialise this one for '
                f'fine-tuning (keys that do not fit are logged as it '
                f'loads)',
                logger='current')
