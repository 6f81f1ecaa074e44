"""Labels checked against the model's classes before a run starts.

A bad label would otherwise surface deep in training (an index error, a
CUDA device-side assert). :func:`check_dataset_labels` reads the run's
annotations first and stops at the first bad label with one line;
:func:`use_checked_label_maps` checks segmentation label maps as they load.

What a dataset is comes from the host's own dataset class, built from the
config without reading its annotations (``lazy_init``, no pipeline): its
annotation file or image folder (``data_root``, ``split`` and the prefixes
joined as the host joins them) and its classes (a file of names
included). mmdet's COCO files are read through the dataset's own COCO API,
and categories become labels as the dataset makes them. mmpretrain's
``<file> <label>`` lines are scanned here rather than parsed by the host's
``load_data_list``, which takes about 4x as long (ImageNet-1k's 1.28M
lines: 6.8-8.6 s against 1.9-2.0 s, a shared 2-core CPU) and names no
line in its error.

References:
    mmpretrain's ``CustomDataset`` (annotation files, ``find_folders``),
    mmdet's ``CocoDataset`` (``COCOAPI``, ``cat_ids``: the file's
    categories of the dataset's classes), mmseg's ``LoadAnnotations``
    (``reduce_zero_label``).
"""
import contextlib
import importlib
import io
import os.path as osp
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from mmengine.config import Config

from mmlape.utils.errors import DataError
from .checks import ALL_PHASES, dataset_cfgs

__all__ = [
    'check_dataset_labels', 'model_num_classes', 'use_checked_label_maps'
]


def _num_classes(node: Any, where: str) -> Iterator[Tuple[int, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == 'num_classes' and type(value) is int and value > 0:
                yield value, f'{where}.{key}'
            else:
                yield from _num_classes(value, f'{where}.{key}')
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _num_classes(value, f'{where}[{i}]')


def model_num_classes(cfg: Config) -> Optional[Tuple[int, str]]:
    """The number of classes the model predicts: the smallest
    ``num_classes`` of ``cfg.model`` (its heads), with where it is set.

    Example:
        >>> cfg = Config(dict(model=dict(head=dict(num_classes=4))))
        >>> model_num_classes(cfg)
        (4, 'model.head.num_classes=4')
    """
    found = list(_num_classes(cfg.get('model'), 'model'))
    if not found:
        return None
    count, where = min(found)
    return count, f'{where}={count}'


def _dataset_class(scope: str, ds: dict) -> Optional[type]:
    kind = ds.get('type')
    if not isinstance(kind, str):
        return kind if isinstance(kind, type) else None
    try:
        registry = importlib.import_module(f'{scope}.registry').DATASETS
        return registry.get(kind)
    except (ImportError, KeyError, AttributeError):
        return None


def _host_dataset(scope: str, ds: dict) -> Optional[Any]:
    """The host's dataset of ``ds``, built through its registry without
    reading its annotations or building its pipeline; None where the host
    cannot build it (the runner builds it again and reports why)."""
    registry = importlib.import_module(f'{scope}.registry').DATASETS
    try:
        return registry.build(dict(ds, pipeline=[], lazy_init=True))
    except Exception:
        return None


def _local(path: str) -> bool:
    return '://' not in path and osp.isfile(path)


def _check_text_labels(path: str, count: int, where: str) -> None:
    """mmpretrain's ``path label`` lines: each label an integer in
    ``[0, count)``."""
    allowed = f'0..{count - 1} ({where})'
    with open(path, encoding='utf-8') as f:
        text = f.read()
    for number, line in enumerate(io.StringIO(text), 1):
        head = f'annotation file "{path}" line {number}'
        parts = line.strip().rsplit(' ', 1)
        if len(parts) != 2:
            raise DataError(f'{head}: no label after the file name in '
                            f'"{line.strip()}" (labels are {allowed})')
        try:
            label = int(parts[1])
        except ValueError:
            raise DataError(f'{head}: label {parts[1]!r} is not an integer '
                            f'in {allowed}') from None
        if not 0 <= label < count:
            raise DataError(f'{head}: label {label} is outside {allowed}')


def _check_folder_classes(folder: str, count: int, where: str) -> None:
    """A folder-per-class layout (no annotation file) has at most
    ``count`` class folders (as mmpretrain's ``find_folders`` finds
    them)."""
    if not osp.isdir(folder):
        return
    from mmpretrain.datasets.custom import find_folders
    names, _ = find_folders(folder)
    if len(names) > count:
        raise DataError(f'data folder "{folder}" has {len(names)} class '
                        f'folders, labels 0..{len(names) - 1}, outside '
                        f'0..{count - 1} ({where})')


def _check_coco(dataset: Any, path: str, count: Optional[int],
                where: str) -> None:
    """COCO annotations, read through the dataset's COCO API: each
    annotation's category is one of the file's, every class of the dataset
    names one of the file's categories, and each label (the category's
    place among the dataset's ``cat_ids``, as the dataset makes it) is one
    of the model's classes."""
    with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
        coco = dataset.COCOAPI(path)
    categories = {
        c.get('id'): c.get('name')
        for c in coco.dataset.get('categories') or [] if isinstance(c, dict)
    }
    ids = sorted(i for i in categories if isinstance(i, int))
    shown = f'{ids[0]}..{ids[-1]}' if ids else 'none'
    classes = list(dataset.metainfo.get('classes') or ())
    missing = [c for c in classes if c not in categories.values()]
    if missing:
        raise DataError(
            f'annotation file "{path}": the dataset\'s classes '
            f'{missing[:5]} are not categories of the file (the other '
            f'classes\' labels would shift); set the dataset\'s '
            f'metainfo.classes to names of its categories')
    # mmdet's CocoDataset.load_data_list
    cat_ids = coco.get_cat_ids(cat_names=classes)
    label_of = {cat: i for i, cat in enumerate(cat_ids)}
    for ann in coco.dataset.get('annotations') or []:
        if not isinstance(ann, dict) or ann.get('ignore', False):
            continue
        cat = ann.get('category_id')
        what = (f'annotation file "{path}": annotation {ann.get("id")} '
                f'(image {ann.get("image_id")}) has category_id {cat!r}')
        if cat not in categories:
            raise DataError(f'{what}, which is not one of the file\'s '
                            f'categories (ids {shown})')
        label = label_of.get(cat)
        if count is not None and label is not None and label >= count:
            raise DataError(f'{what} ("{categories[cat]}"), label {label}, '
                            f'outside 0..{count - 1} ({where})')


def check_dataset_labels(cfg: Config,
                         phases: Sequence[str] = ALL_PHASES) -> None:
    """Check the labels of the phases' datasets against the model's
    classes (:func:`model_num_classes`, else the dataset's classes), each
    dataset as its host's class builds it (see the module's docstring).

    - mmpretrain's ``CustomDataset`` family: integer labels in
      ``[0, num_classes)``, or no more class folders than classes.
    - mmdet's ``CocoDataset`` family: categories among the file's, and
      every label a class of the model.

    Raises:
        DataError: One line naming the file, the line or annotation, the
            label and the allowed range.
    """
    scope = cfg.get('default_scope')
    if scope not in ('mmpretrain', 'mmdet'):
        return
    if scope == 'mmpretrain':
        from mmpretrain.datasets import CustomDataset as family
    else:
        from mmdet.datasets import CocoDataset as family
    model = model_num_classes(cfg)
    for key, ds in dataset_cfgs(cfg, phases):
        cls = _dataset_class(scope, ds)
        if cls is None or not issubclass(cls, family):
            continue
        dataset = _host_dataset(scope, ds)
        if dataset is None:
            continue
        path = dataset.ann_file or ''
        classes = dataset.metainfo.get('classes')
        if model is not None:
            count, where = model
        elif classes:
            count, where = len(classes), f'the {len(classes)} classes of {key}'
        else:
            count = where = None
        if scope == 'mmpretrain':
            if count is None or not dataset.with_label:
                continue
            if path and _local(path):
                _check_text_labels(path, count, where)
            elif not path:
                _check_folder_classes(dataset.img_prefix, count, where)
        elif path.endswith('.json') and _local(path):
            _check_coco(dataset, path, count, where)


def use_checked_label_maps(cfg: Config,
                           phases: Sequence[str] = ALL_PHASES) -> int:
    """Put ``mmlape.CheckLabelMap`` after every ``LoadAnnotations`` of the
    phases' pipelines of an mmseg config, with the model's classes
    (:func:`model_num_classes`) and its decode head's ignore index; return
    how many were put."""
    if cfg.get('default_scope') != 'mmseg':
        return 0
    found = model_num_classes(cfg)
    if found is None:
        return 0
    count, where = found
    head = (cfg.get('model') or {}).get('decode_head') or {}
    heads = head if isinstance(head, (list, tuple)) else [head]
    ignore = next(
        (h['ignore_index']
         for h in heads if isinstance(h, dict) and 'ignore_index' in h), 255)
    check = dict(
        type='mmlape.CheckLabelMap',
        num_classes=count,
        ignore_index=ignore,
        source=where)
    added = 0

    def visit(node: Any) -> Any:
        nonlocal added
        if isinstance(node, dict):
            for key, value in node.items():
                node[key] = visit(value)
            return node
        if isinstance(node, (list, tuple)):
            out: List[Any] = []
            for item in node:
                kind = str(item.get('type', '')).split('.')[-1] \
                    if isinstance(item, dict) else None
                if kind == 'CheckLabelMap':  # put again (shared pipelines)
                    continue
                out.append(visit(item))
                if kind == 'LoadAnnotations':
                    out.append(dict(check))
                    added += 1
            return type(node)(out) if isinstance(node, tuple) else out
        return node

    for _, ds in dataset_cfgs(cfg, phases):
        if ds.get('pipeline') is not None:
            ds['pipeline'] = visit(ds['pipeline'])
    return added
