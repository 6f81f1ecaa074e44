"""Whether a checkpoint is the model of a run (``--resume``, ``tools/test.py``,
the analysis tools) or a source it fine-tunes from, and whether a run can
resume its optimizer."""
import inspect
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
from mmengine.config import Config
from mmengine.logging import print_log

from mmlape.models.checkpoint import unwrap_state_dict
from mmlape.models.checkpoint.recorded import (another_model,
                                               model_differences,
                                               recorded_backbone,
                                               recorded_setting)
from mmlape.models.checkpoint.whole import fit_whole_checkpoint
from mmlape.utils.errors import CheckpointError
from mmlape.utils.safe_load import load_checkpoint

__all__ = [
    'check_checkpoint_fits', 'check_resume_optimizer', 'checked_checkpoint',
    'fit_load_from', 'note_finetune_sources', 'optimizer_differences'
]

_ADVICE = ('Use a checkpoint saved with this config (to initialise from '
           'another model, use --cfg-options load_from=... or the backbone '
           'init_cfg instead).')


def _read(filename: str, purpose: str, mmap: bool = False) -> Any:
    try:
        return load_checkpoint(filename, 'cpu', mmap=mmap)
    except CheckpointError as err:
        if str(err).startswith(f'{purpose} '):  # not "checkpoint: checkpoint"
            raise
        raise type(err)(f'{purpose}: {err}') from None


def _cfg_backbone(cfg: Optional[Config]) -> Optional[dict]:
    backbone = (cfg.get('model') or {}).get('backbone') if cfg else None
    return backbone if isinstance(backbone, dict) else None


def check_checkpoint_fits(model: torch.nn.Module,
                          filename: str,
                          purpose: str,
                          cfg: Optional[Config] = None,
                          convert: bool = False) -> dict:
    """The state dict of :func:`checked_checkpoint`."""
    return checked_checkpoint(model, filename, purpose, cfg,
                              convert)['state_dict']


def checked_checkpoint(model: torch.nn.Module,
                       filename: str,
                       purpose: str,
                       cfg: Optional[Config] = None,
                       convert: bool = False) -> dict:
    """Refuse a checkpoint of another model than ``model``.

    The recorded backbone must match in type, ``pe_type`` and join, and
    the weights ``model``'s keys and shapes exactly.

    Args:
        model (nn.Module): The built model, or backbone.
        filename (str): The checkpoint, a path or a URL.
        purpose (str): What it is for, to start the message (``'--resume'``).
        cfg (Config, optional): The run's config. Defaults to None.
        convert (bool): A file of another layout that the backbone's
            checkpoint family reads (an official DeiT, timm, Swin file) is
            converted first (:func:`fit_whole_checkpoint`), then checked.
            Defaults to False.

    Returns:
        dict: The checkpoint (read safely) with its state dict, converted
        where asked, under ``state_dict``.

    Raises:
        CheckpointError: The file cannot be read, or is another model's: one
            line naming each difference with both values, or the missing,
            unexpected and mismatched keys.
    """
    ckpt = _read(filename, purpose)
    model = getattr(model, 'module', model)
    recorded = recorded_backbone(ckpt)
    current = _cfg_backbone(cfg) or getattr(model, 'backbone', model)
    if recorded:
        wrong = model_differences(recorded[1], current)
        if wrong:
            raise CheckpointError(f'{purpose}: "{filename}" ' +
                                  another_model(wrong, recorded[0]) +
                                  f'. {_ADVICE}')
    state, own = unwrap_state_dict(ckpt), model.state_dict()
    if convert and not any(k in own for k in state):
        converted, notes = fit_whole_checkpoint(model, ckpt, filename, purpose)
        if converted is not None:
            state = converted['state_dict']
            for note in notes[:-1]:  # not the count: checked exactly below
                print_log(note, logger='current')
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
    return dict(ckpt, state_dict=state)


def fit_load_from(model: torch.nn.Module,
                  filename: str,
                  purpose: str = 'load_from') -> Optional[dict]:
    """How ``load_from`` (fine-tuning from weights) loads into ``model``,
    decided before the run: a file of the model's keys as it is, one of
    another layout converted by the backbone's checkpoint family, one that
    fits no key refused. One log line says how many of the model's tensors
    it fills and which it leaves as initialised.

    Args:
        model (nn.Module): The built model.
        filename (str): The checkpoint, a path or a URL.
        purpose (str): Where it is set, to start the messages. Defaults to
            ``'load_from'``.

    Returns:
        dict, optional: The converted checkpoint for the run to load in
        place of the file's content; None when the file loads as it is.

    Raises:
        CheckpointError: The file cannot be read or fits none of the
            model's keys (one line naming it and what to do).
    """
    ckpt = _read(filename, purpose)
    converted, notes = fit_whole_checkpoint(model, ckpt, filename, purpose)
    _try_fit(model,
             converted['state_dict'] if converted else unwrap_state_dict(ckpt),
             filename, purpose)
    for note in notes:
        print_log(note, logger='current')
    return converted


def _try_fit(model: torch.nn.Module, state: Mapping, filename: str,
             purpose: str) -> None:
    """Run each backbone's checkpoint fit (its ``load_state_dict``
    pre-hook: PE rows, window tables) on a copy of ``state`` now: what it
    refuses would otherwise stop the run while mmengine loads
    ``load_from``."""
    model = getattr(model, 'module', model)
    for name, module in model.named_modules():
        family = getattr(module, 'checkpoint_family', None)
        if family is None or not hasattr(module, 'checkpoint_spec'):
            continue
        try:
            family.fit(
                dict(state), f'{name}.' if name else '',
                module.checkpoint_spec())
        except ValueError as err:
            raise CheckpointError(f'{purpose}: "{filename}": {err}') from None


def note_finetune_sources(cfg: Config) -> None:
    """Log a note for each weight source (``load_from``, a backbone's
    ``Pretrained`` ``init_cfg``) saved from another backbone; not refused,
    as fine-tuning may start from another model. Reads only ``meta``.

    Raises:
        CheckpointError: A source cannot be read; names where it is set.
    """
    backbone = _cfg_backbone(cfg) or {}
    init = backbone.get('init_cfg')
    sources = [
        ('load_from', cfg.load_from)
    ] if (cfg.get('load_from') and not cfg.get('resume') and backbone) else []
    if (isinstance(init, dict) and init.get('type') == 'Pretrained'
            and init.get('checkpoint')
            and init.get('prefix') in ('backbone.', 'backbone')):
        sources.append(('model.backbone.init_cfg', init['checkpoint']))
    for where, filename in sources:
        recorded = recorded_backbone(_read(filename, where, mmap=True))
        text = '; '.join(
            f'{field} {theirs} there, {ours} here' for field, theirs, ours in (
                model_differences(recorded[1], backbone) if recorded else []))
        if text:
            print_log(
                f'{where}: "{filename}" was saved from another backbone '
                f'({text}); its weights initialise this one for fine-tuning '
                f'(keys that do not fit are logged as it loads)',
                logger='current')


# ----------------------------------------------------------------------
# --resume: the optimizer

#: Optimizer arguments that pick an implementation, not the arithmetic
#: (a fused kernel is dropped where the device has none).
_IMPLEMENTATION_ARGS = ('fused', 'foreach', 'capturable', 'differentiable')
#: The constructor mmengine uses when a config names none.
_DEFAULT_CONSTRUCTOR = 'DefaultOptimWrapperConstructor'


def _restart(filename: str) -> str:
    return (f'A run resumes with the optimizer it was saved with; to train '
            f'on with these settings, start a new run from its weights '
            f'instead: --cfg-options load_from={filename} (without '
            f'--resume)')


def _plain(value: Any) -> Any:
    """``value`` for comparing: lists as tuples, dicts recursively."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value


def _name(kind: Any) -> Optional[str]:
    """A registered type's name (``'mmpretrain.Lamb'`` -> ``'Lamb'``; a
    class -> its name)."""
    if kind is None:
        return None
    return str(getattr(kind, '__name__', kind)).split('.')[-1]


def _optimizer_class(name: str) -> Optional[type]:
    """The optimizer class ``name`` names in the current scope, or None."""
    from mmengine.registry import OPTIMIZERS
    try:
        with OPTIMIZERS.switch_scope_and_registry(None) as registry:
            found = registry.get(name)
    except Exception:  # a name this process cannot resolve
        return None
    return found if isinstance(found, type) else None


def _optimizer_args(optimizer: Mapping) -> Dict[str, Any]:
    """An optimizer config's arguments, the class's defaults filled in,
    without the ones that pick an implementation."""
    args = {k: v for k, v in optimizer.items() if k != 'type'}
    cls = _optimizer_class(_name(optimizer.get('type')) or '')
    if cls is not None:
        try:
            params = inspect.signature(cls.__init__).parameters.values()
        except (TypeError, ValueError):
            params = []
        for param in params:
            if param.default is not inspect.Parameter.empty:
                args.setdefault(param.name, param.default)
    return {
        k: _plain(v)
        for k, v in sorted(args.items()) if k not in _IMPLEMENTATION_ARGS
    }


def _key_path(prefix: str, key: Any) -> str:
    """``prefix.key``, or ``prefix['.key']`` for a key that is no name."""
    if isinstance(key, str) and key.isidentifier():
        return f'{prefix}.{key}'
    return f'{prefix}[{key!r}]'


def _leaf_differences(prefix: str, theirs: Any,
                      ours: Any) -> List[Tuple[str, str, str]]:
    """The entries where two values (dicts compared key by key) differ."""
    if isinstance(theirs, Mapping) and isinstance(ours, Mapping):
        out = []
        for key in list(theirs) + [k for k in ours if k not in theirs]:
            out += _leaf_differences(
                _key_path(prefix, key), theirs.get(key), ours.get(key))
        return out
    if _plain(theirs) == _plain(ours):
        return []
    return [(prefix, repr(theirs), repr(ours))]


def optimizer_differences(recorded: Mapping,
                          current: Mapping) -> List[Tuple[str, str, str]]:
    """Where two ``optim_wrapper`` configs differ in what resuming keeps
    from the checkpoint, as ``(key, recorded, current)`` texts: the
    optimizer's type (alone if it differs) or its arguments (the class's
    defaults filled in; ``fused``, ``foreach``, ``capturable`` and
    ``differentiable`` pick an implementation and are not compared), the
    constructor and ``paramwise_cfg`` (which decide the parameter groups).

    Example:
        >>> optimizer_differences(
        ...     dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9)),
        ...     dict(optimizer=dict(type='SGD', lr=0.2, momentum=0.9)))
        [('optim_wrapper.optimizer.lr', '0.1', '0.2')]
    """
    out = []
    ours, theirs = current.get('optimizer'), recorded.get('optimizer')
    if isinstance(ours, Mapping) and isinstance(theirs, Mapping):
        kinds = _name(theirs.get('type')), _name(ours.get('type'))
        if kinds[0] != kinds[1]:
            out.append(('optim_wrapper.optimizer.type', repr(kinds[0]),
                        repr(kinds[1])))
        else:
            out += _leaf_differences('optim_wrapper.optimizer',
                                     _optimizer_args(theirs),
                                     _optimizer_args(ours))
    constructors = [
        _name(cfg.get('constructor')) or _DEFAULT_CONSTRUCTOR
        for cfg in (recorded, current)
    ]
    if constructors[0] != constructors[1]:
        out.append(('optim_wrapper.constructor', repr(constructors[0]),
                    repr(constructors[1])))
    return out + _leaf_differences('optim_wrapper.paramwise_cfg',
                                   recorded.get('paramwise_cfg') or {},
                                   current.get('paramwise_cfg') or {})


def _group_sizes(state: Any) -> Optional[Dict[str, List[int]]]:
    """The parameter count of each group of an optimizer wrapper's state
    dict (``{'': [...]}``; ``OptimWrapperDict``: one entry per name), or
    None when ``state`` holds none."""

    def sizes(one):
        groups = one.get('param_groups') if isinstance(one, Mapping) else None
        if not isinstance(groups, list):
            return None
        return [len(g.get('params', ())) for g in groups]

    if sizes(state) is not None:
        return {'': sizes(state)}
    if isinstance(state, Mapping) and state and all(
            sizes(v) is not None for v in state.values()):
        return {str(k): sizes(v) for k, v in state.items()}
    return None


def _wrapper_group_sizes(optim_wrapper: Any) -> Dict[str, List[int]]:
    """:func:`_group_sizes` of a built optimizer wrapper."""

    def sizes(wrapper):
        return [len(g['params']) for g in wrapper.optimizer.param_groups]

    wrappers = getattr(optim_wrapper, 'optim_wrappers', None)
    if isinstance(wrappers, Mapping):  # OptimWrapperDict
        return {str(k): sizes(v) for k, v in wrappers.items()}
    return {'': sizes(optim_wrapper)}


def _describe_groups(sizes: Dict[str, List[int]]) -> str:
    parts = [
        (f'{name}: ' if name else '') + f'{len(counts)} parameter group(s) of '
        f'{", ".join(map(str, counts)) or "no"} parameters'
        for name, counts in sizes.items()
    ]
    return '; '.join(parts)


def check_resume_optimizer(runner: Any, ckpt: Mapping, filename: str,
                           cfg: Config) -> None:
    """``--resume`` with other optimizer settings than the run was saved
    with, refused in one line before the runner resumes.

    mmengine loads the saved optimizer state into the new optimizer: a
    changed type fails inside it (``KeyError: 'momentum'``), a changed
    ``paramwise_cfg`` with "a different number of parameter groups", and
    a changed argument (``lr``) is replaced by the saved one without a
    word. Now the settings the checkpoint records (``meta['cfg']``) are
    compared with the config's (:func:`optimizer_differences`), and, as
    the runner resumes, the saved state's parameter groups with the new
    optimizer's (the runner's ``resume`` is wrapped for that).

    Args:
        runner (Runner): The run's runner, before ``train()``.
        ckpt (Mapping): The checkpoint, read.
        filename (str): Its path or URL, for the message.
        cfg (Config): The run's config.

    Raises:
        CheckpointError: One line naming what changed, both values, and
            how to start a new run from the weights instead.
    """
    meta = ckpt.get('meta') if isinstance(ckpt, Mapping) else None
    recorded = recorded_setting(meta.get('cfg'), 'optim_wrapper') \
        if isinstance(meta, Mapping) else None
    current = cfg.get('optim_wrapper')
    if isinstance(recorded, Mapping) and isinstance(current, Mapping):
        wrong = optimizer_differences(recorded, current)
        if wrong:
            parts = '; '.join(f'{key} is {theirs} there but {ours} in this '
                              f'config' for key, theirs, ours in wrong)
            raise CheckpointError(f'--resume: "{filename}" was saved with '
                                  f'other optimizer settings: {parts}. '
                                  f'{_restart(filename)}')
    saved = _group_sizes(ckpt.get('optimizer'))
    if saved is None:
        return
    resume = runner.resume

    def resume_checked(*args, **kwargs):
        built = _wrapper_group_sizes(runner.optim_wrapper)
        if built != saved:
            raise CheckpointError(
                f'--resume: "{filename}" holds the optimizer state of '
                f'{_describe_groups(saved)}, the optimizer of this config '
                f'has {_describe_groups(built)} (the parameters it trains '
                f'or its paramwise_cfg differ). {_restart(filename)}')
        return resume(*args, **kwargs)

    runner.resume = resume_checked
