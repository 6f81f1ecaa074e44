"""Image loading that names the file it cannot read, and label maps checked
against the classes.

Both raise :class:`~mmlape.utils.errors.DataError` naming the file, so the
tools report it in one line (a bad label map value would otherwise make the
loss index past its classes).
"""
import os.path as osp
from typing import Optional

import mmcv
import numpy as np
from mmcv.transforms import BaseTransform, LoadImageFromFile
from mmengine import fileio

from mmlape.registry import TRANSFORMS
from mmlape.utils.errors import DataError

__all__ = ['CheckLabelMap', 'CheckedLoadImageFromFile']


@TRANSFORMS.register_module()
class CheckedLoadImageFromFile(LoadImageFromFile):
    """``LoadImageFromFile`` that refuses a missing, empty or undecodable
    image with a :class:`~mmlape.utils.errors.DataError` naming the file.

    Takes the arguments of mmcv's ``LoadImageFromFile``; with
    ``ignore_empty=True`` an unreadable image is skipped as mmcv does.

    Example:
        >>> from mmlape.utils.errors import DataError
        >>> try:
        ...     CheckedLoadImageFromFile()(dict(img_path='/no/such.png'))
        ... except DataError as err:
        ...     print(err)
        image "/no/such.png" does not exist
    """

    def transform(self, results: dict) -> Optional[dict]:
        if self.ignore_empty or self.file_client_args is not None:
            return super().transform(results)
        filename = results['img_path']
        local = '://' not in str(filename)
        if local and not osp.isfile(filename):
            raise DataError(f'image "{filename}" does not exist')
        img_bytes = fileio.get(filename, backend_args=self.backend_args)
        if not img_bytes:
            raise DataError(f'image "{filename}" is empty')
        try:
            img = mmcv.imfrombytes(
                img_bytes, flag=self.color_type, backend=self.imdecode_backend)
        except (OSError, ValueError, SyntaxError) as err:
            # What PIL and tifffile raise for bytes that are not an image.
            raise DataError(f'image "{filename}" cannot be decoded '
                            f'({err})') from None
        if img is None:
            raise DataError(f'image "{filename}" cannot be decoded (a '
                            f'corrupt file, or not an image)')
        if self.to_float32:
            img = img.astype(np.float32)
        results['img'] = img
        results['img_shape'] = img.shape[:2]
        results['ori_shape'] = img.shape[:2]
        return results


@TRANSFORMS.register_module()
class CheckLabelMap(BaseTransform):
    """Refuse a loaded segmentation label map (``gt_seg_map``) holding a
    value that is neither a class (``0 .. num_classes - 1``) nor
    ``ignore_index``, with a :class:`~mmlape.utils.errors.DataError`
    naming the file, the values and the classes.

    The values named are the file's own (before ``reduce_zero_label``).

    Args:
        num_classes (int): The classes of the model.
        ignore_index (int): The value losses and metrics ignore.
            Defaults to 255.
        source (str, optional): Where ``num_classes`` is set, for the
            message. Defaults to ``'num_classes=<num_classes>'``.

    Example:
        >>> check = CheckLabelMap(3, source='model.num_classes=3')
        >>> seg = np.array([[0, 2], [255, 7]], dtype=np.uint8)
        >>> try:
        ...     check(dict(gt_seg_map=seg, seg_map_path='a.png'))
        ... except DataError as err:
        ...     print(err)
        label map "a.png" holds 7: the classes are 0..2 (model.num_classes=3) and 255 is ignored
    """  # noqa: E501

    def __init__(self,
                 num_classes: int,
                 ignore_index: int = 255,
                 source: Optional[str] = None) -> None:
        self.num_classes = int(num_classes)
        self.ignore_index = ignore_index
        self.source = source or f'num_classes={self.num_classes}'

    def transform(self, results: dict) -> dict:
        seg = results.get('gt_seg_map')
        if seg is None:
            return results
        seg = np.asarray(seg)
        bad = ((seg < 0) | (seg >= self.num_classes)) & \
            (seg != self.ignore_index)
        if not bad.any():
            return results
        values = np.unique(seg[bad])
        raw = bool(results.get('reduce_zero_label')) and \
            results.get('label_map') is None
        shown = ', '.join(str(int(v) + raw) for v in values[:5])
        more = f' and {len(values) - 5} more' if len(values) > 5 else ''
        n, where = self.num_classes, self.source
        if raw:
            classes = (f'with reduce_zero_label the classes are 1..{n} '
                       f'({where}), and 0 and {self.ignore_index} are '
                       f'ignored')
        else:
            classes = (f'the classes are 0..{n - 1} ({where}) and '
                       f'{self.ignore_index} is ignored')
        path = results.get('seg_map_path', '?')
        raise DataError(f'label map "{path}" holds {shown}{more}: {classes}')

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(num_classes={self.num_classes}, '
                f'ignore_index={self.ignore_index})')
