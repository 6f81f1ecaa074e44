"""A run's config before it starts: the scope of its host library,
``--cfg-options`` checked against the values they replace, and values that
only a later step of the run would refuse (:func:`check_run_values`).

Each check raises an :class:`~mmlape.utils.errors.InputError` subclass
where it looks at the input, so the tools report it as one line.
"""
import importlib
from typing import Any, Dict, Sequence

from mmengine.config import Config

from mmlape.utils.errors import ConfigError, UsageError

__all__ = [
    'UsageError', 'check_run_values', 'merge_cfg_options',
    'register_scope_modules'
]


def register_scope_modules(cfg: Config) -> str:
    """Make the modules of the config's ``default_scope`` library findable
    and return the scope: its registries name their packages
    (``locations``), which mmengine imports when first asked.

    Raises:
        UsageError: When the config names no known scope.
    """
    scope = cfg.get('default_scope')
    if scope not in ('mmpretrain', 'mmdet', 'mmseg'):
        raise UsageError(
            f"the config's default_scope is {scope!r}; mmlape's tools run "
            f"mmpretrain, mmdet and mmseg configs (inherit one of their "
            f"default runtimes)")
    importlib.import_module(f'{scope}.registry')
    return scope


# ----------------------------------------------------------------------
# --cfg-options

_MISSING = object()


def _lookup(cfg: Any, key: str) -> Any:
    node = cfg._cfg_dict if isinstance(cfg, Config) else cfg
    for part in key.split('.'):
        if isinstance(node, (list, tuple)) and part.isdigit():
            if int(part) >= len(node):
                return _MISSING
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return _MISSING
    return node


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_EXPECTS = ((bool, lambda v: isinstance(v, bool),
             'true or false'), (int, lambda v: type(v) is int,
                                'an integer'), (float, _is_number, 'a number'),
            (dict, lambda v: isinstance(v, dict), 'a dict'))


def _option_value(key: str, old: Any, new: Any) -> Any:
    """``new`` checked against the type of the value it replaces."""
    if old is _MISSING or old is None or new is None:
        return new
    if type(old) is int and isinstance(new, float) and new.is_integer():
        new = int(new)
    if isinstance(old, str) and _is_number(new):
        return str(new)
    for kind, fits, what in _EXPECTS:
        if isinstance(old, kind):
            if not fits(new):
                has = 'one there' if kind is dict else old
                raise ConfigError(f'--cfg-options {key}={new!r}: expects '
                                  f'{what} (the config has {has})')
            break
    return new


def merge_cfg_options(cfg: Config, options: Dict[str, Any]) -> None:
    """Apply ``--cfg-options`` (``{'a.b.c': value}`` as mmengine's
    ``DictAction`` parses them) to ``cfg`` in place, refusing a value of
    another type than the one it replaces (an integer for an integer, a bool
    for a bool, a dict for a dict; ``None`` replaces anything; a number
    where the config has a string becomes that string).

    Raises:
        ConfigError: Names the option, the value and what it expects, or
            why the key cannot be set.

    Example:
        >>> cfg = Config(dict(train_cfg=dict(max_iters=600)))
        >>> merge_cfg_options(cfg, {'train_cfg.max_iters': 'abc'})
        Traceback (most recent call last):
        ...
        mmlape.utils.errors.ConfigError: --cfg-options train_cfg.max_iters='abc': expects an integer (the config has 600)
    """  # noqa: E501
    checked = {
        key: _option_value(key, _lookup(cfg, key), value)
        for key, value in options.items()
    }
    for key, value in checked.items():
        try:
            cfg.merge_from_dict({key: value})
        except (KeyError, TypeError, ValueError) as err:
            # mmengine's merge refuses an index past a list's end, or a key
            # below a value that is not a dict.
            reason = err.args[0] if isinstance(err, KeyError) and err.args \
                else str(err)
            raise ConfigError(f'--cfg-options {key}={value!r}: '
                              f'{reason}') from None


# ----------------------------------------------------------------------
# values a later step would refuse


def _is_positive_int(value: Any) -> bool:
    return type(value) is int and value >= 1


def check_run_values(cfg: Config, phases: Sequence[str]) -> None:
    """Refuse at start the values that mmengine or torch refuse only once
    the run is under way, after the model and the data are built: a batch
    size of a phase's data loader that is not a positive integer (torch's
    sampler, as the first batch is drawn) and, where the run validates, a
    ``train_cfg.val_interval`` that is not one (mmengine's loop divides by
    it at the first validation). ``None`` and absent keys are left to the
    host, which takes them as it does.

    Args:
        cfg (Config): The run's config.
        phases (Sequence[str]): What the run does: ``'train'``, ``'val'``,
            ``'test'``.

    Raises:
        ConfigError: One line naming the key, the value and what is
            allowed.

    Example:
        >>> check_run_values(Config(dict(train_cfg=dict(val_interval=0),
        ...     val_cfg=dict(), val_dataloader=dict())), ('train', 'val'))
        Traceback (most recent call last):
        ...
        mmlape.utils.errors.ConfigError: train_cfg.val_interval=0: expected a positive integer (validate every N iterations or epochs); to train without validating, pass --no-validate
    """  # noqa: E501
    validates = 'val' in phases and cfg.get('val_cfg') is not None
    for phase in phases:
        if phase == 'val' and not validates:
            continue
        loader = cfg.get(f'{phase}_dataloader')
        size = loader.get('batch_size') if isinstance(loader, dict) else None
        if size is not None and not _is_positive_int(size):
            raise ConfigError(f'{phase}_dataloader.batch_size={size!r}: '
                              f'expected a positive integer (samples per '
                              f'batch on each process)')
    train_cfg = cfg.get('train_cfg')
    if 'train' in phases and validates and isinstance(train_cfg, dict):
        interval = train_cfg.get('val_interval')
        if interval is not None and not _is_positive_int(interval):
            raise ConfigError(
                f'train_cfg.val_interval={interval!r}: expected a positive '
                f'integer (validate every N iterations or epochs); to train '
                f'without validating, pass --no-validate')
