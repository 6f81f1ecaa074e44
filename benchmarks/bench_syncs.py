"""The training loop's reads from the device, iteration by iteration, on
the user's path: mmengine's Runner with a provided config (its data, its
pipeline in loader workers, its data preprocessor, optimizer and hooks),
once with the config's ``runtime_info`` hook (``LazyRuntimeInfoHook``)
and once with mmengine's ``RuntimeInfoHook``.

Each read makes the host wait for the device: the host then launches
nothing while the step runs, and the next step's host work starts with
the device idle.

- On CUDA every call that synchronises the host with the device is
  counted: ``torch.cuda.set_sync_debug_mode('warn')`` makes PyTorch warn
  at each one (``.item()``, a copy to pageable host memory, a CPU index
  into a CUDA tensor, ...), and the warnings are counted per iteration,
  each named by the Python line that made the call.
- On the CPU nothing waits; the reads of tensor values into Python
  (``item``, ``tolist``, ``bool``, ``float``, ``int``, ``index``,
  ``numpy``) in the training process are counted instead, through a
  ``TorchFunctionMode``: on a GPU each would be such a wait.

The report gives, per hook, the iterations that read and how many reads
each made. With the config's hook the iterations between two hand-overs
(``mmlape/engine/lazy_log.py``: the logged iterations, the one before
each logged window, the first) read nothing.

Example:
    python benchmarks/bench_syncs.py --amp --out syncs.md   # a GPU
    python benchmarks/bench_syncs.py --tiny --json out.json  # tests
"""
import argparse
import collections
import copy
import os.path as osp
import sys
import tempfile
import warnings
from typing import Dict, List, Optional, Sequence

HERE = osp.dirname(osp.abspath(__file__))
ROOT = osp.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import bench_train_path as train_path  # noqa: E402
from report import print_and_save  # noqa: E402

#: The families measured (bench_train_path's classification ones; Swin's
#: recipe clips the gradient norm, which mmengine logs on every step).
FAMILIES = ('deit', 'deit-base', 'swin')
#: The hooks compared: the config's, then mmengine's.
HOOKS = (None, 'RuntimeInfoHook')


class Counter:
    """Reads per training iteration: CUDA synchronisations (warnings of
    PyTorch's sync debug mode) or, on the CPU, reads of tensor values."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.iteration: Optional[int] = None
        self.reads: Dict[int, List[str]] = collections.defaultdict(list)

    def record(self, what: str) -> None:
        if self.iteration is not None:
            self.reads[self.iteration].append(what)


def _reads_mode(counter: Counter):
    """A ``TorchFunctionMode`` that records the reads of tensor values."""
    import torch
    from torch.overrides import TorchFunctionMode
    reads = {
        torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__,
        torch.Tensor.__float__, torch.Tensor.__int__, torch.Tensor.__index__,
        torch.Tensor.numpy
    }

    class Reads(TorchFunctionMode):

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in reads:
                counter.record(func.__name__)
            return func(*args, **(kwargs or {}))

    return Reads()


def _mark_hook(counter: Counter):
    from mmengine.hooks import Hook

    class MarkIterations(Hook):
        priority = 'HIGHEST'

        def before_train_iter(self, runner, batch_idx, data_batch=None):
            counter.iteration = runner.iter

        def after_train(self, runner):
            counter.iteration = None

    return MarkIterations()


def run_loop(cfg, counter: Counter) -> Dict:
    """Train with ``cfg`` in this process, counting the reads; the hooks
    the runner had."""
    import torch
    from mmengine.runner import Runner
    runner = Runner.from_cfg(cfg)
    runner.register_hook(_mark_hook(counter))
    hook = next(
        type(h).__name__ for h in runner.hooks
        if type(h).__name__.endswith('RuntimeInfoHook'))
    if counter.cuda:
        previous = torch.cuda.get_sync_debug_mode()
        shown = warnings.showwarning

        def show(message, category, filename, lineno, *args, **kwargs):
            # every such warning says the same: the Python line that made
            # the call names it
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
    else:
        with _reads_mode(counter):
            runner.train()
    return dict(hook=hook)


def measure(family: str, args, root: str) -> Dict:
    """Both hooks' reads for ``family``."""
    import torch
    from mmengine.config import Config
    spec = train_path.FAMILIES[family]
    base = train_path.base_loader(spec['config'])
    batch = min(base['batch_size'], args.max_batch)
    iters = args.iters
    data_root = osp.join(root, 'data', f'{family}-{batch * iters}')
    data = train_path.generate_data(spec['data'], data_root, batch * iters,
                                    args.tiny)
    over = train_path.overrides(family, data_root, batch, iters, iters,
                                args.tiny, args.workers, base, args.log_every)
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
        run_over = copy.deepcopy(over)
        if hook:
            run_over['default_hooks']['runtime_info'] = dict(type=hook)
        name = hook or 'config'
        config = train_path.write_config(
            osp.join(root, f'{family}-{name}.py'), spec['config'], run_over)
        cfg = train_path.load_run_config(config)
        cfg.work_dir = osp.join(root, f'{family}-{name}')
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
        if cuda and args.amp:  # as tools/train.py --amp
            cfg.optim_wrapper.type = 'AmpOptimWrapper'
            cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
        cfg.launcher = 'none'
        if not isinstance(cfg, Config):  # pragma: no cover
            raise TypeError(type(cfg))
        counter = Counter(cuda)
        ran = run_loop(cfg, counter)
        reads = [len(counter.reads.get(i, [])) for i in range(iters)]
        kinds = collections.Counter(
            what for i in range(iters) for what in counter.reads.get(i, []))
        result['hooks'].append(
            dict(
                hook=ran['hook'],
                reads_per_iteration=reads,
                iterations_without=sum(1 for r in reads if r == 0),
                what=dict(kinds.most_common(8))))
    return result


def markdown(report: Dict) -> str:
    counted = ('CUDA synchronisations' if report['cuda'] else
               'reads of tensor values (on a GPU, each would wait)')
    lines = [
        f"{report['device']}, torch {report['torch']}: {counted} per "
        "training iteration (the runner's iterations, counted from 0).", '',
        '| family | batch | runtime_info hook | iterations | reads per '
        'iteration | iterations without | what |',
        '|---|---|---|---|---|---|---|'
    ]
    for fam in report['families']:
        if 'error' in fam:
            lines.append(f"| {fam['family']} | failed: {fam['error']} |")
            continue
        for hook in fam['hooks']:
            what = ', '.join(f'`{k}` x{v}' for k, v in hook['what'].items())
            lines.append(
                f"| {fam['family']} | {fam['batch']} | {hook['hook']} | "
                f"{fam['iters']} (log every {fam['log_every']}) | "
                f"{' '.join(map(str, hook['reads_per_iteration']))} | "
                f"{hook['iterations_without']} | {what or '-'} |")
    return '\n'.join(lines) + '\n'


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        '--families',
        default=','.join(FAMILIES[:1]),
        help=f'comma-separated, from {",".join(FAMILIES)} (default: deit)')
    parser.add_argument(
        '--tiny',
        action='store_true',
        help='tiny model and images, batch 2 (the test)')
    parser.add_argument(
        '--iters', type=int, default=12, help='training iterations (12)')
    parser.add_argument(
        '--log-every',
        type=int,
        default=5,
        help='the logger\'s interval and window (5)')
    parser.add_argument(
        '--max-batch', type=int, help='cap on the batch (64; --tiny 2)')
    parser.add_argument(
        '--workers', type=int, default=2, help='loader workers (2)')
    parser.add_argument(
        '--amp', action='store_true', help='on CUDA, as tools/train.py --amp')
    parser.add_argument(
        '--work-root', help='where data and runs go (a new temporary folder)')
    parser.add_argument('--out', help='also write the markdown here')
    parser.add_argument('--json', help='also write the report as JSON here')
    args = parser.parse_args(argv)
    args.families = [f.strip() for f in args.families.split(',') if f.strip()]
    for family in args.families:
        if family not in FAMILIES:
            parser.error(f'--families: {family!r} is not one of '
                         f'{list(FAMILIES)}')
    if args.max_batch is None:
        args.max_batch = 2 if args.tiny else 64
    if args.iters < 2 or args.log_every < 1:
        parser.error('--iters: at least 2; --log-every: at least 1')
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    import torch
    args = parse_args(argv)
    root = args.work_root or tempfile.mkdtemp(prefix='bench_syncs_')
    report = dict(
        device=torch.cuda.get_device_name()
        if torch.cuda.is_available() else 'CPU',
        torch=torch.__version__,
        cuda=torch.cuda.is_available(),
        settings={
            k: v
            for k, v in vars(args).items() if k not in ('out', 'json')
        },
        families=[])
    for family in args.families:
        try:
            report['families'].append(measure(family, args, root))
        except Exception as err:  # noqa: BLE001 -- reported in the row
            report['families'].append(train_path.failed_family(family, err))
    print_and_save(markdown(report), args.out, args.json, report)
    return 1 if any('error' in fam for fam in report['families']) else 0


if __name__ == '__main__':
    sys.exit(main())
