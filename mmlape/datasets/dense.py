"""Generated datasets in the COCO instance and ADE20K formats, tiny or at
the real sets' size.

The images are coloured shapes on noise (learnable structure for detectors
and segmenters), deterministic in the seed; ``background='natural'`` draws
them on a :func:`~mmlape.datasets.texture.natural_image`, for JPEGs that
cost what photographs cost to decode.

References:
    The layouts mmdet's ``CocoDataset`` and mmseg's ``ADE20KDataset`` read.
"""
import json
import math
import os
import os.path as osp
from typing import Dict, List, Tuple

import numpy as np
from PIL import Image, ImageDraw

from .texture import natural_image

__all__ = ['COCO_CLASSES', 'generate_coco_instances', 'generate_ade20k']

#: Categories the generated COCO set draws (ids and names of real COCO
#: classes, so that the unchanged 80-class configs and metrics apply).
COCO_CLASSES = ((1, 'person'), (2, 'bicycle'), (3, 'car'))
#: The 80 COCO category ids (1..90 with the official gaps).
COCO_IDS = (
    list(range(1, 12)) + list(range(13, 26)) + [27, 28] + list(range(31, 45)) +
    list(range(46, 66)) + [67, 70] + list(range(72, 83)) + list(range(84, 91)))


def _coco_categories() -> List[dict]:
    """All 80 COCO categories, as in the official annotation files."""
    from mmdet.datasets import CocoDataset
    names = CocoDataset.METAINFO['classes']
    assert len(names) == len(COCO_IDS) == 80
    return [
        dict(id=i, name=n, supercategory='thing')
        for i, n in zip(COCO_IDS, names)
    ]


_SPLITS = (('train2017', 0), ('val2017', 1))


def _polygon(rng: np.random.Generator, kind: int,
             size: Tuple[int, int]) -> List[Tuple[float, float]]:
    h, w = size
    s = rng.uniform(0.15, 0.35) * min(h, w)
    cx = rng.uniform(s / 2 + 1, w - s / 2 - 1)
    cy = rng.uniform(s / 2 + 1, h - s / 2 - 1)
    r = s / 2
    if kind == 0:  # box
        pts = [(-r, -r), (r, -r), (r, r), (-r, r)]
    elif kind == 1:  # triangle
        pts = [(0, -r), (r, r), (-r, r)]
    else:  # diamond
        pts = [(0, -r), (r, 0), (0, r), (-r, 0)]
    angle = rng.uniform(0, math.pi / 6)
    c, si = math.cos(angle), math.sin(angle)
    return [(cx + x * c - y * si, cy + x * si + y * c) for x, y in pts]


#: What the shapes are drawn on: Gaussian noise with flat shapes, or a
#: natural-image texture with textured shapes.
BACKGROUNDS = ('noise', 'natural')


class _Canvas:
    """An image to draw filled polygons on (see :data:`BACKGROUNDS`)."""

    def __init__(self, rng: np.random.Generator, size: Tuple[int, int],
                 background: str):
        if background not in BACKGROUNDS:
            raise ValueError(f'background must be one of {BACKGROUNDS}, '
                             f'got {background!r}')
        if background == 'noise':
            noise = rng.normal(120, 20, (*size, 3)).clip(0, 255)
            self.image = Image.fromarray(noise.astype(np.uint8))
            self.texture = None
        else:
            self.image = Image.fromarray(natural_image(rng, size))
            # the shapes' own texture, tinted by each shape's colour
            self.texture = natural_image(rng, size, contrast=(15.0, 25.0))
        self._draw = ImageDraw.Draw(self.image)

    def polygon(self, poly: List[Tuple[float, float]],
                colour: Tuple[int, int, int]) -> None:
        if self.texture is None:
            self._draw.polygon(poly, fill=colour)
            return
        mask = Image.new('L', self.image.size, 0)
        ImageDraw.Draw(mask).polygon(poly, fill=255)
        fill = self.texture.astype(np.int16) - 120 + np.array(colour)
        self.image.paste(
            Image.fromarray(fill.clip(0, 255).astype(np.uint8)), mask=mask)


def generate_coco_instances(root: str,
                            num_train: int = 8,
                            num_val: int = 4,
                            size: Tuple[int, int] = (128, 160),
                            max_objects: int = 3,
                            seed: int = 0,
                            background: str = 'noise',
                            quality: int = 95) -> Dict[str, int]:
    """Write a COCO-format instance set under ``root``.

    ``root/annotations/instances_{train,val}2017.json`` and
    ``root/{train,val}2017/*.jpg``, the layout of mmdet's COCO configs. The
    files declare all 80 COCO categories; the images show three of them.

    Args:
        root (str): Output folder.
        num_train (int): Training images. Defaults to 8.
        num_val (int): Validation images. Defaults to 4.
        size (tuple): Image ``(height, width)``. Defaults to (128, 160).
        max_objects (int): Objects per image (at least 1). Defaults to 3.
        seed (int): Seed. Defaults to 0.
        background (str): One of :data:`BACKGROUNDS`. Defaults to 'noise'.
        quality (int): JPEG quality. Defaults to 95.

    Returns:
        dict: Images per split.
    """
    counts = {'train2017': num_train, 'val2017': num_val}
    os.makedirs(osp.join(root, 'annotations'), exist_ok=True)
    categories = _coco_categories()
    for split, offset in _SPLITS:
        rng = np.random.default_rng([seed, offset])
        os.makedirs(osp.join(root, split), exist_ok=True)
        images, anns = [], []
        for i in range(counts[split]):
            canvas = _Canvas(rng, size, background)
            name = f'{i:012d}.jpg'
            for _ in range(int(rng.integers(1, max_objects + 1))):
                kind = int(rng.integers(0, len(COCO_CLASSES)))
                poly = _polygon(rng, kind, size)
                colour = tuple(int(v) for v in rng.integers(0, 256, 3))
                canvas.polygon(poly, colour)
                xs, ys = [p[0] for p in poly], [p[1] for p in poly]
                x0, y0 = min(xs), min(ys)
                bw, bh = max(xs) - x0, max(ys) - y0
                area = 0.5 * abs(
                    sum(xs[k] * ys[k - 1] - xs[k - 1] * ys[k]
                        for k in range(len(xs))))
                anns.append(
                    dict(
                        id=len(anns) + 1,
                        image_id=i + 1,
                        category_id=COCO_CLASSES[kind][0],
                        segmentation=[[round(v, 2) for p in poly for v in p]],
                        bbox=[round(v, 2) for v in (x0, y0, bw, bh)],
                        area=round(area, 2),
                        iscrowd=0))
            canvas.image.save(osp.join(root, split, name), quality=quality)
            images.append(
                dict(id=i + 1, file_name=name, height=size[0], width=size[1]))
        with open(
                osp.join(root, 'annotations', f'instances_{split}.json'),
                'w') as f:
            json.dump(
                dict(images=images, annotations=anns, categories=categories),
                f)
    return {'train': num_train, 'val': num_val}


def generate_ade20k(root: str,
                    num_train: int = 8,
                    num_val: int = 4,
                    size: Tuple[int, int] = (128, 160),
                    num_classes: int = 150,
                    seed: int = 0,
                    background: str = 'noise',
                    quality: int = 95) -> Dict[str, int]:
    """Write an ADE20K-format semantic segmentation set under ``root``.

    ``root/images/{training,validation}/ADE_*.jpg`` with label maps
    ``root/annotations/{training,validation}/ADE_*.png``: 0 is "other"
    (ignored with ``reduce_zero_label``), shapes carry labels 1..num_classes.

    Args:
        root (str): Output folder.
        num_train (int): Training images. Defaults to 8.
        num_val (int): Validation images. Defaults to 4.
        size (tuple): Image ``(height, width)``. Defaults to (128, 160).
        num_classes (int): Classes of the set (the shapes use up to 8).
            Defaults to 150.
        seed (int): Seed. Defaults to 0.
        background (str): One of :data:`BACKGROUNDS`. Defaults to 'noise'.
        quality (int): JPEG quality. Defaults to 95.

    Returns:
        dict: Images per split.
    """
    counts = {'training': num_train, 'validation': num_val}
    for offset, (split, count) in enumerate(counts.items()):
        rng = np.random.default_rng([seed, 10 + offset])
        for sub in ('images', 'annotations'):
            os.makedirs(osp.join(root, sub, split), exist_ok=True)
        for i in range(count):
            canvas = _Canvas(rng, size, background)
            label = Image.new('L', (size[1], size[0]), 0)
            draw_lbl = ImageDraw.Draw(label)
            for _ in range(int(rng.integers(2, 5))):
                cls = int(rng.integers(1, min(num_classes, 8) + 1))
                poly = _polygon(rng, cls % 3, size)
                colour = tuple(
                    int(v)
                    for v in (cls * 37 % 256, cls * 91 % 256, cls * 53 % 256))
                canvas.polygon(poly, colour)
                draw_lbl.polygon(poly, fill=cls)
            stem = f'ADE_{split[:5]}_{i:08d}'
            canvas.image.save(
                osp.join(root, 'images', split, stem + '.jpg'),
                quality=quality)
            label.save(osp.join(root, 'annotations', split, stem + '.png'))
    return {'train': num_train, 'val': num_val}
