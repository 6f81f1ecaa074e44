"""The user's training path, measured in one run: the loader alone, the
model alone and ``tools/train.py`` end to end, for the LaPE config of each
family (DeiT-Ti, DeiT-B, ViT-Adapter-Ti Mask R-CNN and UperNet, Segmenter-Ti).

On generated data of the real sets' size and format (ImageNet-size JPEGs
in ImageNet's layout, COCO at 640x480, ADE20K at 683x512 with label PNGs;
:mod:`mmlape.datasets`), for each family:

- **loader**: the config's own train dataloader (its dataset class,
  pipeline, sampler and collate) built with ``num_workers=0`` and iterated
  in this process on one thread, as one worker runs it. Images per second
  per worker, from the process's CPU time (what one worker with a core of
  its own makes; robust on a shared machine) and from wall time.
- **model**: forward, backward and optimizer step (``model.train_step``,
  the data preprocessor's normalisation and batch augmentation included)
  of the config's model, eager, on one batch of that loader held in
  memory; the
  fastest of ``--model-steps`` steps after a warm-up, in wall time (and
  in CPU time, for the bound below).
- **profile** (``--profile-steps N``): ``N`` more model-only steps under
  ``torch.profiler``, each ended by a synchronisation (as mmengine's
  ``RuntimeInfoHook`` ends an iteration by reading the loss; the configs'
  ``LazyRuntimeInfoHook`` reads it only when logging): the wall time per
  step,
  how much of it the GPU is busy (the union of its kernels' intervals),
  the process's CPU time, and the operations that take the most host and
  device time (the whole table in ``<work root>/<family>-profile.txt``).
  Where the GPU idles for a large share of the step, the host is what
  the step waits for, and the host rows say on what.
- **train**: ``tools/train.py CONFIG --no-validate`` on the generated
  data for ``--iters`` iterations with the workers the config sets
  (``auto_num_workers`` resolved by the tool); images per second from the
  run's ``time`` in ``vis_data/scalars.json``, the first ``--warmup``
  iterations left out, and the share of it spent waiting for data
  (``data_time``). The run logs every ``--log-every`` iterations (5), each
  entry the mean of the iterations since the last: logging reads the
  step's losses from the device, which waits for the step, and the
  configs' ``LazyRuntimeInfoHook`` reads them only when they are logged
  (every 50-100 iterations in the configs), so a run that logged every
  iteration would wait for every step as the configs' runs do not.
  ``--runtime-info RuntimeInfoHook`` times mmengine's hook instead, which
  reads them every iteration. While the first iteration runs (seconds; ten when
  it compiles) the workers fill their queue, ``workers x prefetch_factor``
  batches, and a loop faster than its loader runs on those stored batches
  until the queue drains: that takes ``queue / (1 - loader / model)``
  iterations. The warm-up is therefore ``5 x queue`` iterations by default
  (enough where the loader makes up to 4/5 of the model's rate; measured
  on an H100, DeiT-Ti's made 0.68 of it), at least 5, and 25 are timed
  after it; with ``--iters`` alone, at most half of them.

No training process beats the slower of its two sources, so the train
figure is at most ``min(model, loader)`` with both sides taken from
figures that load on a shared machine cannot lower: the model side is
the step's CPU time over its threads (on a GPU its fastest wall time), the
loader side ``min(workers, CPUs) x`` the per-worker CPU-time rate (with
``num_workers=0`` the two times add up instead). ``train / bound`` reports
the train figure over it and which side sets it; above 1 means the timed
iterations still ran on the queue filled at the start (the report says so
above 1.02, past the figures' noise: run with a longer ``--warmup``).

Example:
    python benchmarks/bench_train_path.py --out train_path.md
    python benchmarks/bench_train_path.py --families deit --iters 30
    python benchmarks/bench_train_path.py --families deit --parts train \
        --runtime-info RuntimeInfoHook  # losses read every iteration
    python benchmarks/bench_train_path.py --tiny --json out.json  # tests
"""
import argparse
import copy
import glob
import json
import logging
import math
import os
import os.path as osp
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

HERE = osp.dirname(osp.abspath(__file__))
ROOT = osp.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from report import print_and_save  # noqa: E402
from small_dense import ade_data, coco_data, model_overrides  # noqa: E402

#: The families: the LaPE config (DeiT-Ti and DeiT-B for ImageNet), the
#: data format, the config's scope. The small model of ``--tiny`` is the
#: dense tests' (``small_dense``), the 64-dim ViT of ``bench_gpu.py
#: --tiny`` or, where a family names one, its ``tiny_model``; ``run``:
#: more config entries of every run.
FAMILIES = {
    'deit':
    dict(config='configs/deit/deit-tiny-lape_4xb256_in1k.py', data='imagenet'),
    'deit-base':
    dict(config='configs/deit/deit-base-lape_4xb256_in1k.py', data='imagenet'),
    # Swin-T: its recipe clips the gradient norm (bench_syncs.py)
    'swin':
    dict(
        config='configs/swin/swin-tiny-lape_16xb64_in1k.py',
        data='imagenet',
        tiny_model=dict(
            backbone=dict(arch='test-tiny'), head=dict(in_channels=128)),
        # the recipe's cosine over the run's one epoch (its 20 warm-up
        # epochs would begin after it)
        run=dict(param_scheduler=[
            dict(
                type='CosineAnnealingLR',
                eta_min=1e-5,
                by_epoch=True,
                begin=0,
                end=1,
                convert_to_iter_based=True)
        ])),
    'mask-rcnn':
    dict(
        config='configs/vit_adapter/mask-rcnn_vit-adapter-tiny-lape_fpn_3x_'
        'coco.py',
        data='coco'),
    'upernet':
    dict(
        config='configs/vit_adapter/upernet_vit-adapter-tiny-lape_8xb2-160k_'
        'ade20k-512x512.py',
        data='ade'),
    'segmenter':
    dict(
        config='configs/segmenter/segmenter_vit-tiny-lape_mask_8xb1-160k_'
        'ade20k-512x512.py',
        data='ade'),
}
#: Image ``(height, width)`` of each format: real size, and ``--tiny``.
SIZES = {
    'imagenet': ((375, 500), (48, 64)),
    'coco': ((480, 640), (64, 80)),
    'ade': ((512, 683), (96, 128)),
}
#: COCO has about 7.3 instances per training image: 1..14, 7.5 on average.
COCO_MAX_OBJECTS = 14
#: The 64-dim ViT of ``--tiny`` (``bench_gpu.py``'s).
TINY_ARCH = dict(
    embed_dims=64, num_layers=4, num_heads=2, feedforward_channels=256)
#: The families measured unless ``--families`` names others.
DEFAULT_FAMILIES = ('deit', 'deit-base', 'mask-rcnn', 'upernet', 'segmenter')
#: The measurements.
PARTS = ('loader', 'model', 'train')
#: What the markdown table shows, in order.
COLUMNS = ('family', 'batch', 'loader img/s per worker (CPU time)',
           'loader img/s per worker (wall)', 'model-only img/s',
           'tools/train.py img/s', 'data_time share', 'workers',
           'train / bound')

# ---------------------------------------------------------------------------
# data


def generate_data(kind: str, root: str, images: int, tiny: bool) -> Dict:
    """Generate (or keep, where it exists) ``images`` training images of
    format ``kind`` under ``root``; return what was made."""
    from mmlape.datasets import (generate_ade20k, generate_coco_instances,
                                 generate_imagenet)
    size = SIZES[kind][1 if tiny else 0]
    stamp = root + '.json'
    spec = dict(kind=kind, images=images, size=list(size), version=1)
    kept = False
    if osp.isfile(stamp):
        with open(stamp) as f:
            kept = json.load(f) == spec
    if not kept:
        # another set's files would stay in the folders that mmseg scans
        shutil.rmtree(root, ignore_errors=True)
        if kind == 'imagenet':
            generate_imagenet(
                root, num_train=images, num_val=2, num_classes=100, size=size)
        elif kind == 'coco':
            generate_coco_instances(
                root,
                num_train=images,
                num_val=1,
                size=size,
                max_objects=COCO_MAX_OBJECTS,
                background='natural',
                quality=90)
        else:
            generate_ade20k(
                root,
                num_train=images,
                num_val=1,
                size=size,
                background='natural',
                quality=90)
        with open(stamp, 'w') as f:
            json.dump(spec, f)
    pattern = {
        'imagenet': 'train/*/*.JPEG',
        'coco': 'train2017/*.jpg',
        'ade': 'images/training/*.jpg'
    }[kind]
    files = glob.glob(osp.join(root, pattern))
    mean_kb = sum(osp.getsize(f) for f in files) / max(1, len(files)) / 1e3
    return dict(
        format=kind, images=len(files), size=list(size), mean_kb=mean_kb)


# ---------------------------------------------------------------------------
# the run's config


def base_loader(config: str) -> Dict:
    """The batch size and worker settings of the config's train
    dataloader."""
    from mmengine.config import Config
    cfg = Config.fromfile(osp.join(ROOT, config))
    loader = cfg.train_dataloader
    return dict(
        batch_size=loader.batch_size,
        num_workers=loader.get('num_workers', 0),
        persistent_workers=loader.get('persistent_workers', False),
        pin_memory=loader.get('pin_memory', False),
        prefetch_factor=loader.get('prefetch_factor') or 2,
        auto_num_workers=cfg.get('auto_num_workers'),
        dataset=loader.dataset.to_dict())


#: Warm-up iterations per batch in the loader's queue at the start, and the
#: iterations timed after them (see the module's docstring).
DRAIN_PER_QUEUED = 5
#: Iterations a log entry of the train run covers (its ``time`` their mean).
LOG_EVERY = 5
TIMED_ITERS = 25


def queue_batches(base: Dict,
                  workers: Optional[int],
                  cpus: Optional[int] = None) -> int:
    """Batches the run's train loader holds ready before its first step:
    its workers (``workers``, else the config's ``auto_num_workers``
    resolved for ``cpus`` as the tools resolve it, else its
    ``num_workers``) times its ``prefetch_factor``."""
    from mmengine.config import Config

    from mmlape.engine.loader_workers import apply_auto_num_workers
    if workers is None:
        cfg = Config(
            dict(
                auto_num_workers=base['auto_num_workers'],
                train_dataloader=dict(num_workers=base['num_workers']),
                launcher='none'))
        apply_auto_num_workers(cfg, {}, cpus=cpus)
        workers = cfg.train_dataloader.num_workers
    return workers * base['prefetch_factor']


def iterations(args, queue: int) -> Dict[str, int]:
    """The run's ``iters`` and ``warmup``: those given, else a warm-up that
    drains a queue of ``queue`` batches and ``TIMED_ITERS`` after it."""
    warmup = args.warmup
    if warmup is None:
        warmup = max(5, DRAIN_PER_QUEUED * queue)
        if args.iters is not None and warmup >= args.iters:
            warmup = args.iters // 2  # (the report flags an undrained run)
    iters = args.iters if args.iters is not None else warmup + TIMED_ITERS
    return dict(iters=iters, warmup=warmup)


def one_epoch(dataset: Dict, data_root: str, times: int) -> Dict:
    """The train dataset repeated ``times`` (mmengine's ``RepeatDataset``),
    so that one epoch holds every timed iteration. A DataLoader hands each
    worker whole batches: an epoch of a few batches keeps a few workers
    busy and the rest idle, which measures the epoch's length, not the
    loader (measured: 2 batches of 256 an epoch gave 263 img/s with 15
    workers that make 190 img/s each)."""
    return dict(
        _delete_=True,
        type='RepeatDataset',
        times=times,
        dataset=dict(dataset, data_root=data_root))


def overrides(family: str,
              data_root: str,
              batch: int,
              iters: int,
              epoch_iters: int,
              tiny: bool,
              workers: Optional[int],
              base: Dict,
              log_every: int = 1,
              runtime_info: Optional[str] = None) -> Dict:
    """Config entries of the run: the generated data, ``batch``, ``iters``
    iterations (``epoch_iters`` to an epoch where the loop counts epochs),
    every iteration logged unsmoothed, no checkpoint on the way; with
    ``tiny`` the small model (and, for the dense families, the dense tests'
    small pipelines); ``workers`` replaces the config's worker count
    (``auto_num_workers`` off); the run logs every ``log_every``
    iterations, each entry their mean, with the config's
    ``runtime_info`` hook or the one named."""
    loader_workers = dict(
        num_workers=base['num_workers'] if workers is None else workers,
        persistent_workers=base['persistent_workers'],
        pin_memory=base['pin_memory'])
    if not loader_workers['num_workers']:
        loader_workers['persistent_workers'] = False
    over: Dict = dict(
        default_hooks=dict(
            logger=dict(interval=log_every),
            checkpoint=dict(interval=10**6, save_last=False,
                            max_keep_ckpts=1)),
        log_processor=dict(window_size=log_every),
        randomness=dict(seed=0))
    if runtime_info:
        over['default_hooks']['runtime_info'] = dict(type=runtime_info)
    if workers is not None:
        over['auto_num_workers'] = None
    times = math.ceil(iters / epoch_iters)
    if FAMILIES[family]['data'] == 'imagenet':
        over['train_dataloader'] = dict(
            batch_size=batch,
            dataset=one_epoch(base['dataset'], data_root, times))
        over['train_cfg'] = dict(max_epochs=1)
        if tiny:
            over['model'] = FAMILIES[family].get('tiny_model') or dict(
                backbone=dict(arch=dict(TINY_ARCH, _delete_=True)),
                head=dict(in_channels=TINY_ARCH['embed_dims']))
    elif family == 'mask-rcnn':
        over['model'] = dict(backbone=dict(init_cfg=None))
        if tiny:
            over['model'].update(model_overrides(family, init_cfg=None))
            over['train_dataloader'] = coco_data(data_root + '/', (80, 64),
                                                 {})['train_dataloader']
        loader = over.setdefault('train_dataloader', dict(dataset={}))
        loader['batch_size'] = batch
        dataset = dict(base['dataset'], **loader['dataset'])
        loader['dataset'] = one_epoch(dataset, data_root + '/', times)
        over['train_cfg'] = dict(max_epochs=1)
    else:
        over['model'] = dict(backbone=dict(init_cfg=None))
        if tiny:
            over['model'].update(model_overrides(family, init_cfg=None))
            over['model']['data_preprocessor'] = dict(size=(64, 64))
            over['train_dataloader'] = ade_data(data_root, 64,
                                                {})['train_dataloader']
        loader = over.setdefault('train_dataloader', dict(dataset={}))
        loader['batch_size'] = batch
        loader['dataset']['data_root'] = data_root
        over['default_hooks']['checkpoint'].update(
            by_epoch=False, save_best=None)
        over['train_cfg'] = dict(max_iters=iters, val_interval=iters)
    over['train_dataloader'].update(loader_workers)
    over.update(FAMILIES[family].get('run', {}))
    return over


def write_config(path: str, config: str, over: Dict) -> str:
    """A config file inheriting ``config`` with ``over``."""
    with open(path, 'w') as f:
        f.write(f'_base_ = {osp.join(ROOT, config)!r}\n')
        for key, value in over.items():
            f.write(f'{key} = {value!r}\n')
    return path


def train_command(config: str,
                  work_dir: str,
                  compile_: bool = False,
                  amp: bool = False) -> List[str]:
    """The ``tools/train.py`` command line of the end-to-end run
    (``--compile`` and ``--amp`` passed through)."""
    return [
        sys.executable,
        osp.join(ROOT, 'tools', 'train.py'), config, '--work-dir', work_dir,
        '--no-validate'
    ] + (['--compile'] if compile_ else []) + (['--amp'] if amp else [])


# ---------------------------------------------------------------------------
# the three measurements


def load_run_config(path: str):
    """The run's config as ``tools/train.py`` prepares it for its
    pipelines (mmlape's checked image loading), scope initialised, the
    host libraries adjusted as the tools do (mmpretrain's models import
    beside transformers 5)."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    import mmlape.hosts
    from mmlape.apis import register_scope_modules
    mmlape.hosts.apply()
    from mmlape.datasets.checks import use_checked_image_loading
    cfg = Config.fromfile(path)
    init_default_scope(register_scope_modules(cfg))
    use_checked_image_loading(cfg, ('train', ))
    return cfg


def _batch_len(batch: Dict) -> int:
    return len(batch['inputs'])


def measure_loader(cfg, images: int, loader: str = 'train_dataloader') -> Dict:
    """Images per second of the config's ``loader`` (its train dataloader
    by default) run in this process on one thread (one worker's work),
    after one warm-up batch."""
    import cv2
    import torch
    from mmengine.runner import Runner
    loader_cfg = copy.deepcopy(cfg[loader])
    loader_cfg.update(
        num_workers=0, persistent_workers=False, pin_memory=False)
    threads = torch.get_num_threads()
    cv2_threads = cv2.getNumThreads()
    torch.set_num_threads(1)  # what a DataLoader worker runs with
    cv2.setNumThreads(0)  # mmengine's default for the training processes
    try:
        built = Runner.build_dataloader(loader_cfg, seed=0)

        def batches():
            while True:
                yield from built

        source = batches()
        first = next(source)
        count = 0
        wall, cpu = time.perf_counter(), time.process_time()
        while count < images:
            count += _batch_len(next(source))
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
    finally:
        torch.set_num_threads(threads)
        cv2.setNumThreads(cv2_threads)
    return dict(
        images=count,
        cpu_s=cpu,
        wall_s=wall,
        img_s_cpu=count / cpu,
        img_s_wall=count / wall,
        batch=first)


def measure_model(cfg,
                  batch: Dict,
                  steps: int,
                  warmup: int,
                  amp: bool,
                  compile_: bool = False,
                  profile_steps: int = 0,
                  profile_path: Optional[str] = None) -> Dict:
    """Seconds per ``train_step`` of the config's model on ``batch``: the
    fastest of ``steps`` after ``warmup``, in wall time and in this
    process's CPU time; with ``compile_`` the model is compiled as
    ``--compile`` compiles it (:class:`~mmlape.engine.CompileHook`'s
    targets, inductor). With ``profile_steps``, that many more steps are
    profiled (:func:`profile_steps_of`; the table to ``profile_path``)."""
    import torch
    from mmengine.logging import MMLogger
    from mmengine.model import revert_sync_batchnorm
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import MODELS
    model_cfg = copy.deepcopy(cfg.model)
    if cfg.get('data_preprocessor') is not None:
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    model = revert_sync_batchnorm(MODELS.build(model_cfg))
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    # as the run's runner sets it
    torch.backends.cudnn.benchmark = bool(
        cfg.get('env_cfg', {}).get('cudnn_benchmark', False))
    model.to(device).train()
    if device == 'cuda' and cfg.train_dataloader.get('pin_memory'):
        # as the run's loader hands it over
        from torch.utils.data._utils.pin_memory import pin_memory
        batch = pin_memory(batch)
    if compile_:
        from mmlape.engine.compile import compile_targets
        for module in compile_targets(model, 'auto', cfg.default_scope)[0]:
            module.compile()
    optim_cfg = copy.deepcopy(cfg.optim_wrapper)
    if amp:
        optim_cfg.type = 'AmpOptimWrapper'
        optim_cfg.setdefault('loss_scale', 'dynamic')
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)  # not every parameter's options
    try:
        optim = build_optim_wrapper(model, optim_cfg)
    finally:
        logger.setLevel(level)
    sync = torch.cuda.synchronize if device == 'cuda' else (lambda: None)
    walls, cpus = [], []
    for i in range(warmup + steps):
        sync()
        wall, cpu = time.perf_counter(), time.process_time()
        model.train_step(batch, optim)
        sync()
        if i >= warmup:
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    result = dict(
        steps=steps,
        s_per_step=min(walls),
        cpu_s_per_step=min(cpus),
        threads=torch.get_num_threads(),
        device=device)
    if profile_steps:
        try:
            result['profile'] = profile_steps_of(
                lambda: model.train_step(batch, optim), profile_steps, sync,
                profile_path)
        except Exception as exc:  # the timed figures above stand
            result['profile'] = dict(
                steps=profile_steps,
                error=f'{type(exc).__name__}: {exc}'.splitlines()[0])
    return result


#: Rows of each list of the profile: the operations that take the most
#: host time, and device time.
PROFILE_TOP = 12


def _device_busy_us(events) -> Optional[float]:
    """Microseconds in which at least one device kernel ran: the union of
    the device events' intervals (None without device events)."""
    from torch.autograd import DeviceType
    spans = sorted((e.time_range.start, e.time_range.end) for e in events
                   if e.device_type != DeviceType.CPU)
    if not spans:
        return None
    busy, (start, end) = 0.0, spans[0]
    for s, e in spans[1:]:
        if s > end:
            busy, start, end = busy + end - start, s, e
        else:
            end = max(end, e)
    return busy + end - start


def _self_device_us(event) -> float:
    # (the name in torch >= 2.4; self_cuda_time_total before)
    return getattr(event, 'self_device_time_total',
                   getattr(event, 'self_cuda_time_total', 0.0))


def profile_steps_of(step: Callable[[], object],
                     steps: int,
                     sync: Callable[[], None],
                     path: Optional[str] = None) -> Dict:
    """``steps`` calls of ``step`` under ``torch.profiler``, each followed
    by ``sync()``: the wall and CPU time per step, the device's busy time
    per step (None on the CPU), and the operations that take the most
    self host time and self device time, per step. ``path`` gets the
    profiler's whole table."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    sync()
    with profile(activities=activities) as prof:
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step()
            sync()
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
    table = prof.key_averages()
    busy = _device_busy_us(prof.events())

    def top(key: Callable, unit: str) -> List[Dict]:
        rows = sorted((e for e in table if key(e) > 0), key=key, reverse=True)
        return [
            dict(
                name=e.key,
                calls_per_step=e.count / steps,
                **{f'{unit}_ms_per_step': key(e) / 1e3 / steps})
            for e in rows[:PROFILE_TOP]
        ]

    if path:
        sort = 'self_device_time_total' if busy is not None else \
            'self_cpu_time_total'
        with open(path, 'w') as f:
            f.write(table.table(sort_by=sort, row_limit=60))
    return dict(
        steps=steps,
        wall_ms_per_step=wall * 1e3 / steps,
        cpu_ms_per_step=cpu * 1e3 / steps,
        device_busy_ms_per_step=None if busy is None else busy / 1e3 / steps,
        host_top=top(lambda e: e.self_cpu_time_total, 'host'),
        device_top=top(_self_device_us, 'device') if busy is not None else [],
        table=path)


def read_train_log(work_dir: str, warmup: int, every: int = 1) -> Dict:
    """``time`` and ``data_time`` per iteration of a run's scalars.json,
    logged every ``every`` iterations (each entry their mean): the entries
    whose iterations all follow the first ``warmup``."""
    found = sorted(
        glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')))
    if not found:
        raise RuntimeError(f'no vis_data/scalars.json under {work_dir}')
    entries = []
    with open(found[-1]) as f:
        for line in f:
            entry = json.loads(line)
            if 'time' in entry and 'data_time' in entry:
                entries.append(entry)
    # an entry at step s covers iterations s - every + 1 .. s (a last one
    # off the interval, the epoch's end, covers fewer: left out)
    timed = [
        e for e in entries
        if e['step'] % every == 0 and e['step'] - every >= warmup
    ]
    if not timed:
        raise RuntimeError(
            f'{len(entries)} entries logged in {found[-1]} (every {every} '
            f'iterations), none after the {warmup} warm-up iterations')
    time_s = sum(e['time'] for e in timed) / len(timed)
    data_s = sum(e['data_time'] for e in timed) / len(timed)
    return dict(
        logged=len(entries),
        log_every=every,
        timed=len(timed) * every,
        s_per_iter=time_s,
        data_s_per_iter=data_s,
        scalars=found[-1])


def run_workers(work_dir: str) -> Optional[int]:
    """The train dataloader's ``num_workers`` in the config the run dumped
    (after ``auto_num_workers``)."""
    from mmengine.config import Config
    dumped = glob.glob(osp.join(work_dir, '*.py'))
    if not dumped:
        return None
    cfg = Config.fromfile(dumped[0], import_custom_modules=False)
    return cfg.train_dataloader.get('num_workers', 0)


def run_tool(cmd: List[str], log: str, threads: Optional[int]) -> float:
    """Run a tool's command line from the repository root (on its import
    path, unbuffered, ``threads`` OMP threads where given), its output to
    ``log``; its wall seconds. A failure raises with the log's tail."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([ROOT,
                                    os.environ.get('PYTHONPATH',
                                                   '')]).rstrip(os.pathsep),
        PYTHONUNBUFFERED='1')
    if threads:
        env['OMP_NUM_THREADS'] = str(threads)
    start = time.perf_counter()
    with open(log, 'w') as f:
        out = subprocess.run(
            cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    if out.returncode:
        with open(log) as f:
            tail = f.read()[-1500:]
        raise RuntimeError(f'{osp.relpath(cmd[1], ROOT)} exited with '
                           f'{out.returncode} (log {log}): ...{tail}')
    return wall


def measure_train(config: str, work_dir: str, warmup: int, args,
                  threads: Optional[int]) -> Dict:
    """``tools/train.py`` end to end; figures from its log."""
    os.makedirs(work_dir, exist_ok=True)
    log = osp.join(work_dir, 'train.out')
    cmd = train_command(config, work_dir, args.compile, args.amp)
    wall = run_tool(cmd, log, threads)
    result = read_train_log(work_dir, warmup, args.log_every)
    with open(log) as f:
        text = f.read()
    result.update(
        workers=run_workers(work_dir),
        auto_num_workers_logged=text.count('auto_num_workers: '),
        wall_s=wall,
        compile=args.compile,
        runtime_info=args.runtime_info or 'the config\'s',
        command=' '.join(cmd[1:]))
    return result


def bound(model: Dict, loader: Dict, workers: int, cpus: int) -> Dict:
    """The most images per second a training process can make, from
    figures that load on the machine cannot lower: on the CPU a step
    takes at least its CPU time over the threads it runs on (on a GPU:
    the fastest wall time), a worker builds at most its CPU-time rate and
    ``workers`` of them share ``cpus`` CPUs; with no workers the training
    process loads too, and the two times add up.

    Returns:
        dict: ``img_s`` and ``limited_by`` (model, loader, or both).
    """
    if model['device'] == 'cpu':
        step_s = model['cpu_s_per_step'] / model['threads']
    else:
        step_s = model['s_per_step']
    model_img_s = model['batch'] / step_s
    if not workers:
        return dict(
            img_s=1 / (1 / model_img_s + 1 / loader['img_s_cpu']),
            limited_by='model + loader in one process')
    loader_img_s = min(workers, cpus) * loader['img_s_cpu']
    side = 'loader' if loader_img_s < model_img_s else 'model'
    return dict(img_s=min(loader_img_s, model_img_s), limited_by=side)


# ---------------------------------------------------------------------------
# one family, the run, the report


def run_family(family: str, args, root: str) -> Dict:
    """Data, the three measurements and the bound of one family."""
    stages: Dict[str, float] = {}
    clock = time.perf_counter()

    def stage(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        stages[name] = round(now - clock, 2)
        clock = now

    spec = FAMILIES[family]
    base = base_loader(spec['config'])
    batch = base['batch_size']
    if args.max_batch:
        batch = min(batch, args.max_batch)
    queue = queue_batches(base, args.workers)
    plan = iterations(args, queue)
    iters = plan['iters']
    # An epoch of the epoch-based loops (DeiT, Mask R-CNN) is one pass over
    # the generated set: at most --iters batches, at most --max-images.
    per_epoch = max(2, min(iters, args.max_images // batch))
    h, w = SIZES[spec['data']][1 if args.tiny else 0]
    data_root = osp.join(root, 'data',
                         f"{spec['data']}-{w}x{h}-{per_epoch * batch}")
    data = generate_data(spec['data'], data_root, per_epoch * batch, args.tiny)
    stage('data')
    work = osp.join(root, family)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(osp.join(root, 'configs'), exist_ok=True)
    over = overrides(family, data_root, batch, iters, per_epoch, args.tiny,
                     args.workers, base, args.log_every, args.runtime_info)
    # (the run dumps its resolved config to the work dir, under this name)
    config = write_config(
        osp.join(root, 'configs', f'{family}.py'), spec['config'], over)
    cfg = load_run_config(config)
    stage('config')
    result = dict(
        family=family,
        config=spec['config'],
        batch=batch,
        config_batch=base['batch_size'],
        data=data,
        seconds=stages)
    loader = measure_loader(cfg, args.loader_images)
    held = loader.pop('batch')
    result['loader'] = loader
    stage('loader')
    if 'model' in args.parts:
        model = measure_model(
            cfg,
            held,
            args.model_steps,
            args.model_warmup,
            args.amp,
            args.compile,
            profile_steps=args.profile_steps,
            profile_path=osp.join(root, f'{family}-profile.txt'))
        model['batch'] = _batch_len(held)
        model['img_s'] = model['batch'] / model['s_per_step']
        result['model'] = model
        stage('model')
    if 'train' in args.parts:
        train = measure_train(config, work, plan['warmup'], args, args.threads)
        train.update(plan, queue_batches=queue)
        train['img_s'] = batch / train['s_per_iter']
        train['data_share'] = train['data_s_per_iter'] / train['s_per_iter']
        result['train'] = train
        stage('train')
    if 'model' in result and 'train' in result:
        workers = train['workers'] if train['workers'] is not None else 0
        limit = bound(model, loader, workers, len(os.sched_getaffinity(0)))
        limit['train_over_bound'] = train['img_s'] / limit['img_s']
        result['bound'] = limit
    return result


def failed_family(family: str, err: Exception) -> Dict:
    """The report's row of a family whose measurement raised ``err`` (its
    traceback to stderr)."""
    import traceback
    traceback.print_exc(file=sys.stderr)
    message = f'{type(err).__name__}: {err}'.replace('\n', ' ')
    return dict(family=family, error=message[:300])


def machine() -> Dict:
    """What the figures were measured on."""
    import torch
    name = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    name = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() \
        else None
    return dict(
        cpu=name,
        cpus=len(os.sched_getaffinity(0)),
        gpu=gpu,
        torch=torch.__version__,
        torch_threads=torch.get_num_threads(),
        python=platform.python_version(),
        load_average=list(os.getloadavg()),
        date=time.strftime('%Y-%m-%d'))


def rate(value: float) -> str:
    """Images per second as the reports write them."""
    if value < 1:
        return f'{value:.3f}'
    return f'{value:,.1f}' if value < 100 else f'{value:,.0f}'


def markdown(report: Dict) -> str:
    """The report as a caption and one markdown row per family."""
    m = report['machine']
    lines = [
        f"{m['cpu']}, {m['cpus']} CPUs, "
        f"{m['gpu'] or 'no GPU'}, torch {m['torch']} "
        f"({m['torch_threads']} threads), {m['date']}; load average "
        f"{m['load_average'][0]:.1f} at the start, "
        f"{report['load_average_end'][0]:.1f} at the end; tools/train.py " +
        ('and the model-only step compiled (--compile, inductor).' if
         report['settings']['compile'] else 'and the model-only step eager.') +
        runtime_info_note(report['settings']), '',
        '| ' + ' | '.join(COLUMNS) + ' |', '|' + '---|' * len(COLUMNS)
    ]
    for fam in report['families']:
        if 'error' in fam:
            lines.append(f"| {fam['family']} | failed: {fam['error']} |")
            continue
        loader = fam['loader']
        model, train, limit = (fam.get(k) for k in ('model', 'train', 'bound'))
        batch = str(fam['batch'])
        if fam['batch'] != fam['config_batch']:
            batch += f" (config {fam['config_batch']})"
        cells = [
            fam['family'], batch,
            rate(loader['img_s_cpu']),
            rate(loader['img_s_wall']),
            rate(model['img_s']) if model else '-',
            rate(train['img_s']) if train else '-',
            f"{train['data_share']:.0%}" if train else '-',
            str(train['workers']) if train else '-',
            f"{limit['train_over_bound']:.2f} ({limit['limited_by']})"
            if limit else '-'
        ]
        lines.append('| ' + ' | '.join(cells) + ' |')
    lines += profile_markdown(report)
    undrained = [
        f['family'] for f in report['families']
        if f.get('bound', {}).get('train_over_bound', 0) > 1.02
    ]
    if undrained:
        lines += [
            '', f"Above the bound ({', '.join(undrained)}): the timed "
            'iterations still ran on the batches the loader stored while '
            'the first iteration ran; the loader sustains less. Run with a '
            'longer --warmup.'
        ]
    return '\n'.join(lines) + '\n'


def runtime_info_note(settings: Dict) -> str:
    """The caption's words on how the train run read its losses."""
    every = settings.get('log_every') or 1
    hook = settings.get('runtime_info')
    if hook:
        return (f' The train run logged every {every} iteration(s) with '
                f'{hook} as its runtime_info hook.')
    return (f" The train run logged every {every} iteration(s) with the "
            "config's runtime_info hook.")


def profile_markdown(report: Dict) -> List[str]:
    """The profiled model-only steps: one row per family, then each
    family's top host and device operations."""
    profiled = [(f['family'], f['model']['profile'])
                for f in report['families'] if 'profile' in f.get('model', {})]
    if not profiled:
        return []
    lines = [
        '', 'Model-only steps under torch.profiler (each ended by a '
        'synchronisation, as mmengine\'s RuntimeInfoHook ends each '
        'iteration; the configs\' LazyRuntimeInfoHook does not):', '',
        '| family | steps | wall ms/step | GPU busy ms/step | GPU idle | '
        'process CPU ms/step |', '|---|---|---|---|---|---|'
    ]
    for family, prof in profiled:
        if 'error' in prof:
            lines.append(f"| {family} | {prof['steps']} | failed: "
                         f"{prof['error']} |")
            continue
        busy = prof['device_busy_ms_per_step']
        idle = '-' if busy is None else \
            f"{1 - busy / prof['wall_ms_per_step']:.0%}"
        lines.append(f"| {family} | {prof['steps']} | "
                     f"{prof['wall_ms_per_step']:.2f} | "
                     f"{'-' if busy is None else f'{busy:.2f}'} | {idle} | "
                     f"{prof['cpu_ms_per_step']:.2f} |")
    for family, prof in profiled:
        for kind in ('host', 'device'):
            rows = prof.get(f'{kind}_top')
            if not rows:
                continue
            lines += [
                '', f'{family}, the operations with the most self {kind} '
                'time:', '', f'| operation | calls/step | {kind} ms/step |',
                '|---|---|---|'
            ]
            lines += [
                f"| `{r['name'][:80]}` | {r['calls_per_step']:g} | "
                f"{r[f'{kind}_ms_per_step']:.3f} |" for r in rows
            ]
    return lines


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)

    def names_of(allowed) -> Callable[[str], List[str]]:
        """A comma-separated list of names, each one of ``allowed``."""

        def parse(text: str) -> List[str]:
            names = [n.strip() for n in text.split(',') if n.strip()]
            for name in names:
                if name not in allowed:
                    raise argparse.ArgumentTypeError(
                        f'{name!r} is not one of {list(allowed)}')
            return names

        return parse

    families, parts = names_of(FAMILIES), names_of(PARTS)

    parser.add_argument(
        '--families',
        type=families,
        default=list(DEFAULT_FAMILIES),
        help=f'comma-separated, from {",".join(FAMILIES)} (default: '
        f'{",".join(DEFAULT_FAMILIES)})')
    parser.add_argument(
        '--parts',
        type=parts,
        default=list(PARTS),
        help=f'comma-separated, from {",".join(PARTS)} (default: all; the '
        'loader is always measured)')
    parser.add_argument(
        '--tiny',
        action='store_true',
        help='tiny models, small images, few iterations (the test)')
    parser.add_argument(
        '--iters',
        type=int,
        help='training iterations (--warmup + 25; --tiny 5)')
    parser.add_argument(
        '--warmup',
        type=int,
        help='first iterations left out of the train figure (5 x the '
        "batches the loader's queue holds, at least 5; --tiny 2)")
    parser.add_argument(
        '--loader-images',
        type=int,
        help='images the loader makes while timed (128; --tiny 8)')
    parser.add_argument(
        '--log-every',
        type=int,
        help='the train run logs every N iterations, each entry their '
        'mean (5; --tiny 1)')
    parser.add_argument(
        '--runtime-info',
        help="the train run's default_hooks.runtime_info type instead of "
        "the config's (LazyRuntimeInfoHook), e.g. RuntimeInfoHook: "
        "mmengine's, which reads the step's losses every iteration")
    parser.add_argument(
        '--model-steps',
        type=int,
        help='timed model-only steps, the fastest counts (5; --tiny 3)')
    parser.add_argument(
        '--model-warmup',
        type=int,
        default=1,
        help='untimed model-only steps first (1)')
    parser.add_argument(
        '--profile-steps',
        type=int,
        default=0,
        help='model-only steps profiled after the timed ones, with the '
        "GPU's busy time and the top host and device operations (0: none)")
    parser.add_argument(
        '--max-batch',
        type=int,
        help='cap on the per-process batch (none on a GPU, 32 on the '
        'CPU, 2 with --tiny); the table names the config\'s beside it')
    parser.add_argument(
        '--max-images',
        type=int,
        default=1024,
        help='generated training images at most; epoch-based configs run '
        'several epochs of them (1024)')
    parser.add_argument(
        '--workers',
        type=int,
        help='loader workers of the train run instead of the config\'s '
        '(turns auto_num_workers off)')
    parser.add_argument(
        '--threads',
        type=int,
        help='torch threads of the model-only step and the training '
        'process (OMP_NUM_THREADS); default torch\'s')
    parser.add_argument(
        '--compile',
        action='store_true',
        help='compile: --compile to tools/train.py, and the model-only '
        'step compiled the same way (inductor)')
    parser.add_argument(
        '--amp', action='store_true', help='pass --amp to tools/train.py')
    parser.add_argument(
        '--work-root',
        help='where data, configs and runs go (a new temporary folder); '
        'generated data is kept and reused there')
    parser.add_argument('--out', help='also write the markdown here')
    parser.add_argument('--json', help='also write the report as JSON here')
    args = parser.parse_args(argv)
    tiny = args.tiny
    # (without --tiny, --iters and --warmup default per family: iterations())
    defaults = dict(
        iters=5 if tiny else None,
        warmup=2 if tiny else None,
        loader_images=8 if tiny else 128,
        log_every=1 if tiny else LOG_EVERY,
        model_steps=3 if tiny else 5)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.max_batch is None:
        import torch
        args.max_batch = 2 if tiny else (
            0 if torch.cuda.is_available() else 32)
    if args.log_every < 1:
        parser.error(f'--log-every {args.log_every}: at least 1')
    if None not in (args.warmup, args.iters) and args.warmup >= args.iters:
        parser.error(f'--warmup {args.warmup} leaves none of --iters '
                     f'{args.iters} timed')
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    import torch
    args = parse_args(argv)
    threads = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        report = run(args)
    finally:
        torch.set_num_threads(threads)
    # (the JSON is written as each family ends, by run)
    print_and_save(markdown(report), args.out)
    return 1 if any('error' in fam for fam in report['families']) else 0


def run(args: argparse.Namespace) -> Dict:
    """Every family of ``args``: the report (a family that fails has its
    ``error`` instead of figures)."""
    root = args.work_root or tempfile.mkdtemp(prefix='bench_train_path_')
    report = dict(
        machine=machine(),
        settings={
            k: v
            for k, v in vars(args).items() if k not in ('out', 'json')
        },
        work_root=root,
        families=[])
    for family in args.families:
        print(f'{family} ...', file=sys.stderr, flush=True)
        try:
            report['families'].append(run_family(family, args, root))
        except Exception as err:  # noqa: BLE001 -- reported in the row
            report['families'].append(failed_family(family, err))
        report['load_average_end'] = list(os.getloadavg())
        if args.json:  # a run cut short keeps the families done
            with open(args.json, 'w') as f:
                json.dump(report, f, indent=1)
    return report


if __name__ == '__main__':
    sys.exit(main())
