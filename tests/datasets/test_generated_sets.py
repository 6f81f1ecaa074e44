"""The generated sets at the real sets' size: ImageNet's layout and file
sizes, COCO and ADE20K on natural-image textures, read by the host
libraries' own dataset classes."""
import io
import os
import os.path as osp

import numpy as np
import pytest
from PIL import Image

from mmlape.datasets import (generate_ade20k, generate_coco_instances,
                             generate_imagenet, imagenet_wnid, natural_image)


def _jpeg_kb(array, quality=90):
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, 'JPEG', quality=quality)
    return len(buffer.getvalue()) / 1e3


def test_natural_image_compresses_like_a_photograph():
    # ImageNet's training JPEGs average about 110 KB (500x375 the most
    # common size); at quality 90 white noise of that size is larger, a
    # flat colour a few KB: the file size pins the texture's entropy.
    rng = np.random.default_rng(0)
    sizes = [_jpeg_kb(natural_image(rng, (375, 500))) for _ in range(6)]
    assert 90 < np.mean(sizes) < 130, sizes
    noise = rng.integers(0, 256, (375, 500, 3), dtype=np.uint8)
    assert _jpeg_kb(noise) > 1.4 * np.mean(sizes)
    flat = np.full((375, 500, 3), 120, np.uint8)
    assert _jpeg_kb(flat) < 0.1 * np.mean(sizes)
    again = natural_image(np.random.default_rng(0), (375, 500))
    assert np.array_equal(again,
                          natural_image(np.random.default_rng(0), (375, 500)))


def test_imagenet_layout_sizes_and_determinism(tmp_path):
    a, b = str(tmp_path / 'a'), str(tmp_path / 'b')
    assert generate_imagenet(
        a, 6, 4, num_classes=3, seed=1) == dict(
            train=6, val=4)
    generate_imagenet(b, 6, 4, num_classes=3, seed=1)
    assert sorted(os.listdir(osp.join(
        a, 'train'))) == [imagenet_wnid(i) for i in range(3)]
    train = open(osp.join(a, 'meta', 'train.txt')).read().split('\n')
    assert train[:4] == [
        'n00000000/n00000000_0.JPEG 0', 'n00000001/n00000001_0.JPEG 1',
        'n00000002/n00000002_0.JPEG 2', 'n00000000/n00000000_1.JPEG 0'
    ]
    val = open(osp.join(a, 'meta', 'val.txt')).read().split()
    assert val[:2] == ['ILSVRC2012_val_00000001.JPEG', '0']
    first = osp.join('train', 'n00000001', 'n00000001_0.JPEG')
    with open(osp.join(a, first), 'rb') as f, open(osp.join(b, first),
                                                   'rb') as g:
        assert f.read() == g.read()
    img = Image.open(osp.join(a, first))
    assert img.format == 'JPEG' and img.size == (500, 375)
    kb = [osp.getsize(osp.join(a, 'val', name)) / 1e3 for name in val[0::2]]
    assert 70 < np.mean(kb) < 150, kb
    # the same arguments again: the set is kept, not written again
    mtime = os.stat(osp.join(a, first)).st_mtime_ns
    generate_imagenet(a, 6, 4, num_classes=3, seed=1)
    assert os.stat(osp.join(a, first)).st_mtime_ns == mtime
    with pytest.raises(ValueError, match='num_classes must be in 1..1000'):
        generate_imagenet(a, 1, 1, num_classes=1001)


def test_imagenet_set_reads_through_mmpretrain(tmp_path):
    from mmpretrain.datasets import ImageNet
    root = str(tmp_path / 'imagenet')
    generate_imagenet(root, 4, 2, num_classes=2, size=(60, 80))
    for split, count in (('train', 4), ('val', 2)):
        dataset = ImageNet(
            data_root=root,
            split=split,
            pipeline=[dict(type='LoadImageFromFile')])
        assert len(dataset) == count
        item = dataset[1]
        assert item['gt_label'] == 1 and item['img'].shape == (60, 80, 3)


def test_dense_sets_on_natural_textures(tmp_path):
    from mmdet.datasets import CocoDataset
    from mmdet.utils import register_all_modules as mmdet_modules
    from mmengine.registry import DefaultScope
    from mmseg.datasets import ADE20KDataset
    from mmseg.utils import register_all_modules as mmseg_modules
    coco = str(tmp_path / 'coco')
    generate_coco_instances(
        coco,
        num_train=2,
        num_val=1,
        size=(120, 160),
        max_objects=4,
        background='natural',
        quality=90)
    mmdet_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope('mmdet'):
        dataset = CocoDataset(
            data_root=coco + '/',
            ann_file='annotations/instances_train2017.json',
            data_prefix=dict(img='train2017/'),
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations', with_bbox=True, with_mask=True)
            ])
        item = dataset[0]
    assert item['img'].shape == (120, 160, 3)
    assert len(item['gt_masks']) == len(item['gt_bboxes']) >= 1
    # the textured shapes are no flat fills: the pixels inside a mask vary
    mask = item['gt_masks'].masks[-1].astype(bool)
    assert item['img'][mask].std(axis=0).min() > 3

    ade = str(tmp_path / 'ade')
    generate_ade20k(
        ade,
        num_train=1,
        num_val=1,
        size=(96, 128),
        background='natural',
        quality=90)
    mmseg_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope('mmseg'):
        dataset = ADE20KDataset(
            data_root=ade,
            data_prefix=dict(
                img_path='images/training',
                seg_map_path='annotations/training'),
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations', reduce_zero_label=True)
            ])
        item = dataset[0]
    assert item['img'].shape == (96, 128, 3)
    labels = set(np.unique(item['gt_seg_map']).tolist())
    assert 255 in labels and len(labels) >= 2
    with pytest.raises(ValueError, match="background must be one of"):
        generate_ade20k(str(tmp_path / 'x'), 1, 1, background='photo')
