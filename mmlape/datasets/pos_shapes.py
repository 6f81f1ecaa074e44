"""A small image classification set where position decides the class.

Every image shows a random square on noise; the class is its quadrant, so
a Transformer without position information is at chance. Deterministic in
the seed, in the ImageNet folder layout mmpretrain reads.
"""
import json
import os
import os.path as osp
from typing import Dict

import numpy as np
from PIL import Image

__all__ = ['CLASSES', 'generate_pos_shapes']

CLASSES = ('top_left', 'top_right', 'bottom_left', 'bottom_right')
_VERSION = 3


def _draw(rng: np.random.Generator, label: int, size: int) -> np.ndarray:
    img = rng.normal(110, 25, (size, size, 3))
    r = int(rng.integers(max(2, size // 16), max(3, size // 8) + 1))
    half = size // 2
    row, col = divmod(label, 2)
    sy = rng.integers(row * half + r, (row + 1) * half - r)
    sx = rng.integers(col * half + r, (col + 1) * half - r)
    img[sy - r:sy + r + 1, sx - r:sx + r + 1] = rng.integers(0, 256, 3)
    return np.clip(img, 0, 255).astype(np.uint8)


def generate_pos_shapes(root: str,
                        num_train: int = 4000,
                        num_val: int = 400,
                        size: int = 32,
                        seed: int = 0) -> Dict[str, int]:
    """Write the set in the ImageNet folder layout under ``root``.

    ``root/{train,val}/{class}/{index}.png`` plus ``root/meta/{split}.txt``
    (``class/index.png label`` lines). An existing set made with the same
    arguments is kept as it is.

    Args:
        root (str): Output folder.
        num_train (int): Training images. Defaults to 4000.
        num_val (int): Validation images. Defaults to 400.
        size (int): Image side in pixels. Defaults to 32.
        seed (int): Seed; the set is a pure function of the arguments.
            Defaults to 0.

    Returns:
        dict: Images per split.

    Example:
        >>> generate_pos_shapes('data/pos_shapes', 40, 8)
        {'train': 40, 'val': 8}
    """
    spec = dict(
        version=_VERSION,
        num_train=num_train,
        num_val=num_val,
        size=size,
        seed=seed,
        classes=list(CLASSES))
    stamp = osp.join(root, 'meta', 'spec.json')
    counts = dict(train=num_train, val=num_val)
    if osp.isfile(stamp):
        with open(stamp) as f:
            if json.load(f) == spec:
                return counts
    for split, count in counts.items():
        rng = np.random.default_rng([seed, 0 if split == 'train' else 1])
        lines = []
        for cls in CLASSES:
            os.makedirs(osp.join(root, split, cls), exist_ok=True)
        for i in range(count):
            label = i % len(CLASSES)
            name = f'{CLASSES[label]}/{i:05d}.png'
            Image.fromarray(_draw(rng, label,
                                  size)).save(osp.join(root, split, name))
            lines.append(f'{name} {label}')
        os.makedirs(osp.join(root, 'meta'), exist_ok=True)
        with open(osp.join(root, 'meta', f'{split}.txt'), 'w') as f:
            f.write('\n'.join(lines) + '\n')
    with open(stamp, 'w') as f:
        json.dump(spec, f)
    return counts
