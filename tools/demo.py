"""The embedded demo: LaPE and MPVG doing real work on a CPU, no data needed.

1. Generates a position-sensitive image set in the ImageNet folder layout
   (``mmlape.datasets.pos_shapes``: the class is the quadrant a square is
   in; a disk is a distractor).
2. Trains a small DeiT with the default join, LaPE and MPVG through
   ``tools/train.py`` and evaluates each with ``tools/test.py``.
3. Prints a table (top-1, parameters, time per iteration) and writes a
   figure of the PE each layer receives (cosine similarity of the centre
   patch to all others).

Example:
    python tools/demo.py                      # about 5 minutes on 2 cores
    python tools/demo.py --iters 100 --num-train 400   # a quick look
"""
import argparse
import glob
import json
import os
import os.path as osp
import re
import subprocess
import sys
import time

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, ROOT)

from tools.common import int_at_least  # noqa: E402

JOINS = {
    'default': 'configs/demo/deit-demo_pos-shapes.py',
    'lape': 'configs/demo/deit-demo-lape_pos-shapes.py',
    'mpvg': 'configs/demo/deit-demo-mpvg_pos-shapes.py',
}
PROGRESS = re.compile(r'Iter\((train|val|test)\)\s*\[\s*(\d+)/(\d+)\].*')


def iteration_options(iters: int) -> list:
    """``--cfg-options`` for a run of ``iters`` iterations: a quarter of
    them (1 to 50) warm up, the cosine schedule takes the rest."""
    warmup = max(1, min(50, iters // 4))
    return [
        f'train_cfg.max_iters={iters}', f'train_cfg.val_interval={iters}',
        f'default_hooks.checkpoint.interval={iters}',
        f'param_scheduler.0.end={warmup}', f'param_scheduler.1.begin={warmup}',
        f'param_scheduler.1.end={iters}',
        f'default_hooks.logger.interval={max(1, min(50, iters // 5))}'
    ]


#: An argparse type for --iters: a warm-up iteration, then the cosine.
iterations = int_at_least(
    2, '2 or more (one warm-up iteration, then the cosine schedule)')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--work-dir', default='work_dirs/demo')
    parser.add_argument(
        '--joins', nargs='+', default=list(JOINS), choices=list(JOINS))
    parser.add_argument(
        '--iters',
        type=iterations,
        default=None,
        help='training iterations (config: 600)')
    parser.add_argument('--num-train', type=int, default=4000)
    parser.add_argument('--num-val', type=int, default=400)
    parser.add_argument('--seed', type=int, default=0)
    return parser.parse_args(argv)


def run(cmd, tag):
    """Run a tool, echo its progress lines, return its output."""
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        m = PROGRESS.search(line)
        if m:
            loss = re.search(r'loss: ([\d.]+)', line)
            secs = re.search(r' time: ([\d.]+)', line)
            extra = ''
            if loss:
                extra += f' loss {float(loss.group(1)):.3f}'
            if secs:
                extra += f' {float(secs.group(1)):.3f} s/iter'
            print(
                f'  [{tag}] {m.group(1)} {m.group(2)}/{m.group(3)}{extra}',
                flush=True)
    if proc.wait():
        sys.stdout.write(''.join(lines[-40:]))
        raise SystemExit(f'{tag}: {" ".join(cmd[:3])} failed')
    return ''.join(lines)


def seconds_per_iter(work_dir):
    """Wall-clock seconds per training iteration, from the timestamps of
    the first and last logged iteration of the run's text log."""
    stamp = re.compile(r'^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d).*'
                       r'Iter\(train\) \[\s*(\d+)/\d+\]')
    points = []
    for path in glob.glob(osp.join(work_dir, '*', '*.log')):
        with open(path) as f:
            for line in f:
                m = stamp.match(line)
                if m:
                    t = time.mktime(
                        time.strptime(m.group(1), '%Y/%m/%d %H:%M:%S'))
                    points.append((int(m.group(2)), t))
    if len(points) < 2:
        return float('nan')
    (i0, t0), (i1, t1) = points[0], points[-1]
    return (t1 - t0) / max(1, i1 - i0)


def load_model(config, checkpoint):
    from mmengine.runner import load_checkpoint

    from mmlape.analysis import build_from_config
    model, _ = build_from_config(osp.join(ROOT, config))
    load_checkpoint(model, checkpoint, map_location='cpu', logger='silent')
    return model.eval()


def main(argv=None):
    import warnings
    warnings.filterwarnings('ignore', message='pkg_resources is deprecated')
    args = parse_args(argv)
    import mmlape.hosts
    from mmlape.analysis import plot_similarity_grid, token_similarity_maps
    from mmlape.datasets import generate_pos_shapes
    mmlape.hosts.apply()

    start = time.time()
    work_dir = osp.abspath(args.work_dir)
    data_root = osp.join(work_dir, 'data')
    counts = generate_pos_shapes(
        data_root, args.num_train, args.num_val, seed=args.seed)
    print(
        f'data: {counts["train"]} train / {counts["val"]} val images in '
        f'{data_root} (4 classes: the quadrant the square is in)',
        flush=True)
    options = [
        f'{split}_dataloader.dataset.data_root={data_root}'
        for split in ('train', 'val', 'test')
    ] + [f'randomness.seed={args.seed}']
    if args.iters:
        options += iteration_options(args.iters)
    rows, maps = [], {}
    for join in args.joins:
        config = JOINS[join]
        jdir = osp.join(work_dir, join)
        print(f'== {join}: training {config}', flush=True)
        t0 = time.time()
        run([
            sys.executable, 'tools/train.py', config, '--work-dir', jdir,
            '--cfg-options'
        ] + options, join)
        train_secs = time.time() - t0
        with open(osp.join(jdir, 'last_checkpoint')) as f:
            ckpt = f.read().strip()
        print(f'== {join}: testing {osp.basename(ckpt)}', flush=True)
        run([
            sys.executable, 'tools/test.py', config, ckpt, '--work-dir',
            osp.join(jdir, 'test'), '--cfg-options'
        ] + options, join)
        with open(osp.join(jdir, 'test', 'test_metrics.json')) as f:
            top1 = json.load(f)['accuracy/top1']
        model = load_model(config, ckpt)
        params = sum(p.numel() for p in model.parameters())
        result = token_similarity_maps(model.backbone)
        maps[join] = result['maps']
        rows.append((join, top1, params, seconds_per_iter(jdir), train_secs))
    hw = result['hw']
    token = result['token']
    figure = osp.join(work_dir, 'pe_similarity.png')
    plot_similarity_grid(
        maps,
        figure,
        token_hw=(token // hw[1], token % hw[1]),
        title='PE received by each layer: cosine similarity of the centre '
        'patch to all patches')
    print()
    print('| join | top-1 (%) | params | s/iter | train s |')
    print('|---|---|---|---|---|')
    for join, top1, params, per_iter, secs in rows:
        print(f'| {join} | {top1:.2f} | {params:,} | {per_iter:.3f} | '
              f'{secs:.0f} |')
    print(f'\nchance is 25%; PE similarity figure: {figure}')
    print(f'demo finished in {time.time() - start:.0f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
