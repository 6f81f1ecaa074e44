"""Checks of a run's datasets before it starts: every path the phases read
exists, and images load through a step that names a bad file (labels:
:mod:`.labels`). Errors are :class:`~mmlape.utils.errors.InputError`
subclasses, reported by the tools as one line.
"""
import os
import os.path as osp
from typing import Any, Iterator, Sequence, Tuple

from mmengine.config import Config

from mmlape.utils.errors import DataError, UsageError

__all__ = [
    'ALL_PHASES', 'check_dataset_paths', 'dataset_cfgs',
    'use_checked_image_loading'
]

#: The phases of a run whose datasets the checks read by default.
ALL_PHASES = ('train', 'val', 'test')


def dataset_cfgs(cfg: Config, phases) -> Iterator[Tuple[str, dict]]:
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


def check_dataset_paths(cfg: Config, phases=ALL_PHASES) -> None:
    """Fail early, and clearly, when a dataset path of the phases does not
    exist: ``data_root``, ``ann_file`` (not empty either) and the folders of
    ``data_prefix`` of every dataset, wrappers included.

    Raises:
        UsageError: Names the config key and the missing path.
        DataError: Names an empty annotation file.
    """
    for where, ds in dataset_cfgs(cfg, phases):
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


def use_checked_image_loading(cfg: Config,
                              phases: Sequence[str] = ALL_PHASES) -> int:
    """Replace every ``LoadImageFromFile`` of the phases' pipelines by
    ``CheckedLoadImageFromFile``; return how many were replaced."""
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

    for _, ds in dataset_cfgs(cfg, phases):
        visit(ds.get('pipeline'))
    return replaced
