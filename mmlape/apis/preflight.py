"""Checks of a run's inputs before it starts: the scope, ``--cfg-options``,
the work dir and the dataset paths.

Each check raises an :class:`~mmlape.utils.errors.InputError` subclass
where it looks at the input, so the tools report it as one line.
"""
import errno
import importlib
import os
import os.path as osp
import tempfile
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

from mmengine.config import Config

from mmlape.utils.errors import ConfigError, DataError, UsageError
from mmlape.utils.work_dir import intact_checkpoint

__all__ = [
    'UsageError', 'check_dataset_paths', 'check_work_dir',
    'fit_fused_optimizer', 'merge_cfg_options', 'register_scope_modules',
    'use_checked_image_loading'
]

_ALL_PHASES = ('train', 'val', 'test')
#: Errors of a write that mean "no room".
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


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


def _dataset_cfgs(cfg: Config, phases) -> Iterator[Tuple[str, dict]]:
    """``(config key, dataset config)`` of every dataset of the phases,
    wrappers (``dataset``, ``datasets``) included."""
    for phase in phases:
        loader = cfg.get(f'{phase}_dataloader')
        stack = [(f'{phase}_dataloader.dataset',
                  loader.get('dataset'))] if loader else []
        while stack:
            where, ds = stack.pop()
            if not isinstance(ds, dict):
                continue
            yield where, ds
            stack.append((where + '.dataset', ds.get('dataset')))
            for i, sub in enumerate(ds.get('datasets') or []):
                stack.append((f'{where}.datasets[{i}]', sub))


def _is_blank(path: str, limit: int = 1 << 16) -> bool:
    """Whether a file of at most ``limit`` bytes is only white space."""
    if os.path.getsize(path) > limit:
        return False
    with open(path, 'rb') as f:
        return not f.read().strip()


def check_dataset_paths(cfg: Config, phases=_ALL_PHASES) -> None:
    """Fail early, and clearly, when a dataset path of the phases does not
    exist: ``data_root``, ``ann_file`` (not empty either) and the folders of
    ``data_prefix`` of every dataset, wrappers included.

    Raises:
        UsageError: Names the config key and the missing path.
        DataError: Names an empty annotation file.
    """
    for where, ds in _dataset_cfgs(cfg, phases):
        root = ds.get('data_root') or ''
        paths = [('data_root', root)] if root else []
        if ds.get('ann_file'):
            paths.append(('ann_file', osp.join(root, ds['ann_file'])))
        prefix = ds.get('data_prefix')
        if isinstance(prefix, str):
            prefix = dict(prefix=prefix)
        for key, value in (prefix or {}).items():
            if isinstance(value, str) and value:
                paths.append((f'data_prefix.{key}', osp.join(root, value)))
        for key, path in paths:
            if not osp.exists(path):
                raise UsageError(
                    f'dataset path "{path}" does not exist ({where}.{key}). '
                    f'Put the data there, or point the config at it, e.g. '
                    f'--cfg-options {where}.data_root=/path/to/data')
            if key == 'ann_file' and osp.isfile(path) and _is_blank(path):
                raise DataError(f'annotation file "{path}" is empty '
                                f'({where}.ann_file)')


def check_work_dir(work_dir: str) -> None:
    """Create the work dir and make sure files can be written in it: a
    small file (64 KiB) is written and flushed to disk, so that a full disk
    or an exhausted quota shows here, not while the runner writes its
    config copy.

    Raises:
        UsageError: The work dir is under a file, cannot be created, or
            cannot be written; the message names it and the reason (and,
            for lack of space, the checkpoint that is intact).
    """
    path = parent = osp.abspath(work_dir)
    while not osp.exists(parent) and osp.dirname(parent) != parent:
        parent = osp.dirname(parent)
    if not osp.isdir(parent):
        raise UsageError(f'work dir "{work_dir}" cannot be created: '
                         f'"{parent}" is a file')
    for action in ('created', 'written'):
        try:
            if action == 'created':
                os.makedirs(path, exist_ok=True)
            else:
                with tempfile.TemporaryFile(dir=path) as f:
                    f.write(bytes(1 << 16))
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as err:
            intact = ''
            if err.errno in _NO_ROOM:
                intact = f'; {intact_checkpoint(path)}'
            raise UsageError(f'work dir "{work_dir}" cannot be {action}: '
                             f'{err.strerror}{intact}') from None


def use_checked_image_loading(cfg: Config,
                              phases: Sequence[str] = _ALL_PHASES) -> int:
    """Replace every ``LoadImageFromFile`` step (mmcv's, which all three
    host libraries use) of the phases' pipelines by mmlape's
    ``CheckedLoadImageFromFile``, which names a missing or corrupt image;
    return how many were replaced."""
    replaced = 0

    def visit(node: Any) -> None:
        nonlocal replaced
        if isinstance(node, dict):
            if node.get('type') in ('LoadImageFromFile',
                                    'mmcv.LoadImageFromFile'):
                node['type'] = 'mmlape.CheckedLoadImageFromFile'
                replaced += 1
            node = list(node.values())
        if isinstance(node, (list, tuple)):
            for value in node:
                visit(value)

    for _, ds in _dataset_cfgs(cfg, phases):
        visit(ds.get('pipeline'))
    return replaced


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


def fit_fused_optimizer(cfg: Config, device: str) -> Optional[str]:
    """Drop ``optim_wrapper.optimizer.fused=True`` where torch has no fused
    kernel for the run's ``device``: the configs ask for fused AdamW (one
    kernel for every parameter's update), which torch offers on CUDA, the
    CPU and a few other devices.

    Returns:
        str, optional: What was changed, for the run's log; None when
        nothing was.
    """
    optimizer = (cfg.get('optim_wrapper') or {}).get('optimizer')
    if not isinstance(optimizer, dict) or not optimizer.get('fused'):
        return None
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    supported = _get_fused_kernels_supported_devices()
    if device in supported:
        return None
    optimizer.pop('fused')
    return (f'optimizer {optimizer.get("type")}: torch has no fused kernel '
            f'for {device} (only {supported}); using the unfused one')
