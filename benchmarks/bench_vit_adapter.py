"""ViT-Adapter-Ti at 512x512: the fastest eval forward and train step of
the backbone for every join that has configs (MPVG with the final norm on,
as its configs), interleaved, as ratios to the default join (target:
<= 1.03x); then where one eval forward of the default model goes, by
module kind (deformable attention, ViT blocks, the spatial prior module,
the rest). docs/speed.md reads them.

Example:
    python benchmarks/bench_vit_adapter.py --rounds 5
"""
import sys
import time
from collections import defaultdict

import torch
from shared import interleaved_minima, join_class, join_names, parser, table


def joins():
    """The joins timed: every registered join that has configs."""
    return join_names(with_configs=True)


def build(join):
    from mmlape.models import LaPEViTAdapter
    return LaPEViTAdapter(
        'tiny',
        pe_join=join,
        final_norm=join_class(join).adds_pe_at_final_norm,
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
    spent, starts, handles = defaultdict(float), {}, []
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
    args = parser(__doc__, (
        ('--size', 512, None),
        ('--rounds', 5, None),
        ('--warmup', 1, None),
        ('--threads', 1, None),
    )).parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    img = torch.randn(1, 3, args.size, args.size)
    models = {join: build(join) for join in joins()}
    med = interleaved_minima(
        models,
        lambda model, mode: step(model, img, mode == 'train'),
        rounds=args.rounds,
        warmup=args.warmup)
    base, rows, failed = med['Default'], [], []
    for name in models:
        ev, tr = med[name]['eval'], med[name]['train']
        rows.append((name, f'{ev:.3f}', f'{ev / base["eval"]:.3f}',
                     f'{tr:.3f}', f'{tr / base["train"]:.3f}'))
        for mode in ('eval', 'train'):
            if med[name][mode] / base[mode] > 1.03:
                failed.append(f'{name} {mode}')
    print('\n'.join(
        table((f'ViT-Adapter-Ti {args.size}x{args.size}, {args.threads} '
               'thread(s)', 'eval s', 'eval x', 'train s', 'train x'), rows)))
    print('targets (<= 1.03x): ' +
          ('all met' if not failed else 'missed: ' + ', '.join(failed)))
    total, spent = breakdown(models['Default'].eval(), img)
    print(f'\nwhere one eval forward of the default model goes '
          f'({total:.3f} s):')
    print('\n'.join(
        table(
            ('part', 's', 'share'),
            [(kind, f'{secs:.3f}', f'{secs / total:.0%}')
             for kind, secs in sorted(spent.items(), key=lambda kv: -kv[1])])))
    return 0


if __name__ == '__main__':
    sys.exit(main())
