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
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

from small_dense import ade_data, coco_data, model_overrides

from .common import ROOT, TINY_ARCH, Bench, join_class
from .dense import CONFIGS

#: The join of the dist runs' configs.
DIST_JOIN = 'LaPE'
#: One config per family (``{}``: the join's suffix), the generated data
#: format and the metric. The overrides (:func:`dist_overrides`) shorten the
#: learning-rate warm-up so that the loss can fall within the run;
#: Segmenter's SGD gets a larger learning rate for the same reason (it
#: trains from scratch here).
DIST_FAMILIES = {
    'deit':
    dict(
        config='configs/deit/deit-tiny{}_4xb256_in1k.py',
        data='imagenet',
        metric='accuracy/top1'),
    # the same run under mmengine's FlexibleRunner with DDPStrategy (nccl
    # on a GPU, gloo on the CPU)
    'deit-flexible':
    dict(
        config='configs/deit/deit-tiny{}_4xb256_in1k.py',
        data='imagenet',
        metric='accuracy/top1',
        runner=dict(
            runner_type='FlexibleRunner', strategy=dict(type='DDPStrategy'))),
    'mask-rcnn':
    dict(
        config='configs/' + CONFIGS['mask-rcnn'],
        data='coco',
        metric='coco/bbox_mAP'),
    'upernet':
    dict(config='configs/' + CONFIGS['upernet'], data='ade', metric='mIoU'),
    'segmenter':
    dict(config='configs/' + CONFIGS['segmenter'], data='ade', metric='mIoU'),
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
    log_every = max(1, iters // 10)  # about ten logged losses per run
    warmup = [
        dict(
            type='LinearLR',
            start_factor=0.1,
            by_epoch=False,
            begin=0,
            end=max(1, iters // 5))
    ]
    if DIST_FAMILIES[family]['data'] == 'imagenet':
        batch = 8 if tiny else 64
        loader = dict(
            batch_size=batch, **workers, dataset=dict(data_root=data_root))
        over = dict(
            train_dataloader=loader,
            val_dataloader=loader,
            test_dataloader=loader,
            train_cfg=dict(max_epochs=iters, val_interval=iters),
            param_scheduler=warmup,
            default_hooks=dict(
                logger=dict(interval=log_every),
                checkpoint=dict(interval=iters, max_keep_ckpts=1)))
        if tiny:
            over['model'] = dict(
                backbone=dict(arch=dict(TINY_ARCH, _delete_=True)),
                head=dict(in_channels=64))
        over.update(DIST_FAMILIES[family].get('runner', {}))
        return over
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
            default_hooks=dict(logger=dict(interval=log_every)))
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
    over = dict(
        model=model,
        **ade_data(data_root, crop, workers),
        train_cfg=dict(max_iters=iters, val_interval=iters),
        param_scheduler=warmup,
        default_hooks=dict(
            checkpoint=dict(
                by_epoch=False,
                interval=iters,
                save_best=None,
                max_keep_ckpts=1),
            logger=dict(interval=log_every)))
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


def section_dist(bench: Bench) -> None:
    """``tools/dist_train.sh CONFIG 1 --amp`` then ``dist_test.sh``."""
    root = bench.args.work_root or tempfile.mkdtemp(prefix='bench_gpu_')
    iters = 2 if bench.tiny else bench.args.dist_iters
    amp = bench.device.type == 'cuda'
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
            config = osp.join(work, 'config.py')
            over = dist_overrides(family, data, bench.tiny, iters, not amp)
            over['randomness'] = dict(seed=0)  # a reproducible run
            with open(config, 'w') as f:
                f.write(f'_base_ = {osp.join(ROOT, config_file)!r}\n')
                for key, value in over.items():
                    f.write(f'{key} = {value!r}\n')
            env = dict(
                os.environ,
                PYTHON=sys.executable,
                PORT=str(free_port()),
                PYTHONUNBUFFERED='1')
            if bench.args.threads:
                env['OMP_NUM_THREADS'] = str(bench.args.threads)
            args = ['--work-dir', work] + (['--amp'] if amp else [])
            start = time.perf_counter()
            run([osp.join(ROOT, 'tools', 'dist_train.sh'), config, '1'] + args,
                env, osp.join(work, 'train.log'))
            train_s = time.perf_counter() - start
            with open(osp.join(work, 'last_checkpoint')) as f:
                ckpt = f.read().strip()
            start = time.perf_counter()
            run([
                osp.join(ROOT, 'tools', 'dist_test.sh'), config, ckpt, '1',
                '--work-dir', work
            ], env, osp.join(work, 'test.log'))
            test_s = time.perf_counter() - start
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
                DIST_JOIN,
                train=f'{len(losses)} logged, {train_s:.0f} s',
                eval_=f'{spec["metric"]} {metric}, {test_s:.0f} s',
                note=f'{"--amp" if amp else "no --amp (CPU)"}; {trend}; '
                f'logs in {work}')
        except Exception as err:  # noqa: BLE001 -- reported in the row
            bench.failed('dist', case, DIST_JOIN, err)


def free_port() -> int:
    """A TCP port that is free now (for torchrun's rendezvous)."""
    import socket
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def run(cmd: List[str], env: Dict, log: str) -> None:
    with open(log, 'w') as f:
        out = subprocess.run(
            cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    if out.returncode:
        with open(log) as f:
            tail = f.read()[-600:]
        raise RuntimeError(f'{osp.basename(cmd[0])} exited with '
                           f'{out.returncode} (log {log}): ...{tail}')
