"""The host loop on the user's paths, timed, one section per question
(``--section``; docs/speed.md gives the figures and their reading):
``train``, for each family's LaPE config on generated data of the real
sets' size and format, times the train loader alone (per worker), the
model's ``train_step`` alone (optionally profiled) and ``tools/train.py``
end to end, and the run against the bound its model and loader set;
``test`` times the test loader, ``test_step`` and ``tools/test.py`` with
the config's evaluator and with mmpretrain's ``Accuracy``; ``syncs`` counts
the reads from the device per training iteration with
``LazyRuntimeInfoHook`` and with mmengine's ``RuntimeInfoHook``;
``overheads`` (``collate``, ``labels``, ``optimizer``, ``metric``, ``ema``)
times the classification configs' host parts against the hosts',
interleaved, with the operations, host copies or bytes that differ.

Example:
    python benchmarks/bench_host_loop.py --section train --out train.md
    python benchmarks/bench_host_loop.py --section test --families deit
    python benchmarks/bench_host_loop.py --section syncs --amp  # a GPU
    python benchmarks/bench_host_loop.py --section metric,ema
    python benchmarks/bench_host_loop.py --section all --tiny
"""
import collections
import contextlib
import copy
import glob
import importlib
import itertools
import json
import logging
import math
import os
import os.path as osp
import pickle
import platform
import re
import shutil
import sys
import tempfile
import time
import warnings
from typing import Callable, Dict, List, Optional
from unittest import mock

import torch
from mmengine.config import Config
from mmengine.dataset import default_collate, pseudo_collate
from mmengine.hooks import Hook
from mmengine.logging import MMLogger
from mmengine.model import revert_sync_batchnorm
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS, DefaultScope, init_default_scope
from mmengine.runner import Runner
from shared import (ROOT, TINY_ARCH, error_text, fastest, parser,
                    print_and_save, run_tool, table, write_config)
from small_dense import DENSE_CONFIGS, ade_data, coco_data, model_overrides
from torch.utils.data._utils.pin_memory import pin_memory

from mmlape.hosts.loader_workers import apply_auto_num_workers

_DEIT = 'configs/deit/deit-{}-lape_4xb256_in1k.py'
_SWIN_TINY = dict(backbone=dict(arch='test-tiny'), head=dict(in_channels=128))
_SWIN_RUN = dict(param_scheduler=[
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-5,
        by_epoch=True,
        begin=0,
        end=1,
        convert_to_iter_based=True)
])
#: The train families: the LaPE config, the data format; ``tiny_model``:
#: ``--tiny``'s model where not the ViT of :data:`TINY_ARCH` (the dense
#: families: ``small_dense``'s); ``run``: more config entries (Swin: the
#: recipe's cosine over the run's one epoch, its warm-up would follow it).
FAMILIES = {
    name: dict(config=_DEIT.format(arch), data='imagenet')
    for name, arch in (('deit', 'tiny'), ('deit-base', 'base'))
}
FAMILIES['swin'] = dict(
    config='configs/swin/swin-tiny-lape_16xb64_in1k.py',
    data='imagenet',
    tiny_model=_SWIN_TINY,
    run=_SWIN_RUN)
for _family, _data in (('mask-rcnn', 'coco'), ('upernet', 'ade'), ('segmenter',
                                                                   'ade')):
    FAMILIES[_family] = dict(
        config=DENSE_CONFIGS[_family].format('-lape'), data=_data)
#: Each format's image ``(height, width)``, real and ``--tiny``, and files.
DATA = {
    'imagenet': ((375, 500), (48, 64), 'train/*/*.JPEG'),
    'imagenet-val': ((375, 500), (48, 64), 'val/*.JPEG'),
    'coco': ((480, 640), (64, 80), 'train2017/*.jpg'),
    'ade': ((512, 683), (96, 128), 'images/training/*.jpg'),
}
#: COCO has about 7.3 instances per training image: 1..14, 7.5 on average.
COCO_MAX_OBJECTS = 14
DEFAULT_FAMILIES = ('deit', 'deit-base', 'mask-rcnn', 'upernet', 'segmenter')
PARTS = ('loader', 'model', 'train')
COLUMNS = ('family', 'batch', 'loader img/s per worker (CPU time)',
           'loader img/s per worker (wall)', 'model-only img/s',
           'tools/train.py img/s', 'data_time share', 'workers',
           'train / bound')
#: Warm-up iterations per batch queued at the start, the iterations a log
#: entry covers, the iterations timed after the warm-up, the profile's rows.
DRAIN_PER_QUEUED, LOG_EVERY, TIMED_ITERS, PROFILE_TOP = 5, 5, 25, 12
#: The test families, and its evaluators (the config's, mmpretrain's).
TEST_FAMILIES = ('deit', 'deit-base')
EVALUATORS = ('config', 'Accuracy')
TEST_LINE = re.compile(r'Epoch\(test\)\s*\[\s*(\d+)/(\d+)\].*?'
                       r'\btime: ([\d.]+)\s+data_time: ([\d.]+)')
TEST_COLUMNS = ('family', 'batch', 'evaluator',
                'loader img/s per worker (CPU time)', 'model-only img/s',
                'workers the model needs', 'tools/test.py img/s',
                'data_time share', 'workers', 'top-1', 'same metrics')
#: The syncs families (Swin's recipe clips the gradient norm, which
#: mmengine logs every step) and hooks (lazy_log's, mmengine's).
SYNC_FAMILIES = ('deit', 'deit-base', 'swin')
HOOKS = ('LazyRuntimeInfoHook', 'RuntimeInfoHook')
#: The overheads: name -> (config, image size); the batch is the config's.
CONFIGS = {
    'deit': (_DEIT.format('tiny'), 224),
    'cifar':
    ('configs/vit_lite/vit-lite-7-4-lape_1xb128-310e_cifar100.py', 32),
    't2t': ('configs/t2t_vit/t2t-vit-7-lape_8xb64_in1k.py', 224),
}
OVERHEADS = ('collate', 'labels', 'optimizer', 'metric', 'ema')
SECTION_CONFIGS = dict(
    dict.fromkeys(OVERHEADS[:4], ('deit', 'cifar')), ema=('t2t', ))
#: Each overhead's cases: the hosts', then the configs' (x = time over it).
COLLATES = ('pseudo_collate', 'default_collate')
PREPROCESSORS = ('ClsDataPreprocessor', 'LaPEClsDataPreprocessor')
GROUPINGS = ('one group per parameter', 'one group per option set')
ACCURACIES = ('Accuracy', 'LaPEAccuracy')
AVERAGES = ('ExponentialMovingAverage', 'LaPEExponentialMovingAverage')
LABEL_IMAGE_SIZE = 8  # the labels' images (the images are not what differs)
SECTIONS = ('train', 'test', 'syncs') + OVERHEADS

# ---------------------------------------------------------------------------
# shared: the machine, data, configs, the loader, the model


def machine() -> Dict:
    """What the figures were measured on."""
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration), \
            open('/proc/cpuinfo') as f:
        name = next(
            line.split(':', 1)[1].strip() for line in f
            if line.startswith('model name'))
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
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


def generate_data(kind: str, root: str, images: int, tiny: bool) -> Dict:
    """``images`` generated images of format ``kind`` (``imagenet-val``:
    validation images) under ``root``, kept where made before."""
    from mmlape.datasets import (generate_ade20k, generate_coco_instances,
                                 generate_imagenet)
    size, stamp = DATA[kind][1 if tiny else 0], root + '.json'
    spec = dict(kind=kind, images=images, size=list(size), version=1)
    kept = False
    if osp.isfile(stamp):
        with open(stamp) as f:
            kept = json.load(f) == spec
    if not kept:
        # another set's files would stay in the folders that mmseg scans
        shutil.rmtree(root, ignore_errors=True)
        dense = dict(size=size, num_val=1, background='natural', quality=90)
        val = kind == 'imagenet-val'
        if kind.startswith('imagenet'):
            generate_imagenet(root, 0 if val else images, images if val else 2,
                              100, size)
        elif kind == 'coco':
            generate_coco_instances(
                root, num_train=images, max_objects=COCO_MAX_OBJECTS, **dense)
        else:
            generate_ade20k(root, num_train=images, **dense)
        with open(stamp, 'w') as f:
            json.dump(spec, f)
    files = glob.glob(osp.join(root, DATA[kind][2]))
    mean_kb = sum(osp.getsize(f) for f in files) / max(1, len(files)) / 1e3
    return dict(
        format=kind, images=len(files), size=list(size), mean_kb=mean_kb)


def load_run_config(path: str):
    """The run's config as the tools prepare it (checked image loading,
    scope initialised, the hosts adjusted as the tools adjust them)."""
    import mmlape.hosts
    from mmlape.apis import register_scope_modules
    from mmlape.datasets.checks import use_checked_image_loading
    mmlape.hosts.apply()
    cfg = Config.fromfile(path)
    init_default_scope(register_scope_modules(cfg))
    use_checked_image_loading(cfg, ('train', ))
    return cfg


def dumped_workers(pattern: str, loader: str) -> Optional[int]:
    """``num_workers`` of ``loader`` in the config a run dumped (found by
    ``pattern``), after ``auto_num_workers``."""
    dumped = glob.glob(pattern)
    if not dumped:
        return None
    cfg = Config.fromfile(dumped[0], import_custom_modules=False)
    return cfg[loader].get('num_workers', 0)


def measure_loader(cfg, images: int, loader: str = 'train_dataloader') -> Dict:
    """Images per second of the config's ``loader`` run in this process on
    one thread (one worker's work), after one warm-up batch (``batch``)."""
    import cv2
    loader_cfg = copy.deepcopy(cfg[loader])
    loader_cfg.update(
        num_workers=0, persistent_workers=False, pin_memory=False)
    threads, cv2_threads = torch.get_num_threads(), cv2.getNumThreads()
    torch.set_num_threads(1)  # what a DataLoader worker runs with
    cv2.setNumThreads(0)  # mmengine's default for the training processes
    try:
        built = Runner.build_dataloader(loader_cfg, seed=0)
        source = (b for _ in itertools.count() for b in built)  # epochs
        first, count = next(source), 0
        wall, cpu = time.perf_counter(), time.process_time()
        while count < images:
            count += len(next(source)['inputs'])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
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


def prepare(cfg, batch: Dict, loader: str):
    """The config's model (its data preprocessor included) on the device,
    in training mode for the train loader, cuDNN as the runner sets it;
    ``batch`` pinned where ``loader`` pins it; the device, its sync."""
    model_cfg = copy.deepcopy(cfg.model)
    if cfg.get('data_preprocessor') is not None:
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    model = revert_sync_batchnorm(MODELS.build(model_cfg))
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    torch.backends.cudnn.benchmark = bool(
        cfg.get('env_cfg', {}).get('cudnn_benchmark', False))
    model.to(device).train(loader == 'train_dataloader')
    if device == 'cuda' and cfg[loader].get('pin_memory'):
        batch = pin_memory(batch)  # as the run's loader hands it over
    sync = torch.cuda.synchronize if device == 'cuda' else (lambda: None)
    return model, batch, device, sync


def use_amp(optim_cfg):
    """``optim_cfg`` as ``tools/train.py --amp`` makes it."""
    optim_cfg.type = 'AmpOptimWrapper'
    optim_cfg.setdefault('loss_scale', 'dynamic')
    return optim_cfg


@contextlib.contextmanager
def quiet_logger():
    """mmengine's logger at warnings (not every parameter's options)."""
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


# ---------------------------------------------------------------------------
# train: the loader, the model and tools/train.py per family


def base_loader(config: str) -> Dict:
    """The config's train dataloader: batch size and worker settings."""
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


def queue_batches(base: Dict, workers: Optional[int], cpus=None) -> int:
    """Batches the train loader holds ready before the first step: its
    workers (``workers``, else ``auto_num_workers`` resolved for ``cpus``
    as the tools resolve it, else ``num_workers``) x ``prefetch_factor``."""
    if workers is None:
        cfg = Config(
            dict(
                auto_num_workers=base['auto_num_workers'],
                launcher='none',
                train_dataloader=dict(num_workers=base['num_workers'])))
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
    """The dataset repeated ``times``, so that one epoch holds every timed
    iteration (an epoch of a few batches keeps most workers idle)."""
    return dict(
        _delete_=True,
        type='RepeatDataset',
        times=times,
        dataset=dict(dataset, data_root=data_root))


def overrides(family,
              data_root,
              batch,
              iters,
              epoch_iters,
              tiny,
              workers,
              base,
              log_every=1,
              runtime_info=None) -> Dict:
    """Config entries of a train run: the generated data, ``batch``,
    ``iters`` iterations (``epoch_iters`` an epoch where the loop counts
    epochs), no checkpoint on the way; with ``tiny`` the small model (and
    the dense tests' pipelines); ``workers`` for the config's; a log entry,
    their mean, every ``log_every`` iterations; the ``runtime_info``
    hook."""
    loader_workers = dict(
        num_workers=base['num_workers'] if workers is None else workers,
        persistent_workers=base['persistent_workers'],
        pin_memory=base['pin_memory'])
    if not loader_workers['num_workers']:
        loader_workers['persistent_workers'] = False
    checkpoint = dict(interval=10**6, save_last=False, max_keep_ckpts=1)
    hooks = dict(logger=dict(interval=log_every), checkpoint=checkpoint)
    over: Dict = dict(
        default_hooks=hooks,
        randomness=dict(seed=0),
        log_processor=dict(window_size=log_every))
    if runtime_info:
        hooks['runtime_info'] = dict(type=runtime_info)
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
    else:
        over['model'] = dict(backbone=dict(init_cfg=None))
        if tiny and family == 'mask-rcnn':
            data = coco_data(data_root + '/', (80, 64), {})
        elif tiny:
            data = ade_data(data_root, 64, {})
            over['model']['data_preprocessor'] = dict(size=(64, 64))
        if tiny:
            over['model'].update(model_overrides(family, init_cfg=None))
            over['train_dataloader'] = data['train_dataloader']
        loader = over.setdefault('train_dataloader', dict(dataset={}))
        loader['batch_size'] = batch
        if family == 'mask-rcnn':
            dataset = dict(base['dataset'], **loader['dataset'])
            loader['dataset'] = one_epoch(dataset, data_root + '/', times)
            over['train_cfg'] = dict(max_epochs=1)
        else:
            loader['dataset']['data_root'] = data_root
            checkpoint.update(by_epoch=False, save_best=None)
            over['train_cfg'] = dict(max_iters=iters, val_interval=iters)
    over['train_dataloader'].update(loader_workers)
    over.update(FAMILIES[family].get('run', {}))
    return over


def train_command(config: str, work_dir: str, compile_=False, amp=False):
    """The ``tools/train.py`` command line (``--compile``, ``--amp``)."""
    tool = osp.join(ROOT, 'tools', 'train.py')
    return [
        sys.executable, tool, config, '--work-dir', work_dir, '--no-validate'
    ] + ['--compile'] * compile_ + ['--amp'] * amp


def measure_model(cfg,
                  batch: Dict,
                  steps: int,
                  warmup: int,
                  amp: bool,
                  compile_=False,
                  profile_steps=0,
                  profile_path=None) -> Dict:
    """Seconds per ``train_step`` of the config's model on ``batch``, the
    fastest of ``steps`` after ``warmup`` in wall and in CPU time; with
    ``compile_`` compiled as ``--compile`` compiles it; then
    ``profile_steps`` more profiled (the table to ``profile_path``)."""
    model, batch, device, sync = prepare(cfg, batch, 'train_dataloader')
    if compile_:
        from mmlape.hosts.compile import compile_targets
        for module in compile_targets(model, 'auto', cfg.default_scope)[0]:
            module.compile()
    optim_cfg = copy.deepcopy(cfg.optim_wrapper)
    with quiet_logger():
        optim = build_optim_wrapper(model,
                                    use_amp(optim_cfg) if amp else optim_cfg)
    cpu: Dict = {}
    wall = fastest({0: lambda: model.train_step(batch, optim)},
                   steps,
                   warmup,
                   sync=sync,
                   cpu=cpu)
    result = dict(
        steps=steps,
        s_per_step=wall[0],
        cpu_s_per_step=cpu[0],
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


def profile_steps_of(step: Callable, steps: int, sync: Callable, path=None):
    """``steps`` calls of ``step`` under ``torch.profiler``, each followed
    by ``sync()``: wall and CPU time, the device's busy time (None on the
    CPU) and the operations with the most self host and device time, per
    step; the profiler's whole table to ``path``."""
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
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    found = prof.key_averages()
    busy = _device_busy_us(prof.events())

    def top(key: Callable, unit: str) -> List[Dict]:
        rows = sorted((e for e in found if key(e) > 0), key=key, reverse=True)
        return [{
            'name': e.key,
            'calls_per_step': e.count / steps,
            f'{unit}_ms_per_step': key(e) / 1e3 / steps
        } for e in rows[:PROFILE_TOP]]

    if path:
        sort = 'self_cpu_time_total' if busy is None else \
            'self_device_time_total'
        with open(path, 'w') as f:
            f.write(found.table(sort_by=sort, row_limit=60))

    def device_us(e):  # (the name in torch >= 2.4; self_cuda_... before)
        return getattr(e, 'self_device_time_total',
                       getattr(e, 'self_cuda_time_total', 0.0))

    return dict(
        steps=steps,
        wall_ms_per_step=wall * 1e3 / steps,
        cpu_ms_per_step=cpu * 1e3 / steps,
        device_busy_ms_per_step=None if busy is None else busy / 1e3 / steps,
        host_top=top(lambda e: e.self_cpu_time_total, 'host'),
        device_top=top(device_us, 'device') if busy is not None else [],
        table=path)


def read_train_log(work_dir: str, warmup: int, every: int = 1) -> Dict:
    """``time`` and ``data_time`` per iteration from a run's scalars.json,
    logged every ``every`` iterations (each entry their mean): the entries
    whose iterations all follow the first ``warmup``."""
    found = sorted(
        glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')))
    if not found:
        raise RuntimeError(f'no vis_data/scalars.json under {work_dir}')
    with open(found[-1]) as f:
        entries = [json.loads(line) for line in f]
    entries = [e for e in entries if 'time' in e and 'data_time' in e]
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
    return dict(
        logged=len(entries),
        log_every=every,
        timed=len(timed) * every,
        s_per_iter=sum(e['time'] for e in timed) / len(timed),
        data_s_per_iter=sum(e['data_time'] for e in timed) / len(timed),
        scalars=found[-1])


def measure_train(config: str, work_dir: str, warmup: int, args) -> Dict:
    """``tools/train.py`` end to end; figures from its log."""
    os.makedirs(work_dir, exist_ok=True)
    log = osp.join(work_dir, 'train.out')
    cmd = train_command(config, work_dir, args.compile, args.amp)
    wall = run_tool(cmd, log, args.threads)
    result = read_train_log(work_dir, warmup, args.log_every)
    with open(log) as f:
        logged = f.read().count('auto_num_workers: ')
    result.update(
        workers=dumped_workers(osp.join(work_dir, '*.py'), 'train_dataloader'),
        auto_num_workers_logged=logged,
        wall_s=wall,
        compile=args.compile,
        runtime_info=args.runtime_info or 'the config\'s',
        command=' '.join(cmd[1:]))
    return result


def bound(model: Dict, loader: Dict, workers: int, cpus: int) -> Dict:
    """The most images per second a training process can make, from
    figures that load cannot lower: a step takes at least its CPU time over
    its threads (on a GPU: its fastest wall time), a worker makes at most
    its CPU-time rate, ``workers`` of them share ``cpus`` CPUs; with no
    workers the two times add up. ``img_s`` and ``limited_by``."""
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


def run_family(family: str, args, root: str) -> Dict:
    """Data, the three measurements and the bound of one train family."""
    print(f'{family} ...', file=sys.stderr, flush=True)
    stages: Dict[str, float] = {}
    clock = [time.perf_counter()]

    def stage(name: str) -> None:
        stages[name] = round(time.perf_counter() - clock[0], 2)
        clock[0] = time.perf_counter()

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
    h, w = DATA[spec['data']][1 if args.tiny else 0]
    data_root = osp.join(root, 'data',
                         f"{spec['data']}-{w}x{h}-{per_epoch * batch}")
    data = generate_data(spec['data'], data_root, per_epoch * batch, args.tiny)
    stage('data')
    work = osp.join(root, family)
    shutil.rmtree(work, ignore_errors=True)
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
    loader = result['loader'] = measure_loader(cfg, args.loader_images)
    held = loader.pop('batch')
    stage('loader')
    if 'model' in args.parts:
        model = result['model'] = measure_model(
            cfg, held, args.model_steps, args.model_warmup, args.amp,
            args.compile, args.profile_steps,
            osp.join(root, f'{family}-profile.txt'))
        model['batch'] = len(held['inputs'])
        model['img_s'] = model['batch'] / model['s_per_step']
        stage('model')
    if 'train' in args.parts:
        train = result['train'] = measure_train(config, work, plan['warmup'],
                                                args)
        train.update(plan, queue_batches=queue)
        train['img_s'] = batch / train['s_per_iter']
        train['data_share'] = train['data_s_per_iter'] / train['s_per_iter']
        stage('train')
    if 'model' in result and 'train' in result:
        limit = result['bound'] = bound(model, loader, train['workers'] or 0,
                                        len(os.sched_getaffinity(0)))
        limit['train_over_bound'] = train['img_s'] / limit['img_s']
    return result


def markdown(report: Dict) -> str:
    """The train report: a caption, a row per family, the profiles."""
    m, settings = report['machine'], report['settings']
    lines = [
        f"{m['cpu']}, {m['cpus']} CPUs, {m['gpu'] or 'no GPU'}, torch "
        f"{m['torch']} ({m['torch_threads']} threads), {m['date']}; load "
        f"average {m['load_average'][0]:.1f} at the start, "
        f"{report['load_average_end'][0]:.1f} at the end; tools/train.py "
        'and the model-only step ' + ('compiled (--compile, inductor).'
                                      if settings['compile'] else 'eager.') +
        runtime_info_note(settings), ''
    ]
    rows = []
    for fam in report['families']:
        if 'error' in fam:
            rows.append([fam['family'], f"failed: {fam['error']}"])
            continue
        loader = fam['loader']
        model, train, limit = (fam.get(k) for k in ('model', 'train', 'bound'))
        batch = str(fam['batch'])
        if fam['batch'] != fam['config_batch']:
            batch += f" (config {fam['config_batch']})"
        rows.append([
            fam['family'], batch,
            rate(loader['img_s_cpu']),
            rate(loader['img_s_wall']),
            rate(model['img_s']) if model else '-',
            rate(train['img_s']) if train else '-',
            f"{train['data_share']:.0%}" if train else '-',
            train['workers'] if train else '-',
            f"{limit['train_over_bound']:.2f} ({limit['limited_by']})"
            if limit else '-'
        ])
    lines += table(COLUMNS, rows) + profile_markdown(report)
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
    hook = settings.get('runtime_info')
    hook = f'{hook} as its' if hook else "the config's"
    return (f" The train run logged every {settings.get('log_every') or 1} "
            f'iteration(s) with {hook} runtime_info hook.')


def profile_markdown(report: Dict) -> List[str]:
    """The profiled model-only steps: a row per family, then each family's
    top host and device operations."""
    profiled = [(f['family'], f['model']['profile'])
                for f in report['families'] if 'profile' in f.get('model', {})]
    if not profiled:
        return []
    rows, tops = [], []
    for family, prof in profiled:
        if 'error' in prof:
            rows.append([family, prof['steps'], f"failed: {prof['error']}"])
            continue
        busy, wall = prof['device_busy_ms_per_step'], prof['wall_ms_per_step']
        rows.append([
            family, prof['steps'], f'{wall:.2f}',
            '-' if busy is None else f'{busy:.2f}',
            '-' if busy is None else f'{1 - busy / wall:.0%}',
            f"{prof['cpu_ms_per_step']:.2f}"
        ])
        for kind in ('host', 'device'):
            if prof.get(f'{kind}_top'):
                tops += [
                    '', f'{family}, the operations with the most self {kind} '
                    'time:', ''
                ] + table(('operation', 'calls/step', f'{kind} ms/step'),
                          [(f"`{r['name'][:80]}`", f"{r['calls_per_step']:g}",
                            f"{r[f'{kind}_ms_per_step']:.3f}")
                           for r in prof[f'{kind}_top']])
    return [
        '', 'Model-only steps under torch.profiler (each ended by a '
        "synchronisation, as mmengine's RuntimeInfoHook ends each iteration; "
        'LazyRuntimeInfoHook, speedups.lazy_log, does not):', ''
    ] + table(('family', 'steps', 'wall ms/step', 'GPU busy ms/step',
               'GPU idle', 'process CPU ms/step'), rows) + tops


def each_family(report: Dict,
                measure: Callable,
                args,
                root: str,
                after: Callable = lambda report: None) -> Dict:
    """``report['families']``: ``measure(family, args, root)`` of every
    family of ``args`` (one that fails has its ``error``), ``after(report)``
    as each ends."""
    report['families'] = []
    for family in args.families:
        try:
            report['families'].append(measure(family, args, root))
        except Exception as err:  # noqa: BLE001 -- reported in the row
            report['families'].append(
                dict(family=family, error=error_text(err, 300)))
        after(report)
    return report


def run_train(args, save: Callable[[Dict], None]) -> Dict:
    """Every train family, the report saved as each family ends (a run cut
    short keeps the families done)."""

    def after(report):
        report['load_average_end'] = list(os.getloadavg())
        save(report)

    root = args.work_root or tempfile.mkdtemp(prefix='host_loop_train_')
    report = dict(
        machine=machine(), settings=settings_of(args), work_root=root)
    return each_family(report, run_family, args, root, after)


# ---------------------------------------------------------------------------
# test: tools/test.py with each evaluator, the model's step, the loader


def eval_overrides(config: str, data_root: str, batch: int, times: int,
                   tiny: bool, workers: Optional[int], evaluator: str) -> Dict:
    """Config entries of a test run: the generated set repeated ``times``
    through the config's test pipeline, ``batch`` images a batch, each
    iteration logged; ``tiny``: the small model; ``workers`` for the
    config's; ``evaluator``: ``config`` or ``Accuracy`` (mmpretrain's)."""
    test = Config.fromfile(osp.join(ROOT, config)).test_dataloader
    dataset = dict(
        type='ImageNet',
        data_root=data_root,
        data_prefix='val',
        ann_file='meta/val.txt',
        pipeline=test.dataset.pipeline)
    loader = dict(
        batch_size=batch,
        dataset=dict(
            _delete_=True, type='RepeatDataset', times=times, dataset=dataset))
    over: Dict = dict(
        default_hooks=dict(logger=dict(interval=1)),
        log_processor=dict(window_size=1),
        test_dataloader=loader)
    if workers is not None:
        over['auto_num_workers'] = None
        loader.update(num_workers=workers, persistent_workers=bool(workers))
    if evaluator == 'Accuracy':
        over['test_evaluator'] = dict(type='Accuracy')
    if tiny:
        over['model'] = dict(
            backbone=dict(arch=dict(TINY_ARCH, _delete_=True)),
            head=dict(in_channels=TINY_ARCH['embed_dims']))
    return over


def measure_eval_step(cfg, batch: Dict, steps: int, warmup: int,
                      amp: bool) -> Dict:
    """Seconds per ``test_step`` of the config's model on ``batch`` (a
    fresh copy of its samples each time), the fastest of ``steps`` after
    ``warmup``."""
    model, batch, device, sync = prepare(cfg, batch, 'test_dataloader')
    dtype = torch.float16 if device == 'cuda' else torch.bfloat16
    data: List[Dict] = []

    def fresh():
        samples = copy.deepcopy(batch['data_samples'])
        data[:] = [dict(batch, data_samples=samples)]

    def step():
        with torch.no_grad(), torch.autocast(device, dtype, enabled=amp):
            model.test_step(data[0])

    best = fastest({0: step}, steps, warmup, setups={0: fresh}, sync=sync)[0]
    images = len(batch['inputs'])
    return dict(
        steps=steps,
        batch=images,
        s_per_step=best,
        img_s=images / best,
        device=device)


def read_test_log(work_dir: str, warmup: int) -> Dict:
    """Per-iteration ``time`` and ``data_time`` of a test run's text log,
    the first ``warmup`` iterations left out, and its metrics."""
    logs = sorted(glob.glob(osp.join(work_dir, '*', '*.log')))
    if not logs:
        raise RuntimeError(f'no test log under {work_dir}')
    with open(logs[-1]) as f:
        found = [m.groups() for m in TEST_LINE.finditer(f.read())]
    timed = [(float(t), float(d)) for i, _, t, d in found if int(i) > warmup]
    if not timed:
        raise RuntimeError(f'{len(found)} test iterations logged in '
                           f'{logs[-1]}, none after the {warmup} warm-up '
                           'ones')
    with open(osp.join(work_dir, 'test_metrics.json')) as f:
        metrics = json.load(f)
    return dict(
        logged=len(found),
        timed=len(timed),
        s_per_iter=sum(t for t, _ in timed) / len(timed),
        data_s_per_iter=sum(d for _, d in timed) / len(timed),
        metrics=metrics,
        log=logs[-1])


def run_test(config: str, checkpoint: str, work_dir: str, args) -> Dict:
    """``tools/test.py`` end to end; figures from its log."""
    os.makedirs(work_dir, exist_ok=True)
    cmd = [
        sys.executable,
        osp.join(ROOT, 'tools', 'test.py'), config, checkpoint, '--work-dir',
        work_dir
    ] + ['--amp'] * args.amp + ['--compile'] * args.compile
    run_tool(cmd, osp.join(work_dir, 'test.out'), args.threads)
    result = read_test_log(work_dir, args.warmup)
    dumped = osp.join(work_dir, '*', 'vis_data', 'config.py')
    result.update(
        workers=dumped_workers(dumped, 'test_dataloader'),
        command=' '.join(cmd[1:]))
    return result


def run_test_family(family: str, args, root: str) -> Dict:
    """The data, the checkpoint (the model as it initialises), the loader,
    the model-only step and a test run per evaluator of one family."""
    config = FAMILIES[family]['config']
    batch = Config.fromfile(osp.join(ROOT, config)).test_dataloader.batch_size
    batch = min(batch, args.max_batch or batch)
    images = min(args.max_images, batch * args.iters)
    h, w = DATA['imagenet-val'][1 if args.tiny else 0]
    data_root = osp.join(root, 'data', f'imagenet-val-{w}x{h}-{images}')
    data = generate_data('imagenet-val', data_root, images, args.tiny)
    times = -(-batch * args.iters // images)
    work = osp.join(root, family)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    result = dict(family=family, config=config, batch=batch, data=data)
    runs = result['test'] = {}
    for evaluator in EVALUATORS:
        over = eval_overrides(config, data_root, batch, times, args.tiny,
                              args.workers, evaluator)
        path = write_config(
            osp.join(work, f'{family}-{evaluator}.py'), config, over)
        if evaluator == EVALUATORS[0]:
            cfg = load_run_config(path)
            checkpoint = osp.join(work, 'init.pth')
            model = MODELS.build(copy.deepcopy(cfg.model))
            model.init_weights()
            torch.save(
                dict(meta={}, state_dict=model.state_dict()), checkpoint)
            loader = result['loader'] = measure_loader(
                cfg, args.loader_images or batch, 'test_dataloader')
            result['model'] = measure_eval_step(cfg, loader.pop('batch'),
                                                args.model_steps, 2, args.amp)
            result['workers_needed'] = \
                result['model']['img_s'] / loader['img_s_cpu']
            result['evaluator'] = cfg.test_evaluator.type
        run = runs[evaluator] = run_test(path, checkpoint,
                                         osp.join(work, evaluator), args)
        run['img_s'] = batch / run['s_per_iter']
        run['data_share'] = run['data_s_per_iter'] / run['s_per_iter']
    metrics = [r['metrics'] for r in runs.values()]
    result['same_metrics'] = all(m == metrics[0] for m in metrics)
    return result


def markdown_test(report: Dict) -> str:
    m, a = report['machine'], report['args']
    caption = (f"{m['gpu'] or m['cpu']}, {m['cpus']} CPUs, torch "
               f"{m['torch']}{', --amp' if a['amp'] else ''}"
               f"{', --compile' if a['compile'] else ''}; {a['iters']} test "
               f"iterations, the first {a['warmup']} untimed")
    rows = [(r['family'], r['batch'],
             r['evaluator'] if evaluator == 'config' else evaluator,
             rate(r['loader']['img_s_cpu']),
             rate(r['model']['img_s']), f"{r['workers_needed']:.1f}",
             rate(run['img_s']), f"{run['data_share']:.2f}", run['workers'],
             run['metrics'].get('accuracy/top1'), r['same_metrics'])
            for r in report['families']
            for evaluator, run in r['test'].items()]
    return '\n'.join([caption, ''] + table(TEST_COLUMNS, rows)) + '\n'


def run_test_section(args, save: Callable[[Dict], None]) -> Dict:
    root = args.work_root or tempfile.mkdtemp(prefix='host_loop_test_')
    keys = ('iters', 'warmup', 'amp', 'compile', 'tiny')
    report = dict(machine=machine(), args={k: getattr(args, k) for k in keys})
    report['families'] = [
        run_test_family(f, args, root) for f in args.families
    ]
    save(report)
    return report


# ---------------------------------------------------------------------------
# syncs: the training loop's reads from the device, per iteration


class Counter(Hook):
    """Reads per training iteration (counted as a hook that marks the
    iterations): CUDA synchronisations (warnings of PyTorch's sync debug
    mode) or, on the CPU, reads of tensor values."""
    priority = 'HIGHEST'

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.iteration: Optional[int] = None
        self.reads: Dict[int, List[str]] = collections.defaultdict(list)

    def record(self, what: str) -> None:
        if self.iteration is not None:
            self.reads[self.iteration].append(what)

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        self.iteration = runner.iter

    def after_train(self, runner):
        self.iteration = None


def _reads_mode(counter: Counter):
    """A ``TorchFunctionMode`` that records the reads of tensor values."""
    T = torch.Tensor
    reads = {
        T.item, T.tolist, T.__bool__, T.__float__, T.__int__, T.__index__,
        T.numpy
    }

    class Reads(torch.overrides.TorchFunctionMode):

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in reads:
                counter.record(func.__name__)
            return func(*args, **(kwargs or {}))

    return Reads()


def run_loop(cfg, counter: Counter) -> str:
    """Train with ``cfg`` in this process, counting the reads; the runner's
    runtime_info hook."""
    runner = Runner.from_cfg(cfg)
    runner.register_hook(counter)
    hook = next(
        type(h).__name__ for h in runner.hooks
        if type(h).__name__.endswith('RuntimeInfoHook'))
    if not counter.cuda:
        with _reads_mode(counter):
            runner.train()
        return hook
    previous, shown = torch.cuda.get_sync_debug_mode(), warnings.showwarning

    def show(message, category, filename, lineno, *args, **kwargs):
        # every such warning says the same: the line that made it names it
        if 'synchroniz' in str(message):
            counter.record(f'{osp.basename(filename)}:{lineno}')
        else:
            shown(message, category, filename, lineno, *args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter('always')
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode('warn')
        try:
            runner.train()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
            warnings.showwarning = shown
    return hook


def measure_syncs(family: str, args, root: str) -> Dict:
    """Both hooks' reads for ``family``."""
    spec = FAMILIES[family]
    base = base_loader(spec['config'])
    batch, iters = min(base['batch_size'], args.max_batch), args.iters
    data_root = osp.join(root, 'data', f'{family}-{batch * iters}')
    data = generate_data(spec['data'], data_root, batch * iters, args.tiny)
    cuda = torch.cuda.is_available()
    result = dict(
        family=family,
        config=spec['config'],
        batch=batch,
        iters=iters,
        log_every=args.log_every,
        device='cuda' if cuda else 'cpu',
        data=data,
        hooks=[])
    for hook in HOOKS:
        over = overrides(family, data_root, batch, iters, iters, args.tiny,
                         args.workers, base, args.log_every, hook)
        config = write_config(
            osp.join(root, f'{family}-{hook}.py'), spec['config'], over)
        cfg = load_run_config(config)
        cfg.work_dir = osp.join(root, f'{family}-{hook}')
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
        if cuda and args.amp:  # as tools/train.py --amp
            use_amp(cfg.optim_wrapper)
        cfg.launcher = 'none'
        counter = Counter(cuda)
        ran = run_loop(cfg, counter)
        reads = [counter.reads.get(i, []) for i in range(iters)]
        kinds = collections.Counter(what for each in reads for what in each)
        result['hooks'].append(
            dict(
                hook=ran,
                reads_per_iteration=[len(r) for r in reads],
                iterations_without=sum(1 for r in reads if not r),
                what=dict(kinds.most_common(8))))
    return result


def markdown_syncs(report: Dict) -> str:
    counted = ('CUDA synchronisations' if report['cuda'] else
               'reads of tensor values (on a GPU, each would wait)')
    rows = []
    for fam in report['families']:
        if 'error' in fam:
            rows.append([fam['family'], f"failed: {fam['error']}"])
        for hook in fam.get('hooks', []):
            what = ', '.join(f'`{k}` x{v}' for k, v in hook['what'].items())
            rows.append([
                fam['family'], fam['batch'], hook['hook'],
                f"{fam['iters']} (log every {fam['log_every']})",
                ' '.join(map(str, hook['reads_per_iteration'])),
                hook['iterations_without'], what or '-'
            ])
    return '\n'.join([
        f"{report['device']}, torch {report['torch']}: {counted} per "
        "training iteration (the runner's iterations, counted from 0).", ''
    ] + table(
        ('family', 'batch', 'runtime_info hook', 'iterations',
         'reads per iteration', 'iterations without', 'what'), rows)) + '\n'


def run_syncs(args, save: Callable[[Dict], None]) -> Dict:
    root = args.work_root or tempfile.mkdtemp(prefix='host_loop_syncs_')
    cuda = torch.cuda.is_available()
    report = dict(
        device=torch.cuda.get_device_name() if cuda else 'CPU',
        torch=torch.__version__,
        cuda=cuda,
        settings=settings_of(args))
    save(each_family(report, measure_syncs, args, root))
    return report


# ---------------------------------------------------------------------------
# overheads: the configs' host parts against the hosts'


def build_classifier(name: str, args, whole: bool):
    """The classifier of overhead config ``name`` (its data preprocessor
    with the batch augmentations the classifier gives it; a one-layer
    backbone unless ``whole``) on ``--device``, the config, the device."""
    from mmpretrain.registry import MODELS as CLASSIFIERS
    from mmpretrain.utils import register_all_modules
    register_all_modules(False)
    cfg = Config.fromfile(osp.join(ROOT, CONFIGS[name][0]))
    model_cfg = copy.deepcopy(cfg.model)
    model_cfg.data_preprocessor = cfg.data_preprocessor
    if not whole:
        model_cfg.backbone.arch = dict(
            embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=32)
        model_cfg.head.in_channels = 32
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = CLASSIFIERS.build(model_cfg)
    device = torch.device(args.device)
    return model.to(device), cfg, device


def make_items(batch: int, size: int, classes: int) -> List[Dict]:
    """``batch`` samples as ``PackInputs`` leaves them."""
    from mmpretrain.structures import DataSample
    gen = torch.Generator().manual_seed(0)
    return [
        dict(
            inputs=torch.randint(
                0, 256, (3, size, size), dtype=torch.uint8, generator=gen),
            data_samples=DataSample().set_gt_label(i % classes))
        for i in range(batch)
    ]


class OpCount(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the ATen operations dispatched inside it (``with OpCount() as
    count: ...``, then ``count.ops``; ``count.names``: each one's name)."""

    def __init__(self):
        super().__init__()
        self.ops, self.names = 0, []

    def __enter__(self):
        super().__enter__()
        return self

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


class HostCopies(torch.overrides.TorchFunctionMode):
    """Counts the copies to the host asked for inside it (``Tensor.cpu``,
    ``Tensor.to('cpu', ...)``; then ``.calls``); from a GPU each waits for
    the device unless it is non-blocking."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cpu or (func is torch.Tensor.to and any(
                str(a) == 'cpu' for a in (*args[1:], kwargs.get('device')))):
            self.calls += 1
        return func(*args, **kwargs)


@contextlib.contextmanager
def gathered_bytes():
    """Inside it, mmengine's ``collect_results`` (as the metrics call it)
    counts in ``[0]`` the bytes of what this process sends to be gathered,
    pickled as mmengine pickles it."""
    sent = [0]
    with contextlib.ExitStack() as stack:
        for name in ('mmengine.evaluator.metric', 'mmlape.hosts.cls_metric'):
            module = importlib.import_module(name)

            def counting(results,
                         *args,
                         _collect=module.collect_results,
                         **kwargs):
                sent[0] += len(pickle.dumps(results, protocol=2))
                return _collect(results, *args, **kwargs)

            stack.enter_context(
                mock.patch.object(module, 'collect_results', counting))
        yield sent


def _rows(section: str, name: str, args, cases: Dict, base: str,
          cells: Dict[str, Dict], per: int, **kwargs) -> List[Dict]:
    """A row per case of ``cells`` (case -> its cells): the section, the
    config, the cells, the time of ``cases[case]`` (ms, over ``per``) and
    ``x``, its time over ``base``'s; timed by :func:`shared.fastest` with
    the command line's rounds and calls, two warm-up rounds, the device's
    synchronisation and ``kwargs``."""
    sync = torch.cuda.synchronize if args.device.startswith('cuda') else (
        lambda: None)
    times = fastest(cases, args.rounds, 2, args.calls, sync=sync, **kwargs)
    times = {c: t / per for c, t in times.items()}
    return [
        dict(
            section=section,
            config=name,
            path=CONFIGS[name][0],
            case=case,
            **more,
            ms=times[case] * 1e3,
            x=times[case] / times[base]) for case, more in cells.items()
    ]


def _preprocessor_rows(section: str, name: str, preps: Dict, make_batch,
                       size: int, batch: int, args, timed: Callable):
    """The rows of a preprocessor section in both modes: each case's ATen
    operations on ``make_batch(case)`` and its time (``timed(training)``:
    the cases and setups); x against the last case's."""
    rows = []
    for training in (True, False):
        ops = {}
        for case, prep in preps.items():
            data = make_batch(case)
            with OpCount() as count:
                prep(data, training)
            ops[case] = count.ops
        mode = 'train' if training else 'eval'
        cells = {
            c: dict(batch=batch, size=size, mode=mode, ops=ops[c])
            for c in preps
        }
        rows += _rows(
            section,
            name,
            args,
            base=list(preps)[-1],
            per=1,
            cells=cells,
            **timed(training))
    return rows


def _batches(name: str, args, size: int):
    """The overhead config's one-layer classifier, config, device and
    batch size, and a fresh batch of samples (the preprocessors write the
    targets into the samples they are given) collated by ``collate``,
    pinned where the loaders pin it."""
    model, cfg, device = build_classifier(name, args, whole=False)
    batch = args.batch or cfg.train_dataloader.batch_size
    items = make_items(batch, size, cfg.data_preprocessor.num_classes)

    def make_batch(collate=default_collate):
        data = collate(copy.deepcopy(items))
        return pin_memory(data) if device.type == 'cuda' else data

    return model, cfg, device, batch, make_batch


def measure_collate(name: str, args) -> List[Dict]:
    size = CONFIGS[name][1]
    model, _, _, batch, collate = _batches(name, args, size)
    prep = model.data_preprocessor
    collates = dict(zip(COLLATES, (pseudo_collate, default_collate)))

    def make_batch(case):
        return collate(collates[case])

    # (timed rounds reuse one batch each; the label work is the same for
    # both collates)
    batches = {collate: make_batch(collate) for collate in COLLATES}

    def timed(t):
        return dict(cases={
            c: (lambda d=d: prep(d, t))
            for c, d in batches.items()
        })

    return _preprocessor_rows('collate', name, dict.fromkeys(COLLATES, prep),
                              make_batch, size, batch, args, timed)


def host_preprocessor(cfg, device: torch.device):
    """mmpretrain's ``ClsDataPreprocessor`` with the config's settings, its
    copy to the device, and batch augmentations as mmpretrain's classifier
    gives them."""
    from mmpretrain.models.utils import ClsDataPreprocessor
    kwargs = {
        k: v
        for k, v in cfg.data_preprocessor.items()
        if k not in ('type', 'non_blocking')
    }
    train_cfg = cfg.model.get('train_cfg')
    if train_cfg is not None and 'augments' in train_cfg:
        kwargs['batch_augments'] = copy.deepcopy(train_cfg)
    prep = ClsDataPreprocessor(**kwargs).to(device)
    # the config's copy (mmengine's option, which mmpretrain's does not
    # take as an argument): only the labels' work differs
    prep._non_blocking = bool(cfg.data_preprocessor.get('non_blocking'))
    return prep


def measure_labels(name: str, args) -> List[Dict]:
    model, cfg, device, batch, make_batch = _batches(name, args,
                                                     LABEL_IMAGE_SIZE)
    preps = dict(
        zip(PREPROCESSORS,
            (host_preprocessor(cfg, device), model.data_preprocessor)))
    assert type(preps[PREPROCESSORS[1]]).__name__ == PREPROCESSORS[1], \
        f'{CONFIGS[name][0]} does not name {PREPROCESSORS[1]}'
    # every call gets fresh samples, made before its block: the
    # preprocessors write the targets into the samples, and a sample that
    # holds one takes another path
    fresh: Dict[str, List] = {case: [] for case in preps}

    def refill(case):
        fresh[case][:] = [make_batch() for _ in range(args.calls)]

    def timed(t):
        cases = {
            c: (lambda c=c, p=p: p(fresh[c].pop(), t))
            for c, p in preps.items()
        }
        return dict(
            cases=cases, setups={c: (lambda c=c: refill(c))
                                 for c in preps})

    return _preprocessor_rows('labels', name, preps, lambda c: make_batch(),
                              LABEL_IMAGE_SIZE, batch, args, timed)


def measure_optimizer(name: str, args) -> List[Dict]:
    """One step of the config's optimizer on the config's whole model, its
    parameters grouped both ways, from the same gradients."""
    from mmlape.hosts.runner_setup import fit_fused_optimizer
    model, cfg, device = build_classifier(name, args, whole=True)
    fit_fused_optimizer(cfg, device.type)
    gen = torch.Generator().manual_seed(0)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen).to(device)
    optimizers = {}
    with quiet_logger(), DefaultScope.overwrite_default_scope('mmpretrain'):
        for grouping in GROUPINGS:
            optim_cfg = copy.deepcopy(cfg.optim_wrapper)
            if grouping == GROUPINGS[0]:
                optim_cfg.pop('constructor', None)
            optimizers[grouping] = build_optim_wrapper(model,
                                                       optim_cfg).optimizer
    cells = {
        g:
        dict(
            optimizer=type(o).__name__ +
            (' (fused)' if o.defaults.get('fused') else ''),
            params=sum(1 for _ in model.parameters()),
            groups=len(o.param_groups))
        for g, o in optimizers.items()
    }
    cases = {g: o.step for g, o in optimizers.items()}
    return _rows('optimizer', name, args, cases, GROUPINGS[1], cells, 1)


def eval_samples(batch: int, classes: int, device: torch.device,
                 seed: int) -> List[Dict]:
    """An evaluation batch as mmengine's evaluator gives it to the metrics:
    the model's data samples as dicts, their scores and labels views of
    the batch's on the device (as mmpretrain's head and the configs' data
    preprocessor leave them)."""
    from mmpretrain.structures import DataSample
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, classes, generator=gen).to(device).softmax(1)
    labels = torch.randint(0, classes, (batch, ), generator=gen).to(device)
    preds = scores.argmax(1, keepdim=True)
    return [
        DataSample().set_gt_label(label).set_pred_score(score).set_pred_label(
            pred).to_dict()
        for label, score, pred in zip(labels.split(1), scores, preds)
    ]


def _same_results(a: List[Dict], b: List[Dict]) -> bool:
    """Whether two metrics' results hold the same keys in the same order
    and tensors of the same values, dtypes and shapes."""
    return len(a) == len(b) and all(
        list(x) == list(y) and all(x[k].dtype == y[k].dtype and x[k].shape ==
                                   y[k].shape and torch.equal(x[k], y[k])
                                   for k in x) for x, y in zip(a, b))


def measure_metric(name: str, args) -> List[Dict]:
    """The config's evaluator and mmpretrain's ``Accuracy`` on an
    evaluation of ``--eval-batches`` batches of the config's size: each
    batch's ``process``, then ``evaluate``, as mmengine's loops call
    them."""
    from mmpretrain.evaluation import Accuracy
    from mmpretrain.registry import METRICS
    from mmpretrain.utils import register_all_modules
    register_all_modules(False)
    config, device = CONFIGS[name][0], torch.device(args.device)
    cfg = Config.fromfile(osp.join(ROOT, config))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        ours = METRICS.build(copy.deepcopy(cfg.val_evaluator))
    assert type(ours).__name__ == ACCURACIES[1], \
        f'{config} does not name {ACCURACIES[1]}'
    metrics = dict(
        zip(ACCURACIES, (Accuracy(topk=cfg.val_evaluator.topk), ours)))
    batch = args.batch or cfg.val_dataloader.batch_size
    batches, classes = args.eval_batches, cfg.data_preprocessor.num_classes
    # batches of their own (a batch's results that are views of it take
    # it along where they are pickled)
    evaluated = [
        eval_samples(batch, classes, device, seed=i) for i in range(batches)
    ]

    def evaluation(metric):
        for each in evaluated:
            metric.process(None, each)
        return metric.evaluate(batch * batches)

    cells, results, values = {}, {}, {}
    for case, metric in metrics.items():
        metric.results = []
        with HostCopies() as count, OpCount() as aten:
            metric.process(None, evaluated[0])
        results[case] = metric.results  # the configs' makes them here
        pickled = len(pickle.dumps(results[case], protocol=2))
        metric.results = []
        with gathered_bytes() as sent:
            values[case] = evaluation(metric)
        cells[case] = dict(
            batch=batch,
            batches=batches,
            classes=classes,
            host_copies=count.calls,
            ops=aten.ops,
            same=None,
            pickled_kb=pickled / 1024,
            gathered_kb=sent[0] / 1024 / batches)
    same = _same_results(*results.values()) and \
        values[ACCURACIES[0]] == values[ACCURACIES[1]]
    for more in cells.values():
        more['same'] = same
    cases = {c: (lambda m=m: evaluation(m)) for c, m in metrics.items()}
    return _rows('metric', name, args, cases, ACCURACIES[1], cells, batches)


def measure_ema(name: str, args) -> List[Dict]:
    """One update of the config's model average (after the first, which
    copies the model), mmengine's and the config's, on the whole model."""
    from mmengine.model import ExponentialMovingAverage

    from mmlape.hosts.ema import LaPEExponentialMovingAverage
    model, cfg, device = build_classifier(name, args, whole=True)
    (hook, ) = [h for h in cfg.custom_hooks if h.type == 'EMAHook']
    assert hook.get('ema_type') == AVERAGES[1], \
        f'{CONFIGS[name][0]} does not name {AVERAGES[1]}'
    averages = dict(
        zip(AVERAGES,
            (ExponentialMovingAverage(model, momentum=hook.momentum),
             LaPEExponentialMovingAverage(model, momentum=hook.momentum))))
    cells = {}
    for case, average in averages.items():
        average.update_parameters(model)  # the first copies the model
        with torch.no_grad():  # as a training step leaves the model
            for p in model.parameters():
                p.mul_(0.5)
        with OpCount() as count:
            average.update_parameters(model)
        # all the operations (``.data`` included, which launch nothing),
        # and the updates (on a GPU, kernel launches)
        cells[case] = dict(
            params=sum(1 for _ in model.parameters()),
            ops=count.ops,
            lerps=sum('lerp' in n for n in count.names))
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(2)
    # the same averages, bit for bit, on this device
    states = [a.state_dict() for a in averages.values()]
    same = all(torch.equal(v, states[1][k]) for k, v in states[0].items())
    for more in cells.values():
        more['same'] = same
    cases = {
        c: (lambda a=a: a.update_parameters(model))
        for c, a in averages.items()
    }
    return _rows('ema', name, args, cases, AVERAGES[1], cells, 1)


def _preprocessor_cells(r: Dict) -> tuple:
    return (f"{r['config']} ({r['size']}x{r['size']})", r['batch'], r['mode'],
            r['case'], f"{r['ops']:,}", f"{r['ms']:.2f}", f"{r['x']:.2f}")


#: overhead -> its table's columns and each row's cells
TABLES = {
    'collate': (('config', 'batch', 'mode', 'collate', 'ATen ops',
                 'ms per batch', 'x'), _preprocessor_cells),
    'labels': (('config', 'batch', 'mode', 'preprocessor', 'ATen ops',
                'ms per batch', 'x'), _preprocessor_cells),
    'optimizer': (('config', 'optimizer', 'parameters', 'grouping', 'groups',
                   'ms per step', 'x'), lambda r:
                  (r['config'], r['optimizer'], r['params'], r['case'], r[
                      'groups'], f"{r['ms']:.2f}", f"{r['x']:.2f}")),
    'metric':
    (('config', 'batch', 'classes', 'metric', 'host copies', 'ATen ops',
      'results pickled, KB', 'gathered, KB per batch', 'same results',
      'ms per batch', 'x'), lambda r:
     (r['config'], r['batch'], r['classes'], r['case'], r['host_copies'],
      f"{r['ops']:,}", f"{r['pickled_kb']:,.0f}", f"{r['gathered_kb']:,.0f}",
      r['same'], f"{r['ms']:.2f}", f"{r['x']:.2f}")),
    'ema': (('config', 'parameters', 'average', 'ATen ops', 'lerp ops',
             'same values', 'ms per update', 'x'), lambda r:
            (r['config'], r['params'], r['case'], r['ops'], r['lerps'], r[
                'same'], f"{r['ms']:.2f}", f"{r['x']:.2f}")),
}


def markdown_overheads(report: Dict) -> str:
    m, lines = report['machine'], []
    for section, (columns, cells) in TABLES.items():
        found = [cells(r) for r in report['rows'] if r['section'] == section]
        lines += [''] + table(columns, found) if found else []
    return '\n'.join([
        f"{m['cpu']}, {m['device']}, torch {m['torch']} ({m['threads']} "
        "threads); fastest of the rounds; x = time over the configs' choice's"
    ] + lines) + '\n'


def run_overheads(args, save: Callable[[Dict], None]) -> Dict:
    measure = dict(
        zip(OVERHEADS, (measure_collate, measure_labels, measure_optimizer,
                        measure_metric, measure_ema)))
    rows = [
        row for section in args.sections for name in args.configs
        if name in SECTION_CONFIGS[section]
        for row in measure[section](name, args)
    ]
    device = torch.device(args.device)
    report = dict(
        machine=dict(
            cpu=platform.processor() or platform.machine(),
            device=torch.cuda.get_device_name(device)
            if device.type == 'cuda' else 'CPU',
            torch=torch.__version__,
            threads=torch.get_num_threads()),
        rows=rows)
    save(report)
    return report


# ---------------------------------------------------------------------------
# the command line

#: section -> its run and its report's markdown
RUNS = dict(
    train=(run_train, markdown),
    test=(run_test_section, markdown_test),
    syncs=(run_syncs, markdown_syncs),
    overheads=(run_overheads, markdown_overheads))
#: Each section's defaults of the options it takes (train's --iters and
#: --warmup: per family, iterations()), and --tiny's where they differ.
DEFAULTS = dict(
    train=dict(
        families=DEFAULT_FAMILIES,
        parts=PARTS,
        loader_images=128,
        log_every=LOG_EVERY,
        model_steps=5,
        max_images=1024),
    test=dict(
        families=TEST_FAMILIES,
        iters=40,
        warmup=10,
        max_images=1536,
        model_steps=10),
    syncs=dict(
        families=SYNC_FAMILIES[:1],
        iters=12,
        log_every=5,
        max_batch=64,
        workers=2),
    overheads=dict(configs=tuple(CONFIGS), batch=0, eval_batches=8))
TINY = dict(
    train=dict(
        iters=5,
        warmup=2,
        loader_images=8,
        log_every=1,
        model_steps=3,
        max_batch=2),
    test=dict(iters=4, warmup=1, max_batch=6, max_images=8, model_steps=2),
    syncs=dict(max_batch=2))
#: The names each option's comma-separated list takes, per section.
NAMES = dict(
    families=dict(train=FAMILIES, test=TEST_FAMILIES, syncs=SYNC_FAMILIES),
    parts=dict(train=PARTS),
    configs=dict(overheads=CONFIGS))
#: The options (flags, type or default, help); the defaults of those
#: without are per section, above.
OPTIONS = (
    ('--section', str, f'comma-separated, from {", ".join(SECTIONS)}, '
     'overheads (its five) and all', dict(required=True)),
    ('--families', str, 'comma-separated; train: from deit, deit-base, '
     'swin, mask-rcnn, upernet, segmenter (all but swin); test: deit, '
     'deit-base (both); syncs: deit, deit-base, swin (deit)'),
    ('--iters', int, 'iterations: train --warmup + 25 (--tiny 5); test 40 '
     'test iterations a run (--tiny 4); syncs 12'),
    ('--warmup', int, "first iterations left out: train 5 x the batches the "
     "loader's queue holds, at least 5 (--tiny 2); test 10 (--tiny 1)"),
    ('--max-batch', int, "cap on the config's batch: train none on a GPU, "
     '32 on the CPU (--tiny 2; the table names the config\'s beside it); '
     'test none (--tiny 6); syncs 64 (--tiny 2)'),
    ('--max-images', int, 'images generated at most: train 1024 (epoch-'
     'based configs run several epochs of them); test 1536 (--tiny 8), '
     'repeated to fill --iters'),
    ('--workers', int, "loader workers instead of the config's (turns "
     'auto_num_workers off); syncs 2'),
    ('--loader-images', int, 'images the loader makes while timed: train '
     '128 (--tiny 8); test one test batch'),
    ('--model-steps', int, 'timed model-only steps, the fastest counts: '
     'train 5 (--tiny 3); test 10 (--tiny 2)'),
    ('--log-every', int, 'train: the run logs every N iterations, each '
     "entry their mean (5; --tiny 1); syncs: the logger's interval (5)"),
    ('--parts', str, 'train: comma-separated, from loader, model, train '
     '(all; the loader is always measured)'),
    ('--runtime-info', str, "train: the run's default_hooks.runtime_info "
     "type instead of the config's, e.g. LazyRuntimeInfoHook"),
    ('--model-warmup', 1, 'train: untimed model-only steps first (1)'),
    ('--profile-steps', 0, 'train: model-only steps profiled after the '
     "timed ones: the GPU's busy time, the top host and device operations "
     '(0)'),
    ('--configs', str, 'overheads: comma-separated, from deit, cifar, t2t '
     '(all)'),
    ('--batch', int, "overheads: images a batch of collate, labels, metric "
     "(the config's; metric: its evaluation batch)"),
    ('--device', 'cpu', 'overheads: cpu (default) or cuda (the batch '
     'pinned, as the loaders pin it)'),
    ('--eval-batches', int, "overheads: batches of metric's evaluation, "
     'each processed, then evaluated (8); its time is per batch'),
    ('--rounds', 10, 'overheads: timed rounds (10)'),
    ('--calls', 3, 'overheads: calls per timed round (3)'),
    ('--threads', int, "torch threads of train's model-only step and of "
     "the overheads, OMP threads of the tools' runs (torch's)"),
    ('--out', str, 'also write the markdown here'),
    ('--json', str, 'also write the report as JSON here (several sections: '
     'section -> report)'),
    ('--tiny', False, 'tiny models, small images, few iterations (the '
     'tests)'),
    ('--compile', False, "train, test: --compile to the tools (train's "
     'model-only step compiled alike)'),
    ('--amp', False, 'train, test: --amp to the tools; syncs: as '
     'tools/train.py --amp, on CUDA'),
    ('--work-root --root', None, 'where data, configs and runs go (a new '
     'temporary folder); generated data is kept and reused there'),
)


def settings_of(args) -> Dict:
    return {k: v for k, v in vars(args).items() if k not in ('out', 'json')}


def _names(parse, key: str, value, allowed) -> List[str]:
    """``value`` (a comma-separated list) as names, each one of
    ``allowed``."""
    names = [n.strip() for n in value.split(',') if n.strip()] if \
        isinstance(value, str) else list(value)
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        parse.error(f'--{key}: unknown {", ".join(unknown) or "(none)"}; '
                    f'choose from {", ".join(allowed)}')
    return names


def _settings(parse, args, section: str):
    """``args`` for ``section``: its defaults where no option was given,
    its lists parsed, its limits checked."""
    run = copy.copy(args)
    given = dict(DEFAULTS[section], **TINY.get(section, {})) if args.tiny \
        else DEFAULTS[section]
    for key, value in given.items():
        if getattr(run, key) is None:
            setattr(run, key, value)
    for key, allowed in NAMES.items():
        if section in allowed:
            setattr(run, key,
                    _names(parse, key, getattr(run, key), allowed[section]))
    if section == 'train' and run.max_batch is None:
        run.max_batch = 0 if torch.cuda.is_available() else 32
    if section in ('train', 'test') and None not in (run.warmup, run.iters) \
            and run.warmup >= run.iters:
        parse.error(f'--warmup {run.warmup} leaves none of --iters '
                    f'{run.iters} timed')
    if section in ('train', 'syncs') and run.log_every < 1:
        parse.error(f'--log-every {run.log_every}: at least 1')
    if section == 'syncs' and run.iters < 2:
        parse.error('--iters: at least 2')
    if section == 'overheads' and run.device.startswith('cuda') and \
            not torch.cuda.is_available():
        parse.error(f'--device {run.device}: torch sees no CUDA device')
    return run


def parse_args(argv=None) -> Dict:
    """The command line: each section it runs -> its settings."""
    parse = parser(__doc__, OPTIONS)
    args = parse.parse_args(argv)
    groups = dict(all=SECTIONS, overheads=OVERHEADS)
    chosen = _names(parse, 'section', args.section, SECTIONS + tuple(groups))
    chosen = list(
        dict.fromkeys(s for c in chosen for s in groups.get(c, (c, ))))
    runs = {}
    for section in chosen:
        key = 'overheads' if section in OVERHEADS else section
        runs[key] = runs.get(key) or _settings(parse, args, key)
    if 'overheads' in runs:
        runs['overheads'].sections = [s for s in chosen if s in OVERHEADS]
    return runs


def main(argv=None) -> int:
    """Run the sections; 1 where a family failed."""
    runs = parse_args(argv)
    first = next(iter(runs.values()))
    reports: Dict[str, Dict] = {}

    def saver(section: str) -> Callable[[Dict], None]:

        def save(report: Dict) -> None:
            reports[section] = report
            if first.json:
                with open(first.json, 'w') as f:
                    json.dump(
                        reports if len(runs) > 1 else report, f, indent=1)

        return save

    texts, threads = [], torch.get_num_threads()
    for section, args in runs.items():
        run, text = RUNS[section]
        if args.threads and section in ('train', 'overheads'):
            torch.set_num_threads(args.threads)
        try:
            report = run(args, saver(section))
        finally:
            torch.set_num_threads(threads)
        texts.append((f'## {section}\n\n' if len(runs) > 1 else '') +
                     text(report))
    print_and_save('\n'.join(texts), first.out)
    return int(
        any('error' in f for r in reports.values()
            for f in r.get('families', [])))


if __name__ == '__main__':
    sys.exit(main())
