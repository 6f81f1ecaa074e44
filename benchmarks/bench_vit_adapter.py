"""ViT-Adapter-Ti at 512x512: cost of the PE joins, and where the time goes.

Fastest eval forward and train step (forward + backward) of the backbone for
every join that has configs (default, LaPE, PVG, MPVG; MPVG with the final
norm on, as its configs: ViT-Adapter has no final ViT norm of its own),
interleaved round by round, as ratios to the default join measured in the
same run. Target: <= 1.03x.

Then a breakdown of one eval forward of the default model by module kind:
multi-scale deformable attention (injectors and extractors), ViT blocks, the
spatial prior module and the rest (ConvFFNs, norms, up-sampling, pyramid).

Example:
    python benchmarks/bench_vit_adapter.py --rounds 5
"""
import argparse
import os.path as osp
import sys
import time
from collections import defaultdict

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from timing import interleaved_minima  # noqa: E402


def joins():
    """The joins timed: every registered join that has configs."""
    from mmlape.models.layers import pe_join_classes
    return list(pe_join_classes(with_configs=True))


def build(join):
    from mmlape.models import LaPEViTAdapter
    from mmlape.registry import PE_JOINS
    return LaPEViTAdapter(
        'tiny',
        pe_join=join,
        final_norm=PE_JOINS.module_dict[join].adds_pe_at_final_norm,
        drop_path_rate=0.,
        interaction_indexes=[[0, 2], [3, 5], [6, 8], [9, 11]],
        window_size=[14, 14, 0] * 4)


def step(model, img, train):
    if train:
        sum(f.mean() for f in model(img)).backward()
        model.zero_grad(set_to_none=True)
    else:
        with torch.no_grad():
            model(img)


def breakdown(model, img):
    """Seconds per module kind in one eval forward (outermost modules only,
    so nested time is not counted twice)."""
    from mmlape.models.layers import TransformerBlock
    from mmlape.models.layers.adapter import DeformAttn, SpatialPriorModule
    kinds = {
        DeformAttn: 'deformable attention',
        TransformerBlock: 'ViT blocks',
        SpatialPriorModule: 'spatial prior module'
    }
    spent = defaultdict(float)
    starts = {}
    handles = []
    for module in model.modules():
        kind = next((v for k, v in kinds.items() if isinstance(module, k)),
                    None)
        if kind is None:
            continue
        handles.append(
            module.register_forward_pre_hook(
                lambda m, a: starts.__setitem__(id(m), time.perf_counter())))
        handles.append(
            module.register_forward_hook(
                lambda m, a, o, kind=kind: spent.__setitem__(
                    kind, spent[kind] + time.perf_counter() - starts[id(m)])))
    start = time.perf_counter()
    step(model, img, train=False)
    total = time.perf_counter() - start
    for h in handles:
        h.remove()
    spent['other'] = total - sum(spent.values())
    return total, spent


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--size', type=int, default=512)
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--threads', type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    img = torch.randn(1, 3, args.size, args.size)
    models = {join: build(join) for join in joins()}
    med = interleaved_minima(
        models,
        lambda model, mode: step(model, img, mode == 'train'),
        rounds=args.rounds,
        warmup=args.warmup)
    base = med['Default']
    print(f'| ViT-Adapter-Ti {args.size}x{args.size}, {args.threads} '
          f'thread(s) | eval s | eval x | train s | train x |')
    print('|---|---|---|---|---|')
    failed = []
    for name in models:
        ev, tr = med[name]['eval'], med[name]['train']
        print(f'| {name} | {ev:.3f} | {ev / base["eval"]:.3f} | {tr:.3f} | '
              f'{tr / base["train"]:.3f} |')
        for mode in ('eval', 'train'):
            if med[name][mode] / base[mode] > 1.03:
                failed.append(f'{name} {mode}')
    print('targets (<= 1.03x): ' +
          ('all met' if not failed else 'missed: ' + ', '.join(failed)))
    model = models['Default'].eval()
    total, spent = breakdown(model, img)
    print(f'\nwhere one eval forward of the default model goes '
          f'({total:.3f} s):')
    print('| part | s | share |')
    print('|---|---|---|')
    for kind, secs in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f'| {kind} | {secs:.3f} | {secs / total:.0%} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
