"""GPU acceptance of mmlape: speed, memory and training runs, one table.
Its sections (``--sections``, all by default, in this order; one module
each under ``benchmarks/gpu/``): ``deit`` (DeiT-Ti b256 and DeiT-B b128
per join against mmpretrain's and timm's ViT: train and eval throughput,
peak memory, DeiT-B's model FLOPs utilisation against the measured bf16
matmul peak, the targets), ``compile`` (graph breaks and speed-up of
``torch.compile`` per join), ``adapter`` and ``segmenter`` (one training
step per join of the ViT-Adapter-Ti Mask R-CNN and UperNet, Segmenter-Ti
configs), ``msda`` (mmcv's CUDA deformable attention against its PyTorch
path) and ``dist`` (``tools/dist_train.sh`` then ``dist_test.sh`` per
family: does the loss fall). Ratios (``x``) are step times over the default
join's in the same section and size; a case that fails is a row whose note
starts with ``failed:``. docs/gpu.md reads the table.

Example:
    python benchmarks/bench_gpu.py --json bench.json
    python benchmarks/bench_gpu.py --sections deit,msda --json a.json
    python benchmarks/bench_gpu.py --merge a.json b.json
    python benchmarks/bench_gpu.py --device cpu --tiny
"""
import argparse
import contextlib
import json
import sys
import time
from typing import Callable, List, Sequence

import torch
from gpu.common import COLUMNS, Bench, markdown
from gpu.deit import section_compile, section_deit
from gpu.dense import section_adapter, section_msda, section_segmenter
from gpu.dist import DIST_FAMILIES, section_dist
from shared import join_names, parser

__all__ = ['COLUMNS', 'DIST_FAMILIES', 'SECTIONS', 'main', 'parse_args']

#: The sections, in the table's order.
RUNNERS = {
    'deit': section_deit,
    'compile': section_compile,
    'adapter': section_adapter,
    'msda': section_msda,
    'segmenter': section_segmenter,
    'dist': section_dist,
}
SECTIONS = tuple(RUNNERS)


def _csv(choices: Sequence[str]) -> Callable[[str], List[str]]:
    lookup = {c.lower(): c for c in choices}

    def parse(text: str) -> List[str]:
        out = []
        for item in text.split(','):
            key = item.strip().lower()
            if key not in lookup:
                raise argparse.ArgumentTypeError(
                    f'{item!r} is not one of {list(choices)}')
            out.append(lookup[key])
        return out

    return parse


def parse_args(argv=None) -> argparse.Namespace:
    from mmlape.models.layers.pos_embed import pe_settings
    joins = join_names()
    args = parser(__doc__, (
        ('--sections', list(SECTIONS), 'comma-separated, from '
         f'{",".join(SECTIONS)} (default: all)', dict(type=_csv(SECTIONS))),
        ('--device', 'cuda', 'cuda (default) or cpu (with --tiny, for '
         'tests)'),
        ('--tiny', False, 'tiny models, inputs and runs (CPU tests)'),
        ('--joins', joins, 'joins to measure (default: every registered '
         'join)', dict(type=_csv(joins))),
        ('--pe', None, "PE setting of the deit section's models, e.g. "
         'rope_mixed or rope_mixed+learnable: the joins of --joins that fit '
         "it, without the reference models (default: DeiT's learnable PE)",
         dict(choices=pe_settings())),
        ('--archs', ['tiny', 'base'], 'DeiT sizes of the deit section '
         '(default: tiny,base)', dict(type=_csv(('tiny', 'base')))),
        ('--amp-dtype', 'bfloat16', 'autocast dtype (default: bfloat16)',
         dict(choices=('bfloat16', 'float16'))),
        ('--dense-amp-dtype', None, 'autocast dtype of the adapter and '
         'segmenter sections (default: float16, what --amp of the tools '
         "uses; mmlape runs mmcv 2.1.0's deformable attention, RoIAlign and "
         'NMS in float32 under either; float32 with --tiny on CPU)',
         dict(choices=('float16', 'bfloat16', 'float32'))),
        ('--compile-arch', 'tiny', 'DeiT size of the compile section '
         '(default: tiny, batch 256)', dict(choices=('tiny', 'base'))),
        ('--compile-joins', join_names(with_configs=True), 'joins of the '
         'compile section, among --joins (default: the joins with configs, '
         'Default,LaPE,PVG,MPVG: each compiles for about a minute)',
         dict(type=_csv(joins))),
        ('--compile-backend', None, 'torch.compile backend (default: '
         'inductor; eager with --tiny)'),
        ('--dist-families', None, 'families of the dist section (default: '
         'all; deit with --tiny)', dict(type=_csv(tuple(DIST_FAMILIES)))),
        ('--dist-iters', 50, 'iterations of each dist training run '
         '(default: 50)'),
        ('--work-root', None, 'folder of the dist runs (default: a new '
         'temporary folder)'),
        ('--iters', int, 'steps per timed round (default: 10)'),
        ('--rounds', int, 'timed rounds (default: 5)'),
        ('--warmup', int, 'untimed steps per case (default: 3)'),
        ('--threads', int, 'torch CPU threads (default: unchanged; 1 with '
         '--device cpu: tiny ops on a shared machine run far faster on one '
         'thread)'),
        ('--json', None, 'save the rows here after every section'),
        ('--merge', None, 'print one table from rows saved with --json, run '
         'nothing', dict(nargs='+', metavar='JSON')),
    )).parse_args(argv)
    if args.threads is None and args.device == 'cpu':
        args.threads = 1
    if args.dense_amp_dtype is None:
        args.dense_amp_dtype = 'float32' if args.tiny else 'float16'
    if args.compile_backend is None:
        args.compile_backend = 'eager' if args.tiny else 'inductor'
    if args.dist_families is None:
        args.dist_families = ['deit'] if args.tiny else list(DIST_FAMILIES)
    return args


def merge(paths: Sequence[str]) -> str:
    """One table from saved rows (sections in the benchmark's order)."""
    meta, rows = None, []
    for path in paths:
        with open(path) as f:
            saved = json.load(f)
        meta = meta or saved['meta']
        rows.extend(saved['rows'])
    rows.sort(key=lambda r: SECTIONS.index(r['section']))
    return markdown(meta, rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.merge:
        print(merge(args.merge))
        return 0
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        print(
            'error: --device cuda but no CUDA device is visible; use '
            '--device cpu --tiny for a CPU run',
            file=sys.stderr)
        return 2
    if args.device == 'cuda':
        torch.backends.cudnn.benchmark = True
    if args.threads:
        torch.set_num_threads(args.threads)
    from mmengine.logging import MMLogger

    import mmlape.hosts  # registers the models
    mmlape.hosts.apply()  # mmpretrain beside transformers 5, as the tools
    # the current logger: mmengine's messages (weight init summaries) only
    # from warnings up
    MMLogger.get_instance('bench_gpu', log_level='WARNING')
    bench = Bench(args)
    for section in SECTIONS:
        if section not in args.sections:
            continue
        start = time.perf_counter()
        print(f'[bench_gpu] {section} ...', file=sys.stderr, flush=True)
        with contextlib.redirect_stdout(sys.stderr):
            RUNNERS[section](bench)
        print(
            f'[bench_gpu] {section} done in '
            f'{time.perf_counter() - start:.0f} s',
            file=sys.stderr,
            flush=True)
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(dict(meta=bench.meta, rows=bench.rows), f, indent=1)
    print(markdown(bench.meta, bench.rows))
    return 0


if __name__ == '__main__':
    sys.exit(main())
