"""The user's evaluation path, measured in one run: ``tools/test.py`` end
to end with the config's evaluator and with mmpretrain's ``Accuracy``,
beside the model's own evaluation step and the test loader alone, for the
DeiT-Ti and DeiT-B LaPE configs.

On a generated ImageNet-layout validation set of JPEGs of ImageNet's size
(:func:`mmlape.datasets.generate_imagenet`), repeated so that one test
epoch holds ``--iters`` batches of the config's evaluation batch (384), for
each family:

- **loader**: the config's test dataloader (its dataset, pipeline, sampler
  and collate) iterated in one process on one thread as a worker runs it:
  images per second per worker, from the process's CPU time; and the
  workers the model-only rate needs (model-only img/s / that rate);
- **model-only**: ``model.test_step`` (the data preprocessor included) of
  the config's model on one batch of the config's test loader held in
  memory, the fastest of ``--model-steps`` after a warm-up, each ended by
  a synchronisation;
- **tools/test.py**: ``tools/test.py CONFIG CHECKPOINT`` with the workers
  the config sets, once with the config's evaluator (``LaPEAccuracy``:
  a batch's results copied to the host in one copy the host does not wait
  for) and once with mmpretrain's ``Accuracy`` (two copies to the host a
  sample, each waiting for the device); images per second from the
  ``time`` of every logged test iteration, the first ``--warmup`` left out
  (the loader's queue fills while the first iteration runs), and the share
  of it spent waiting for data (``data_time``). Both runs test the same
  checkpoint (the model as the config initialises it) on the same images
  and must give the same metrics; the report says whether they do.

Where ``data_time`` takes most of an iteration, the loader sets the
speed, not the model or the evaluator: README "Feeding the GPU" turns the
loader's rate per worker into the workers a GPU needs.

Example:
    python benchmarks/bench_test_path.py --out test_path.md
    python benchmarks/bench_test_path.py --families deit --amp
    python benchmarks/bench_test_path.py --tiny --json out.json  # tests
"""
import argparse
import copy
import glob
import json
import os
import os.path as osp
import re
import shutil
import sys
import tempfile
import time
from typing import Dict, Optional, Sequence

HERE = osp.dirname(osp.abspath(__file__))
ROOT = osp.dirname(HERE)
sys.path.insert(0, HERE)
import bench_train_path as train_path  # noqa: E402
from report import print_and_save  # noqa: E402

FAMILIES = {
    'deit': 'configs/deit/deit-tiny-lape_4xb256_in1k.py',
    'deit-base': 'configs/deit/deit-base-lape_4xb256_in1k.py',
}
#: The evaluators compared: the config's, mmpretrain's.
EVALUATORS = ('config', 'Accuracy')
#: A logged test iteration of mmengine's text log.
TEST_LINE = re.compile(r'Epoch\(test\)\s*\[\s*(\d+)/(\d+)\].*?'
                       r'\btime: ([\d.]+)\s+data_time: ([\d.]+)')
COLUMNS = ('family', 'batch', 'evaluator',
           'loader img/s per worker (CPU time)', 'model-only img/s',
           'workers the model needs', 'tools/test.py img/s', 'data_time share',
           'workers', 'top-1', 'same metrics')


def generate_val(root: str, images: int, tiny: bool) -> Dict:
    """``images`` validation JPEGs in ImageNet's layout under ``root``
    (kept where the same set is there)."""
    from mmlape.datasets import generate_imagenet
    size = train_path.SIZES['imagenet'][1 if tiny else 0]
    generate_imagenet(
        root, num_train=0, num_val=images, num_classes=100, size=size)
    files = glob.glob(osp.join(root, 'val', '*', '*.JPEG')) or glob.glob(
        osp.join(root, 'val', '*.JPEG'))
    return dict(
        images=images,
        size=list(size),
        mean_kb=sum(osp.getsize(f) for f in files) / max(1, len(files)) / 1e3)


def overrides(data_root: str, batch: int, times: int, tiny: bool,
              workers: Optional[int], evaluator: str) -> Dict:
    """Config entries of a run: the generated set repeated ``times``,
    ``batch`` images a batch, every iteration logged unsmoothed; with
    ``tiny`` the small model; ``workers`` replaces the config's worker
    count; ``evaluator`` is ``config`` or ``Accuracy`` (mmpretrain's)."""
    loader = dict(
        batch_size=batch,
        dataset=dict(
            _delete_=True,
            type='RepeatDataset',
            times=times,
            dataset=dict(
                type='ImageNet',
                data_root=data_root,
                data_prefix='val',
                ann_file='meta/val.txt',
                pipeline=None)))
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
            backbone=dict(arch=dict(train_path.TINY_ARCH, _delete_=True)),
            head=dict(in_channels=train_path.TINY_ARCH['embed_dims']))
    return over


def fill_pipeline(over: Dict, config: str) -> Dict:
    """The config's own test pipeline in the repeated dataset."""
    from mmengine.config import Config
    cfg = Config.fromfile(osp.join(ROOT, config))
    over['test_dataloader']['dataset']['dataset']['pipeline'] = \
        cfg.test_dataloader.dataset.pipeline
    return over


def save_checkpoint(cfg, path: str) -> None:
    """The config's model as it initialises, in mmengine's layout."""
    import torch
    from mmengine.registry import MODELS
    model_cfg = copy.deepcopy(cfg.model)
    model = MODELS.build(model_cfg)
    model.init_weights()
    torch.save(dict(meta=dict(), state_dict=model.state_dict()), path)


def measure_model(cfg, steps: int, warmup: int, amp: bool) -> Dict:
    """Seconds per ``test_step`` of the config's model on one batch of its
    test loader (built in this process, no workers)."""
    import torch
    from mmengine.registry import MODELS
    from mmengine.runner import Runner
    loader_cfg = copy.deepcopy(cfg.test_dataloader)
    loader_cfg.update(num_workers=0, persistent_workers=False)
    batch = next(iter(Runner.build_dataloader(loader_cfg, seed=0)))
    model_cfg = copy.deepcopy(cfg.model)
    if cfg.get('data_preprocessor') is not None:
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    model = MODELS.build(model_cfg)
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    torch.backends.cudnn.benchmark = bool(
        cfg.get('env_cfg', {}).get('cudnn_benchmark', False))
    model.to(device).eval()
    if device == 'cuda' and loader_cfg.get('pin_memory'):
        from torch.utils.data._utils.pin_memory import pin_memory
        batch = pin_memory(batch)
    sync = torch.cuda.synchronize if device == 'cuda' else (lambda: None)
    dtype = torch.float16 if device == 'cuda' else torch.bfloat16
    walls = []
    for i in range(warmup + steps):
        data = copy.copy(batch)
        data['data_samples'] = copy.deepcopy(batch['data_samples'])
        sync()
        start = time.perf_counter()
        with torch.no_grad(), torch.autocast(device, dtype, enabled=amp):
            model.test_step(data)
        sync()
        if i >= warmup:
            walls.append(time.perf_counter() - start)
    images = len(batch['inputs'])
    return dict(
        steps=steps,
        batch=images,
        s_per_step=min(walls),
        img_s=images / min(walls),
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
    ] + (['--amp'] if args.amp else []) + (['--compile']
                                           if args.compile else [])
    train_path.run_tool(cmd, osp.join(work_dir, 'test.out'), args.threads)
    result = read_test_log(work_dir, args.warmup)
    dumped = glob.glob(osp.join(work_dir, '*', 'vis_data', 'config.py'))
    result.update(
        workers=_workers(dumped[0]) if dumped else None,
        command=' '.join(cmd[1:]))
    return result


def _workers(path: str) -> Optional[int]:
    from mmengine.config import Config
    cfg = Config.fromfile(path, import_custom_modules=False)
    return cfg.test_dataloader.get('num_workers', 0)


def run_family(family: str, args, root: str) -> Dict:
    """The data, the checkpoint, the model-only step and one test run per
    evaluator of one family."""
    from mmengine.config import Config
    config = FAMILIES[family]
    batch = Config.fromfile(osp.join(ROOT, config)).test_dataloader.batch_size
    if args.max_batch:
        batch = min(batch, args.max_batch)
    images = min(args.max_images, batch * args.iters)
    h, w = train_path.SIZES['imagenet'][1 if args.tiny else 0]
    data_root = osp.join(root, 'data', f'imagenet-val-{w}x{h}-{images}')
    data = generate_val(data_root, images, args.tiny)
    times = -(-batch * args.iters // images)
    work = osp.join(root, family)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    result = dict(family=family, config=config, batch=batch, data=data)
    runs = {}
    for evaluator in EVALUATORS:
        over = fill_pipeline(
            overrides(data_root, batch, times, args.tiny, args.workers,
                      evaluator), config)
        path = train_path.write_config(
            osp.join(work, f'{family}-{evaluator}.py'), config, over)
        if evaluator == EVALUATORS[0]:
            cfg = train_path.load_run_config(path)
            checkpoint = osp.join(work, 'init.pth')
            save_checkpoint(cfg, checkpoint)
            loader = train_path.measure_loader(cfg, args.loader_images
                                               or batch, 'test_dataloader')
            loader.pop('batch')
            result['loader'] = loader
            result['model'] = measure_model(cfg, args.model_steps, 2, args.amp)
            result['workers_needed'] = \
                result['model']['img_s'] / loader['img_s_cpu']
            result['evaluator'] = cfg.test_evaluator.type
        run = run_test(path, checkpoint, osp.join(work, evaluator), args)
        run['img_s'] = batch / run['s_per_iter']
        run['data_share'] = run['data_s_per_iter'] / run['s_per_iter']
        runs[evaluator] = run
    result['test'] = runs
    metrics = [r['metrics'] for r in runs.values()]
    result['same_metrics'] = all(m == metrics[0] for m in metrics)
    return result


def markdown(report: Dict) -> str:
    m = report['machine']
    lines = [
        f"{m['gpu'] or m['cpu']}, {m['cpus']} CPUs, torch {m['torch']}"
        f"{', --amp' if report['args']['amp'] else ''}"
        f"{', --compile' if report['args']['compile'] else ''}; "
        f"{report['args']['iters']} test iterations, the first "
        f"{report['args']['warmup']} untimed", '',
        '| ' + ' | '.join(COLUMNS) + ' |', '|' + '---|' * len(COLUMNS)
    ]
    for r in report['families']:
        for evaluator, run in r['test'].items():
            name = r['evaluator'] if evaluator == 'config' else evaluator
            top1 = run['metrics'].get('accuracy/top1')
            lines.append('| ' + ' | '.join(
                str(c) for c in (r['family'], r['batch'], name,
                                 train_path.rate(r['loader']['img_s_cpu']),
                                 train_path.rate(r['model']['img_s']),
                                 f"{r['workers_needed']:.1f}",
                                 train_path.rate(run['img_s']),
                                 f"{run['data_share']:.2f}", run['workers'],
                                 top1, r['same_metrics'])) + ' |')
    return '\n'.join(lines) + '\n'


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        '--families',
        default='deit,deit-base',
        help=f'comma-separated, from {",".join(FAMILIES)}')
    parser.add_argument(
        '--iters', type=int, default=40, help='test iterations a run')
    parser.add_argument(
        '--warmup',
        type=int,
        default=10,
        help='first test iterations left out of the figures')
    parser.add_argument(
        '--max-images',
        type=int,
        default=1536,
        help='validation images generated (repeated to fill --iters)')
    parser.add_argument(
        '--max-batch', type=int, help="cap on the config's test batch")
    parser.add_argument(
        '--workers',
        type=int,
        help="the test loader's workers (default: the config's)")
    parser.add_argument(
        '--loader-images',
        type=int,
        help='images the loader part times after its warm-up batch '
        "(default: one test batch)")
    parser.add_argument('--model-steps', type=int, default=10)
    parser.add_argument('--amp', action='store_true', help='test with --amp')
    parser.add_argument(
        '--compile', action='store_true', help='test with --compile')
    parser.add_argument(
        '--tiny',
        action='store_true',
        help='small images and model (the test suite)')
    parser.add_argument('--threads', type=int, help='OMP threads of the runs')
    parser.add_argument('--root', help='work folder (default: a temporary)')
    parser.add_argument('--out', help='also write the markdown here')
    parser.add_argument('--json', help='also write the report as JSON here')
    args = parser.parse_args(argv)
    names = [n for n in args.families.split(',') if n]
    unknown = sorted(set(names) - set(FAMILIES))
    if unknown or not names:
        parser.error(f'--families: unknown {", ".join(unknown) or "(none)"};'
                     f' choose from {", ".join(FAMILIES)}')
    args.families = names
    if args.warmup >= args.iters:
        parser.error(f'--warmup {args.warmup} leaves none of --iters '
                     f'{args.iters} to time')
    return args


def main(argv: Optional[Sequence[str]] = None) -> Dict:
    args = parse_args(argv)
    root = args.root or tempfile.mkdtemp(prefix='bench_test_path_')
    report = dict(
        machine=train_path.machine(),
        args=dict(
            iters=args.iters,
            warmup=args.warmup,
            amp=args.amp,
            compile=args.compile,
            tiny=args.tiny),
        families=[run_family(f, args, root) for f in args.families])
    print_and_save(markdown(report), args.out, args.json, report)
    return report


if __name__ == '__main__':
    main()
