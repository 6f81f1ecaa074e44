"""GPU acceptance of mmlape: speed, memory and training runs, one table.

References:
    DeiT (Touvron et al., 2021) sizes and batch sizes; ViT-Adapter (Chen et
    al., ICLR 2023) and Segmenter (Strudel et al., ICCV 2021) task sizes;
    model FLOPs utilisation as in PaLM (Chowdhery et al., 2022): achieved
    model FLOP/s over a peak, here the measured bf16 matmul peak.

Sections (``--sections``, all by default, in this order), one module each
under ``benchmarks/gpu/``, all timed by ``benchmarks/timing.py``:

- ``deit``: DeiT-Ti (batch 256) and DeiT-B (batch 128) at 224x224, for every
  registered join, mmpretrain's ``VisionTransformer`` and timm's
  ``deit_*_patch16_224`` (skipped with a note when timm is absent): train
  throughput (autocast, forward + backward + AdamW step), eval throughput
  (no grad), peak memory of a train step; for DeiT-B the model FLOPs
  utilisation against the bf16 matmul peak measured in the same run; the
  targets (every join that is not a baseline <= 1.03x / 1.01x the default
  join's train / eval step time, default >= 0.98x timm's throughput and >=
  mmpretrain's).
- ``compile``: ``torch.compile`` per join (``--compile-joins``): graph breaks
  (``torch._dynamo.explain``) of the train and the eval forward, and the
  speed-up of compiled over eager train and eval steps.
- ``adapter``: ViT-Adapter-Ti Mask R-CNN at 1024x1024 (batch 2) and UperNet
  at 512x512 (batch 8): one training step per join that has configs, built
  from the configs under ``configs/vit_adapter`` (random init, SyncBN as BN
  in one process).
- ``msda``: mmcv's CUDA multi-scale deformable attention against its PyTorch
  path at ViT-Adapter-Ti's 1024x1024 shapes: max abs differences (output
  and gradients) and speed; whether the CUDA op takes bf16.
- ``segmenter``: Segmenter-Ti at 512x512 (batch 8), one training step per
  join, from ``configs/segmenter``.
- ``dist``: ``tools/dist_train.sh CONFIG 1 --amp`` for one config of each
  family (DeiT, Mask R-CNN, UperNet, Segmenter; the LaPE variants) for
  about 50 iterations on generated data (the dense-chain tests' formats),
  then ``tools/dist_test.sh`` on its checkpoint: does it finish, does the
  loss fall.

Ratios (``x``) are step times over the default join's step time in the same
section and size (above 1 is slower), as in ``bench_joins.py``. Timings
interleave the models round by round and keep each model's fastest round.
A case that fails is a row whose note starts with ``failed:``.

``--device cpu --tiny`` runs every section on CPU with tiny models and
inputs (a test does); ``--json`` saves the rows after every section, and
``--merge`` prints one table from saved rows.

Example:
    python benchmarks/bench_gpu.py --json bench.json
    python benchmarks/bench_gpu.py --sections deit,msda --json a.json
    python benchmarks/bench_gpu.py --merge a.json b.json
    python benchmarks/bench_gpu.py --device cpu --tiny
"""
import argparse
import contextlib
import json
import os.path as osp
import sys
import time
from typing import Callable, List, Sequence

import torch

HERE = osp.dirname(osp.abspath(__file__))
sys.path.insert(0, osp.dirname(HERE))
sys.path.insert(0, HERE)

from gpu.common import COLUMNS, Bench, join_names, table  # noqa: E402
from gpu.compiled import section_compile  # noqa: E402
from gpu.deit import section_deit  # noqa: E402
from gpu.dense import section_adapter, section_segmenter  # noqa: E402
from gpu.dist import DIST_FAMILIES, section_dist  # noqa: E402
from gpu.msda import section_msda  # noqa: E402

__all__ = ['COLUMNS', 'DIST_FAMILIES', 'SECTIONS', 'main', 'parse_args']

SECTIONS = ('deit', 'compile', 'adapter', 'msda', 'segmenter', 'dist')

# ---------------------------------------------------------------------------
# command line

RUNNERS = {
    'deit': section_deit,
    'compile': section_compile,
    'adapter': section_adapter,
    'msda': section_msda,
    'segmenter': section_segmenter,
    'dist': section_dist,
}


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
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        '--sections',
        type=_csv(SECTIONS),
        default=list(SECTIONS),
        help=f'comma-separated, from {",".join(SECTIONS)} (default: all)')
    parser.add_argument(
        '--device',
        default='cuda',
        help='cuda (default) or cpu (with --tiny, for tests)')
    parser.add_argument(
        '--tiny',
        action='store_true',
        help='tiny models, inputs and runs (CPU tests)')
    parser.add_argument(
        '--joins',
        type=_csv(join_names()),
        default=join_names(),
        help='joins to measure (default: every registered join)')
    from mmlape.models.layers.pos_embed import pe_settings
    parser.add_argument(
        '--pe',
        choices=pe_settings(),
        default=None,
        help='PE setting of the deit section\'s models, e.g. rope_mixed or '
        'rope_mixed+learnable: the joins of --joins that fit it, without '
        'the reference models (default: DeiT\'s learnable PE)')
    parser.add_argument(
        '--archs',
        type=_csv(('tiny', 'base')),
        default=['tiny', 'base'],
        help='DeiT sizes of the deit section (default: tiny,base)')
    parser.add_argument(
        '--amp-dtype',
        choices=('bfloat16', 'float16'),
        default='bfloat16',
        help='autocast dtype (default: bfloat16)')
    parser.add_argument(
        '--dense-amp-dtype',
        choices=('float16', 'bfloat16', 'float32'),
        default=None,
        help='autocast dtype of the adapter and segmenter sections '
        '(default: float16, what --amp of the tools uses; mmlape runs mmcv '
        '2.1.0\'s deformable attention, RoIAlign and NMS in float32 under '
        'either; float32 with --tiny on CPU)')
    parser.add_argument(
        '--compile-arch',
        choices=('tiny', 'base'),
        default='tiny',
        help='DeiT size of the compile section (default: tiny, batch 256)')
    parser.add_argument(
        '--compile-joins',
        type=_csv(join_names()),
        default=join_names(with_configs=True),
        help='joins of the compile section, among --joins (default: the '
        'joins with configs, Default,LaPE,PVG,MPVG: each compiles for about '
        'a minute)')
    parser.add_argument(
        '--compile-backend',
        default=None,
        help='torch.compile backend (default: inductor; eager with --tiny)')
    parser.add_argument(
        '--dist-families',
        type=_csv(tuple(DIST_FAMILIES)),
        default=None,
        help='families of the dist section (default: all; deit with --tiny)')
    parser.add_argument(
        '--dist-iters',
        type=int,
        default=50,
        help='iterations of each dist training run (default: 50)')
    parser.add_argument(
        '--work-root',
        help='folder of the dist runs (default: a new temporary folder)')
    parser.add_argument(
        '--iters', type=int, help='steps per timed round (default: 10)')
    parser.add_argument('--rounds', type=int, help='timed rounds (default: 5)')
    parser.add_argument(
        '--warmup', type=int, help='untimed steps per case (default: 3)')
    parser.add_argument(
        '--threads',
        type=int,
        help='torch CPU threads (default: unchanged; 1 with --device cpu: '
        'tiny ops on a shared machine run far faster on one thread)')
    parser.add_argument(
        '--json', help='save the rows here after every section')
    parser.add_argument(
        '--merge',
        nargs='+',
        metavar='JSON',
        help='print one table from rows saved with --json, run nothing')
    args = parser.parse_args(argv)
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
    return table(meta, rows)


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
    print(table(bench.meta, bench.rows))
    return 0


if __name__ == '__main__':
    sys.exit(main())
