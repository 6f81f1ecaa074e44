"""Bad labels stop a run with one line naming the file, the line (or
annotation) and the allowed range, before training: ImageNet-style
annotation files (a label outside the classes, not an integer, missing),
COCO annotations (a category the file does not have, a label past the
model's classes, a class the file does not name) and ADE20K label maps
(values past the classes; 0 and 255 stay ignored), all read through the
real generated formats."""
import json
import os.path as osp
import shutil
import sys

import numpy as np
import pytest
from conftest import DEMO, ROOT, one_line_error, tool_options
from mmengine.config import Config
from PIL import Image

import mmlape  # noqa: F401
from mmlape.datasets import generate_ade20k, generate_coco_instances

sys.path.insert(0, ROOT)
from tools import train  # noqa: E402

sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
from small_dense import ade_data, coco_data, model_overrides  # noqa: E402

MASK_RCNN = ('configs/vit_adapter/mask-rcnn_vit-adapter-tiny-lape_fpn_3x_'
             'coco.py')
SEGMENTER = ('configs/segmenter/segmenter_vit-tiny-lape_mask_8xb1-160k_'
             'ade20k-512x512.py')


@pytest.fixture
def relabelled(pos_shapes_data, tmp_path):
    """A copy of the demo data whose train.txt line ``number`` is
    ``line``."""

    def make(number, line):
        root = tmp_path / 'data'
        shutil.copytree(pos_shapes_data, root)
        ann = root / 'meta' / 'train.txt'
        lines = ann.read_text().splitlines()
        lines[number - 1] = line(lines[number - 1].rsplit(' ', 1)[0])
        ann.write_text('\n'.join(lines) + '\n')
        return str(root)

    return make


@pytest.mark.parametrize(
    'line, expect', [
        (lambda name: f'{name} 7', 'label 7 is outside 0..3 '
         '(model.head.num_classes=4)'),
        (lambda name: f'{name} -1', 'label -1 is outside 0..3'),
        (lambda name: f'{name} zero', "label 'zero' is not an integer in 0..3 "
         '(model.head.num_classes=4)'),
        (lambda name: name, 'no label after the file name in "'),
    ],
    ids=['7', '-1', 'zero', 'none'])
def test_bad_imagenet_style_label_is_one_line(line, expect, relabelled,
                                              tmp_path, capsys):
    root = relabelled(3, line)
    work = tmp_path / 'work'
    line = one_line_error(
        train.main, [DEMO, '--work-dir', str(work)] +
        tool_options(root, 1, f'train_dataloader.dataset.data_root={root}'),
        capsys)
    assert line.startswith(f'error: annotation file "{root}/meta/train.txt" '
                           f'line 3: {expect}'), line
    assert not list(work.glob('iter_*'))


def test_the_file_the_host_dataset_reads_is_checked(relabelled):
    """mmpretrain's ``ImageNet`` with a ``split`` and no ``ann_file`` reads
    ``meta/<split>.txt``: the check reads the file the host's dataset
    says, not the folders of ``data_root``."""
    from mmlape.datasets.labels import check_dataset_labels
    from mmlape.utils.errors import DataError
    root = relabelled(3, lambda name: f'{name} 7')
    cfg = Config.fromfile(osp.join(ROOT, DEMO))
    cfg.train_dataloader.dataset = dict(
        type='ImageNet', data_root=root, split='train', pipeline=[])
    with pytest.raises(DataError) as info:
        check_dataset_labels(cfg, ('train', ))
    assert str(info.value) == (
        f'annotation file "{root}/meta/train.txt" line 3: label 7 is '
        f'outside 0..3 (model.head.num_classes=4)')


def test_more_class_folders_than_classes(tmp_path):
    """A folder per class and no annotation file: the class folders that
    mmpretrain finds, no more than the model's classes."""
    from mmlape.datasets.labels import check_dataset_labels
    from mmlape.utils.errors import DataError
    cfg = Config.fromfile(osp.join(ROOT, DEMO))
    cfg.train_dataloader.dataset = dict(
        type='CustomDataset',
        data_root=str(tmp_path),
        data_prefix='train',
        pipeline=[])
    for label in range(4):
        (tmp_path / 'train' / f'class{label}').mkdir(parents=True)
    check_dataset_labels(cfg, ('train', ))
    (tmp_path / 'train' / 'class4').mkdir()
    with pytest.raises(DataError) as info:
        check_dataset_labels(cfg, ('train', ))
    assert str(info.value) == (
        f'data folder "{tmp_path}/train" has 5 class folders, labels 0..4, '
        f'outside 0..3 (model.head.num_classes=4)')


# ----------------------------------------------------------------------
# COCO


@pytest.fixture(scope='module')
def coco(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('coco')) + '/'
    generate_coco_instances(root, num_train=2, num_val=1, size=(64, 80))
    return root


def _coco_config(data, tmp_path, **changes):
    """The real Mask R-CNN config on ``data``; ``changes`` edits the train
    annotation file (a copy)."""
    ann = osp.join(data, 'annotations', 'instances_train2017.json')
    with open(ann) as f:
        content = json.load(f)
    for key, edit in changes.items():
        edit(content)
    copy = tmp_path / 'train.json'
    copy.write_text(json.dumps(content))
    cfg = Config.fromfile(osp.join(ROOT, MASK_RCNN))
    cfg.merge_from_dict(coco_data(data, (80, 64)))
    cfg.train_dataloader.dataset.ann_file = str(copy)
    return cfg, str(copy)


def test_coco_category_that_the_file_lacks(coco, tmp_path):
    from mmlape.datasets.labels import check_dataset_labels
    from mmlape.utils.errors import DataError

    def dangling(content):
        content['annotations'][0]['category_id'] = 99

    cfg, ann = _coco_config(coco, tmp_path, edit=dangling)
    first = json.load(open(ann))['annotations'][0]
    with pytest.raises(DataError) as info:
        check_dataset_labels(cfg, ('train', ))
    assert str(info.value) == (
        f'annotation file "{ann}": annotation {first["id"]} (image '
        f'{first["image_id"]}) has category_id 99, which is not one of the '
        f"file's categories (ids 1..90)")
    check_dataset_labels(cfg, ('val', ))  # the val file is right


def test_coco_label_past_the_model_classes_and_missing_class_names(
        coco, tmp_path):
    from mmlape.datasets.labels import check_dataset_labels
    from mmlape.utils.errors import DataError
    cfg, ann = _coco_config(coco, tmp_path)
    check_dataset_labels(cfg, ('train', ))
    # a model of 2 classes: the generated cars (category 3) are label 2
    cfg.model.roi_head.bbox_head.num_classes = 2
    with pytest.raises(
            DataError,
            match=r'has category_id 3 \("car"\), label '
            r'2, outside 0..1 \(model.roi_head.bbox_head.'
            r'num_classes=2\)'):
        check_dataset_labels(cfg, ('train', ))
    cfg.model.roi_head.bbox_head.num_classes = 80
    cfg.train_dataloader.dataset.metainfo = dict(
        classes=('person', 'unicorn', 'car'))
    with pytest.raises(
            DataError,
            match=r"the dataset's classes \['unicorn'\] "
            r'are not categories of the file'):
        check_dataset_labels(cfg, ('train', ))


def test_coco_category_that_the_file_lacks_stops_the_tool(
        coco, tmp_path, capsys):
    """mmdet skips such an annotation without a word (a box lost)."""

    def dangling(content):
        content['annotations'][0]['category_id'] = 99

    _, ann = _coco_config(coco, tmp_path, edit=dangling)
    config = tmp_path / 'config.py'
    config.write_text(f'_base_ = {osp.join(ROOT, MASK_RCNN)!r}\n'
                      f'train_dataloader = dict(dataset=dict(ann_file='
                      f'{ann!r}, data_root={coco!r}))\n'
                      f'val_dataloader = dict(dataset=dict(data_root='
                      f'{coco!r}))\n'
                      f'val_evaluator = dict(ann_file={coco!r} + '
                      f"'annotations/instances_val2017.json')\n"
                      f'test_dataloader = val_dataloader\n'
                      f'test_evaluator = val_evaluator\n')
    line = one_line_error(train.main,
                          [str(config), '--work-dir',
                           str(tmp_path / 'work')], capsys)
    assert line.startswith(f'error: annotation file "{ann}": annotation ')
    assert 'has category_id 99' in line


# ----------------------------------------------------------------------
# ADE20K label maps


def test_label_map_past_the_classes_is_one_line(tmp_path, capsys):
    data = str(tmp_path / 'ade')
    generate_ade20k(data, num_train=2, num_val=1, size=(48, 64))
    maps = sorted(
        osp.join(data, 'annotations', 'training', n)
        for n in ('ADE_train_00000000.png', 'ADE_train_00000001.png'))
    for path in maps:  # a value past the 150 classes, and the ignored ones
        seg = np.array(Image.open(path))
        seg[0, :3] = (0, 255, 200)
        Image.fromarray(seg).save(path)
    config = tmp_path / 'config.py'
    overrides = dict(
        model=dict(
            model_overrides('segmenter', img_size=32, init_cfg=None),
            data_preprocessor=dict(size=(32, 32))),
        **ade_data(data, 32),
        train_cfg=dict(max_iters=1, val_interval=1),
        param_scheduler=[dict(type='ConstantLR', factor=1.0, by_epoch=False)])
    config.write_text(f'_base_ = {osp.join(ROOT, SEGMENTER)!r}\n' +
                      ''.join(f'{k} = {v!r}\n' for k, v in overrides.items()))
    line = one_line_error(train.main,
                          [str(config), '--work-dir',
                           str(tmp_path / 'work')], capsys)
    assert line.startswith('error: label map "')
    path = line.split('"')[1]
    assert path in maps
    assert line.endswith('" holds 200: with reduce_zero_label the classes '
                         'are 1..150 (model.decode_head.num_classes=150), '
                         'and 0 and 255 are ignored')


def test_label_maps_are_checked_after_every_loading():
    from mmlape.datasets.labels import use_checked_label_maps
    cfg = Config.fromfile(osp.join(ROOT, SEGMENTER))
    assert use_checked_label_maps(cfg, ('train', 'val', 'test')) == 3
    pipeline = cfg.train_dataloader.dataset.pipeline
    kinds = [step['type'] for step in pipeline]
    at = kinds.index('LoadAnnotations')
    assert pipeline[at + 1] == dict(
        type='mmlape.CheckLabelMap',
        num_classes=150,
        ignore_index=255,
        source='model.decode_head.num_classes=150')
    # again (a pipeline shared by two loaders): still one check each
    assert use_checked_label_maps(cfg, ('train', )) == 1
    kinds = [step['type'] for step in cfg.train_dataloader.dataset.pipeline]
    assert kinds.count('mmlape.CheckLabelMap') == 1
