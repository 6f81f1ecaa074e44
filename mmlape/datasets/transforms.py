"""Image loading that names the file it cannot read.

References:
    mmcv's ``LoadImageFromFile`` (read through mmengine's file backends,
    decode with ``mmcv.imfrombytes``).

:class:`CheckedLoadImageFromFile` behaves as mmcv's on good images and
raises :class:`~mmlape.utils.errors.DataError` naming the file otherwise
(mmcv raises whatever the backend or decoder raises), so the tools report
it in one line.
"""
import os.path as osp
from typing import Optional

import mmcv
import numpy as np
from mmcv.transforms import LoadImageFromFile
from mmengine import fileio

from mmlape.registry import TRANSFORMS
from mmlape.utils.errors import DataError

__all__ = ['CheckedLoadImageFromFile']


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
