"""The embedded demo: LaPE and MPVG doing real work on a CPU, no data needed.

1. Generates a position-sensitive image set in the ImageNet folder layout
   (``mmlape.datasets.pos_shapes``: the class is the quadrant a square is
   in; a disk is a distractor).
2. Compares the default join, LaPE and MPVG on a small DeiT with
   ``tools/analysis/compare.py`` (each trained with ``tools/train.py`` and
   evaluated with ``tools/test.py``, one seed; its report beside them).
3. Prints a table (top-1, parameters, time per iteration) and writes a
   figure of the PE each layer receives (cosine similarity of the centre
   patch to all others).

Run again with the same options, it reads the finished runs instead of
training them again (compare's resume).

Example:
    python tools/demo.py                      # about 5 minutes on 2 cores
    python tools/demo.py --iters 100 --num-train 400   # a quick look
"""
import argparse
import os.path as osp
import sys
import time

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, ROOT)

from tools.common import int_at_least  # noqa: E402

#: The demo's config; the joins are its variants (compare's ``--pe-join``).
CONFIG = 'configs/demo/deit-demo_pos-shapes.py'
JOINS = ('default', 'lape', 'mpvg')


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
        '--joins', nargs='+', default=list(JOINS), choices=JOINS)
    parser.add_argument(
        '--iters',
        type=iterations,
        default=None,
        help='training iterations (config: 600)')
    parser.add_argument('--num-train', type=int, default=4000)
    parser.add_argument('--num-val', type=int, default=400)
    parser.add_argument('--seed', type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None):
    import warnings
    warnings.filterwarnings('ignore', message='pkg_resources is deprecated')
    args = parse_args(argv)
    from mmengine.config import Config

    import mmlape.hosts
    from mmlape.analysis import plot_similarity_grid, token_similarity_maps
    from mmlape.datasets import generate_pos_shapes
    from tools.analysis import compare, resolution_sweep
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
    ]
    if args.iters:
        options += iteration_options(args.iters)
    sweep, results, _ = compare.run_comparison(
        compare.parse_args([
            osp.join(ROOT, CONFIG), '--pe-join', *args.joins, '--first-seed',
            str(args.seed), '--work-dir', work_dir, '--cfg-options', *options
        ]))
    rows, maps = [], {}
    for join in args.joins:
        result = results.get((join, args.seed), {})
        if result.get('status') != 'done':
            raise SystemExit(f'{join}: {result.get("step")} failed: '
                             f'{result.get("error")}')
        model = resolution_sweep.load_model(
            Config.fromfile(result['config']), result['checkpoint'])
        similarity = token_similarity_maps(model.backbone)
        maps[join] = similarity['maps']
        rows.append(
            (join, result['metrics']['accuracy/top1'], result['params'],
             result['seconds_per_iter'], result['train_seconds']))
    hw = similarity['hw']
    token = similarity['token']
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
    print(f'\nchance is 25%; PE similarity figure: {figure}; the '
          f'comparison\'s report: {osp.join(work_dir, "report.md")}')
    print(f'demo finished in {time.time() - start:.0f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
