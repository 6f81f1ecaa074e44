"""The fine-tuning chain on generated data: a tiny DeiT-LaPE trained with
tools/train.py initialises ViT-Adapter Mask R-CNN (COCO format), ViT-Adapter
UperNet and Segmenter (ADE20K format), each trained with tools/train.py and
evaluated with tools/test.py. The configs are the real ones, shrunk."""
import json
import os.path as osp
import sys

import pytest
import torch
from conftest import ROOT, run_python

from mmlape.datasets import (generate_ade20k, generate_coco_instances,
                             generate_pos_shapes)

sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
from small_dense import ade_data, coco_data, model_overrides  # noqa: E402

#: The shrunk configs' runs are seeded (mmengine draws a seed otherwise).
SEED = dict(randomness=dict(seed=0))

#: The tools' checkpoints are read here with a plain torch.load, as in a
#: tool's process (its allow-list).
pytestmark = pytest.mark.usefixtures('hosts_applied')


@pytest.fixture(scope='module')
def lape_checkpoint(tmp_path_factory):
    """A tiny DeiT-LaPE (patch 16) from the demo config via tools/train."""
    tmp = tmp_path_factory.mktemp('deit')
    data = str(tmp / 'data')
    generate_pos_shapes(data, num_train=16, num_val=8, size=64, seed=2)
    options = [
        f'{s}_dataloader.dataset.data_root={data}'
        for s in ('train', 'val', 'test')
    ] + [
        'model.backbone.img_size=64', 'model.backbone.patch_size=16',
        'train_cfg.max_iters=2', 'train_cfg.val_interval=2',
        'default_hooks.checkpoint.interval=2', 'param_scheduler.0.end=1',
        'param_scheduler.1.begin=1', 'param_scheduler.1.end=2',
        'train_dataloader.batch_size=8'
    ]
    run_python([
        'tools/train.py', 'configs/demo/deit-demo-lape_pos-shapes.py',
        '--work-dir',
        str(tmp / 'work'), '--cfg-options'
    ] + options)
    ckpt = str(tmp / 'work' / 'iter_2.pth')
    assert 'backbone.blocks.3.pe_norm.weight' in torch.load(ckpt)['state_dict']
    return ckpt


def shrunk(tmp, base, **overrides):
    """A config inheriting ``base`` with ``name = value`` overrides."""
    lines = [f'_base_ = {osp.join(ROOT, base)!r}']
    lines += [f'{name} = {value!r}' for name, value in overrides.items()]
    path = tmp / 'config.py'
    path.write_text('\n'.join(lines) + '\n')
    return str(path)


def train_and_test(config, tmp):
    work = str(tmp / 'work')
    log = run_python(['tools/train.py', config, '--work-dir', work])
    with open(osp.join(work, 'last_checkpoint')) as f:
        ckpt = f.read().strip()
    run_python(['tools/test.py', config, ckpt, '--work-dir', work])
    with open(osp.join(work, 'test_metrics.json')) as f:
        return json.load(f), log


def run_tta(config, tmp):
    """``tools/test.py --tta --amp`` on the checkpoint ``train_and_test``
    left: the metrics, and the model and test loop the run was built
    with (its dumped config)."""
    work = str(tmp / 'work')
    with open(osp.join(work, 'last_checkpoint')) as f:
        ckpt = f.read().strip()
    run_python(
        ['tools/test.py', config, ckpt, '--work-dir', work, '--tta', '--amp'])
    with open(osp.join(work, 'test_metrics.json')) as f:
        metrics = json.load(f)
    from mmengine.config import Config
    dumped = Config.fromfile(osp.join(work, osp.basename(config)))
    assert dumped.test_cfg.fp16 is True  # autocast (bf16 on the CPU)
    return metrics, dumped


def adapter(family, ckpt):
    """The small ViT-Adapter model of ``family``, BN in the adapter,
    initialised from ``ckpt``."""
    return model_overrides(
        family,
        img_size=64,
        adapter_norm_cfg=dict(type='BN'),
        init_cfg=dict(checkpoint=ckpt))


def assert_initialised_from(log, ckpt):
    assert 'Loaded' in log and ckpt in log, 'backbone not initialised'


@pytest.mark.slow
def test_mask_rcnn_vit_adapter_lape(lape_checkpoint, tmp_path):
    data = str(tmp_path / 'coco') + '/'
    generate_coco_instances(data, num_train=4, num_val=1, size=(128, 160))
    config = shrunk(
        tmp_path,
        'configs/vit_adapter/mask-rcnn_vit-adapter-tiny-lape_fpn_3x_coco.py',
        model=dict(
            adapter('mask-rcnn', lape_checkpoint),
            # an untrained model scores low: keep its detections, so that
            # COCO AP is computed (CocoMetric reports nothing without any)
            test_cfg=dict(rcnn=dict(score_thr=0.0))),
        **coco_data(data, (160, 128)),
        train_cfg=dict(max_epochs=1, val_interval=1),
        param_scheduler=[
            dict(
                type='LinearLR',
                start_factor=0.1,
                by_epoch=False,
                begin=0,
                end=1)
        ],
        # compiled as on a GPU, regionally (tracing only: eager backend)
        compile=dict(backend='eager'),
        **SEED)
    metrics, log = train_and_test(config, tmp_path)
    assert_initialised_from(log, lape_checkpoint)
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        assert key in metrics and -1 <= metrics[key] <= 1
    metrics, dumped = run_tta(config, tmp_path)
    assert dumped.model.type == 'InstanceSegTTAModel'  # masks carried
    flips = dumped.test_dataloader.dataset.pipeline[-1]
    assert flips.type == 'TestTimeAug' and len(flips.transforms[0]) == 2
    for key in ('coco/bbox_mAP', 'coco/segm_mAP'):
        assert key in metrics and -1 <= metrics[key] <= 1
    assert ('torch.compile (backend=eager): each of the 4 encoder blocks '
            '(TransformerBlock; regional)') in log
    assert 'graph(s) compiled at train iter 1' in log
    assert 'graph(s) compiled during validation' in log


def ade(data):
    return dict(
        **ade_data(data, 64),
        train_cfg=dict(max_iters=2, val_interval=2),
        default_hooks=dict(
            checkpoint=dict(interval=2, save_best=None),
            logger=dict(interval=1)),
        param_scheduler=[
            dict(
                type='LinearLR',
                start_factor=0.1,
                by_epoch=False,
                begin=0,
                end=2)
        ],
        **SEED)


SLIDE = dict(mode='slide', crop_size=(64, 64), stride=(48, 48))


@pytest.mark.slow
def test_upernet_vit_adapter_lape(lape_checkpoint, tmp_path):
    data = str(tmp_path / 'ade')
    generate_ade20k(data, num_train=4, num_val=1, size=(96, 128))
    config = shrunk(
        tmp_path, 'configs/vit_adapter/upernet_vit-adapter-tiny-lape_'
        '8xb2-160k_ade20k-512x512.py',
        model=dict(
            adapter('upernet', lape_checkpoint),
            data_preprocessor=dict(size=(64, 64)),
            test_cfg=SLIDE),
        **ade(data))
    metrics, log = train_and_test(config, tmp_path)
    assert_initialised_from(log, lape_checkpoint)
    assert 'mIoU' in metrics and 0 <= metrics['mIoU'] <= 100
    metrics, dumped = run_tta(config, tmp_path)
    assert dumped.model.type == 'SegTTAModel'
    views = dumped.test_dataloader.dataset.pipeline[1].transforms
    assert [t.scale_factor
            for t in views[0]] == [0.5, 0.75, 1.0, 1.25, 1.5,
                                   1.75]  # mmseg's ADE20K
    assert views[1] == [dict(type='ResizeToMultiple', size_divisor=32)]
    assert 'mIoU' in metrics and 0 <= metrics['mIoU'] <= 100


@pytest.mark.slow
def test_segmenter_lape(lape_checkpoint, tmp_path):
    data = str(tmp_path / 'ade')
    generate_ade20k(data, num_train=4, num_val=1, size=(96, 128))
    config = shrunk(
        tmp_path, 'configs/segmenter/segmenter_vit-tiny-lape_mask_'
        '8xb1-160k_ade20k-512x512.py',
        model=dict(
            model_overrides(
                'segmenter',
                img_size=64,
                init_cfg=dict(checkpoint=lape_checkpoint)),
            data_preprocessor=dict(size=(64, 64)),
            test_cfg=SLIDE),
        **ade(data))
    metrics, log = train_and_test(config, tmp_path)
    assert_initialised_from(log, lape_checkpoint)
    assert 'mIoU' in metrics and 0 <= metrics['mIoU'] <= 100
    metrics, dumped = run_tta(config, tmp_path)
    assert dumped.model.type == 'SegTTAModel'
    scales = dumped.test_dataloader.dataset.pipeline[1].transforms[0]
    assert [t.scale_factor
            for t in scales] == [0.5, 0.75, 1.0, 1.25, 1.5,
                                 1.75]  # mmseg's ADE20K ratios
    assert 'mIoU' in metrics and 0 <= metrics['mIoU'] <= 100
