"""``dist``: ``tools/dist_train.sh CONFIG 1 --amp`` for one config of each
family (DeiT, Mask R-CNN, UperNet, Segmenter; the LaPE variants; DeiT once
more under mmengine's FlexibleRunner with DDPStrategy) for about
50 iterations on generated data (the dense-chain tests' formats and small
models with ``--tiny``), then ``tools/dist_test.sh`` on its checkpoint: does
it finish, does the loss fall."""
import glob
import json
import os
import os.path as osp
import socket
import sys
import tempfile
from typing import Dict, List

from shared import ROOT, TINY_ARCH, join_class, run_tool, write_config
from small_dense import DENSE_CONFIGS, ade_data, coco_data, model_overrides

from .common import Bench

#: The join of the dist runs' configs.
DIST_JOIN = 'LaPE'
_DEIT = dict(
    config='configs/deit/deit-tiny{}_4xb256_in1k.py',
    data='imagenet',
    metric='accuracy/top1')
#: One config per family (``{}``: the join's suffix), the generated data
#: format and the metric (``deit-flexible``: the DeiT run under mmengine's
#: FlexibleRunner with DDPStrategy, nccl on a GPU, gloo on the CPU). The
#: overrides (:func:`dist_overrides`) shorten the learning-rate warm-up so
#: that the loss can fall within the run; Segmenter's SGD gets a larger
#: learning rate for the same reason (it trains from scratch here).
DIST_FAMILIES = {
    'deit':
    _DEIT,
    'deit-flexible':
    dict(
        _DEIT,
        runner=dict(
            runner_type='FlexibleRunner', strategy=dict(type='DDPStrategy'))),
    'mask-rcnn':
    dict(
        config=DENSE_CONFIGS['mask-rcnn'], data='coco',
        metric='coco/bbox_mAP'),
    'upernet':
    dict(config=DENSE_CONFIGS['upernet'], data='ade', metric='mIoU'),
    'segmenter':
    dict(config=DENSE_CONFIGS['segmenter'], data='ade', metric='mIoU'),
}


def dist_config(family: str) -> str:
    """The config of ``family``'s run, relative to the repository root."""
    suffix = join_class(DIST_JOIN).config_suffix
    return DIST_FAMILIES[family]['config'].format(suffix)


def dist_overrides(family: str,
                   data_root: str,
                   tiny: bool,
                   iters: int,
                   cpu: bool = False) -> Dict:
    """Config entries for a short run of ``family`` on generated data
    (``cpu``: BN instead of SyncBN, which needs GPUs)."""
    workers = dict(num_workers=0 if tiny else 4, persistent_workers=not tiny)
    log = dict(logger=dict(interval=max(1, iters // 10)))  # ten a run
    warmup = [
        dict(
            type='LinearLR',
            start_factor=0.1,
            by_epoch=False,
            begin=0,
            end=max(1, iters // 5))
    ]
    if DIST_FAMILIES[family]['data'] == 'imagenet':
        loader = dict(
            batch_size=8 if tiny else 64,
            **workers,
            dataset=dict(data_root=data_root))
        over = dict(
            train_dataloader=loader,
            val_dataloader=loader,
            test_dataloader=loader,
            train_cfg=dict(max_epochs=iters, val_interval=iters),
            param_scheduler=warmup,
            default_hooks=dict(
                log, checkpoint=dict(interval=iters, max_keep_ckpts=1)))
        if tiny:
            over['model'] = dict(
                backbone=dict(arch=dict(TINY_ARCH, _delete_=True)),
                head=dict(in_channels=64))
        return dict(over, **DIST_FAMILIES[family].get('runner', {}))
    crop = 64 if tiny else 256
    if family == 'mask-rcnn':
        over = dict(
            model=dict(
                backbone=dict(init_cfg=None),
                # keep an untrained model's low-scoring detections, so that
                # COCO AP is computed (CocoMetric reports nothing without)
                test_cfg=dict(rcnn=dict(score_thr=0.0))),
            **coco_data(data_root + '/', (crop * 5 // 4, crop), workers),
            train_cfg=dict(max_epochs=1, val_interval=1),
            param_scheduler=warmup,
            default_hooks=log)
        if tiny:
            over['model'].update(model_overrides('mask-rcnn', init_cfg=None))
        if cpu:
            over['model']['backbone']['adapter_norm_cfg'] = dict(type='BN')
        return over
    model = dict(
        backbone=dict(init_cfg=None),
        data_preprocessor=dict(size=(crop, crop)),
        test_cfg=dict(
            mode='slide',
            crop_size=(crop, crop),
            stride=(crop * 2 // 3, crop * 2 // 3)))
    if tiny:
        model.update(model_overrides(family, init_cfg=None))
    if cpu and family == 'upernet':
        bn = dict(type='BN', requires_grad=True)
        model['backbone']['adapter_norm_cfg'] = dict(type='BN')
        for head in ('decode_head', 'auxiliary_head'):
            model.setdefault(head, {})['norm_cfg'] = bn
    checkpoint = dict(
        by_epoch=False, interval=iters, save_best=None, max_keep_ckpts=1)
    over = dict(
        model=model,
        **ade_data(data_root, crop, workers),
        train_cfg=dict(max_iters=iters, val_interval=iters),
        param_scheduler=warmup,
        default_hooks=dict(log, checkpoint=checkpoint))
    if family == 'segmenter':
        over['optim_wrapper'] = dict(optimizer=dict(lr=0.01))
    return over


def generate_dist_data(family: str, root: str, tiny: bool, iters: int) -> None:
    """Generated data of the dense-chain tests, enough for ``iters``."""
    from mmlape.datasets import (generate_ade20k, generate_coco_instances,
                                 generate_pos_shapes)
    kind = DIST_FAMILIES[family]['data']
    if kind == 'imagenet':
        batch = 8 if tiny else 64
        generate_pos_shapes(
            root, num_train=batch, num_val=batch, size=32 if tiny else 224)
    elif kind == 'coco':
        size = (64, 80) if tiny else (256, 320)
        generate_coco_instances(
            root, num_train=2 * iters, num_val=4, size=size)
    else:
        size = (96, 128) if tiny else (320, 384)
        generate_ade20k(root, num_train=8, num_val=4, size=size)


def scalars(work: str) -> List[float]:
    """The logged training losses of a run (mmengine's scalars.json)."""
    losses = []
    for path in sorted(
            glob.glob(osp.join(work, '*', 'vis_data', 'scalars.json'))):
        with open(path) as f:
            for line in f:
                entry = json.loads(line)
                if 'loss' in entry and 'lr' in entry:
                    losses.append(float(entry['loss']))
    return losses


def free_port() -> int:
    """A TCP port that is free now (for torchrun's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def section_dist(bench: Bench) -> None:
    """``tools/dist_train.sh CONFIG 1 --amp`` then ``dist_test.sh``."""
    root = bench.args.work_root or tempfile.mkdtemp(prefix='bench_gpu_')
    iters = 2 if bench.tiny else bench.args.dist_iters
    amp = bench.device.type == 'cuda'
    tools = osp.join(ROOT, 'tools')
    for family in bench.args.dist_families:
        spec = DIST_FAMILIES[family]
        config_file = dist_config(family)
        case = f'{family}: {osp.basename(config_file)}'
        work = osp.join(root, family)
        os.makedirs(work, exist_ok=True)
        try:
            data = osp.join(work, 'data')
            # DeiT: an epoch is one pass over the set, so `iters` epochs of
            # one batch each; the others count iterations.
            generate_dist_data(family, data, bench.tiny, iters)
            over = dist_overrides(family, data, bench.tiny, iters, not amp)
            over['randomness'] = dict(seed=0)  # a reproducible run
            config = write_config(
                osp.join(work, 'config.py'), config_file, over)
            env = dict(PYTHON=sys.executable, PORT=str(free_port()))
            train_s = run_tool([
                osp.join(tools, 'dist_train.sh'), config, '1', '--work-dir',
                work
            ] + ['--amp'] * amp, osp.join(work, 'train.log'),
                               bench.args.threads, **env)
            with open(osp.join(work, 'last_checkpoint')) as f:
                ckpt = f.read().strip()
            test_s = run_tool([
                osp.join(tools, 'dist_test.sh'), config, ckpt, '1',
                '--work-dir', work
            ], osp.join(work, 'test.log'), bench.args.threads, **env)
            with open(osp.join(work, 'test_metrics.json')) as f:
                metrics = json.load(f)
            losses = scalars(work)
            k = max(1, min(3, len(losses) // 3))
            if len(losses) >= 2:
                first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
                trend = (f'loss {first:.3f} -> {last:.3f}: '
                         f'{"falls" if last < first else "DOES NOT FALL"}')
            else:
                trend = f'{len(losses)} loss(es) logged: no trend'
            metric = metrics.get(spec['metric'], 'absent')
            if isinstance(metric, float):
                metric = f'{metric:.3g}'
            bench.add(
                'dist',
                case,
                DIST_JOIN, f'{"--amp" if amp else "no --amp (CPU)"}; {trend}; '
                f'logs in {work}',
                train=f'{len(losses)} logged, {train_s:.0f} s',
                eval=f'{spec["metric"]} {metric}, {test_s:.0f} s')
        except Exception as err:  # noqa: BLE001 -- reported in the row
            bench.failed('dist', case, DIST_JOIN, err)
