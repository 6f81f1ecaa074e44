"""A generated image set at ImageNet's size, in ImageNet's layout.

The images are :func:`~mmlape.datasets.texture.natural_image` textures,
500x375 JPEGs at quality 90 (about ImageNet's average file), so loading
costs what ImageNet's does; each class has its own tint.

References:
    The ILSVRC-2012 layout mmpretrain's ``ImageNet`` reads
    (``train/{wnid}/*.JPEG``, ``val/*.JPEG``, ``meta/{train,val}.txt``).
"""
import json
import os
import os.path as osp
from typing import Dict, Tuple

import numpy as np
from PIL import Image

from .texture import natural_image

__all__ = ['generate_imagenet', 'imagenet_wnid']

_VERSION = 1


def imagenet_wnid(label: int) -> str:
    """The folder name (a WordNet-id-like ``n`` and eight digits) of a
    generated class.

    Example:
        >>> imagenet_wnid(7)
        'n00000007'
    """
    return f'n{label:08d}'


def _image(rng: np.random.Generator, label: int, size: Tuple[int, int],
           num_classes: int) -> Image.Image:
    img = natural_image(rng, size).astype(np.int16)
    tint = np.array([label, label * 7, label * 13]) % num_classes
    img += (tint * 40 // max(1, num_classes - 1) - 20).astype(np.int16)
    return Image.fromarray(img.clip(0, 255).astype(np.uint8))


def generate_imagenet(root: str,
                      num_train: int = 100,
                      num_val: int = 20,
                      num_classes: int = 10,
                      size: Tuple[int, int] = (375, 500),
                      quality: int = 90,
                      seed: int = 0) -> Dict[str, int]:
    """Write an ImageNet-layout set of JPEGs under ``root``.

    Training images go to the classes in turn. An existing set made with the
    same arguments (``meta/spec.json``) is kept as it is.

    Args:
        root (str): Output folder.
        num_train (int): Training images. Defaults to 100.
        num_val (int): Validation images. Defaults to 20.
        num_classes (int): Classes (at most 1000, ImageNet's). Defaults to
            10.
        size (tuple[int, int]): Image ``(height, width)``. Defaults to
            (375, 500).
        quality (int): JPEG quality. Defaults to 90.
        seed (int): Seed. Defaults to 0.

    Returns:
        dict: Images per split.

    Example:
        >>> import tempfile
        >>> generate_imagenet(tempfile.mkdtemp(), 4, 2, num_classes=2)
        {'train': 4, 'val': 2}
    """
    if not 1 <= num_classes <= 1000:
        raise ValueError(f'num_classes must be in 1..1000, got {num_classes}')
    spec = dict(
        version=_VERSION,
        num_train=num_train,
        num_val=num_val,
        num_classes=num_classes,
        size=list(size),
        quality=quality,
        seed=seed)
    counts = dict(train=num_train, val=num_val)
    stamp = osp.join(root, 'meta', 'spec.json')
    if osp.isfile(stamp):
        with open(stamp) as f:
            if json.load(f) == spec:
                return counts
    os.makedirs(osp.join(root, 'meta'), exist_ok=True)
    for offset, (split, count) in enumerate(counts.items()):
        rng = np.random.default_rng([seed, offset])
        lines = []
        for i in range(count):
            label = i % num_classes
            if split == 'train':
                wnid = imagenet_wnid(label)
                name = f'{wnid}/{wnid}_{i // num_classes}.JPEG'
            else:
                name = f'ILSVRC2012_val_{i + 1:08d}.JPEG'
            path = osp.join(root, split, name)
            os.makedirs(osp.dirname(path), exist_ok=True)
            _image(rng, label, size, num_classes).save(
                path, 'JPEG', quality=quality)
            lines.append(f'{name} {label}\n')
        with open(osp.join(root, 'meta', f'{split}.txt'), 'w') as f:
            f.writelines(lines)
    with open(stamp, 'w') as f:
        json.dump(spec, f)
    return counts
