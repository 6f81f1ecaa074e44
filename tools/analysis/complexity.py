"""Parameters and FLOPs of every PE join for every architecture, as markdown.

Backbones only (heads and necks depend on the task), one image:
DeiT-Ti/S/B, T2T-ViT-7 and CeiT-Ti at 224x224, ViT-Lite-7/4 and CCT-7/3x1
at 32x32, ViT-Adapter-Ti/S/B at 512x512, Segmenter's ViT-Ti at 512x512.
With PVG/MPVG, CeiT-Ti pools by GAP instead of LCA (it has no class token),
CCT keeps its sequence pooling. FLOPs are counted by
``torch.utils.flop_counter`` (a multiply-add is 2 FLOPs); the bilinear
sampling inside ViT-Adapter's deformable attention (mmcv's CPU path) is not
counted.

Example:
    python tools/analysis/complexity.py --out complexity.md
    python tools/analysis/complexity.py --archs deit-tiny vit-adapter-tiny
    python tools/analysis/complexity.py --archs t2t-vit-7 cct-7/3x1
"""
import argparse
import os.path as osp
import sys

import torch

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

GAP = dict(with_cls_token=False, out_type='avg_featmap')
DENSE_GAP = dict(with_cls_token=False, out_type='featmap')
CLS_JOINS = ('Default', 'Share', 'Unshare', 'LaPE')
ARCHS = {
    # name: (builder, size, [(join, extra kwargs)])
    **{
        f'deit-{a}': ('LaPEViT', dict(arch=f'deit-{a}'), 224,
                      [(j, {}) for j in CLS_JOINS] + [('PVG', GAP),
                                                      ('MPVG', GAP)])
        for a in ('tiny', 'small', 'base')
    },
    **{
        f'vit-adapter-{a}': ('LaPEViTAdapter', dict(arch=a), 512,
                             [('Default', {}), ('LaPE', {}), ('PVG', {})])
        for a in ('tiny', 'small', 'base')
    },
    'segmenter-tiny': ('LaPEViT',
                       dict(arch='deit-tiny', img_size=512,
                            out_type='featmap'), 512,
                       [('Default', {}), ('LaPE', {}),
                        ('PVG', DENSE_GAP), ('MPVG', DENSE_GAP)]),
    **{
        arch: ('LaPEViT', dict(arch=arch), size,
               [(j, {}) for j in joins] + [('PVG', pvg), ('MPVG', pvg)])
        for arch, size, joins, pvg in [
            ('t2t-vit-7', 224, ('Default', 'Share', 'LaPE'), GAP),
            ('ceit-tiny', 224, CLS_JOINS, GAP),
            ('vit-lite-7/4', 32, CLS_JOINS, GAP),
            ('cct-7/3x1', 32, CLS_JOINS, {}),
        ]
    },
    # Swin-Ti (224x224): Swin-T with an absolute PE at stage 1 (MPVG's
    # Table 1). Its FLOPs include building the PE plan (the carry through
    # the patch mergings), which an eval-mode model does once per size.
    'swin-tiny': ('LaPESwin', dict(arch='tiny'), 224,
                  [(j, {}) for j in ('Default', 'LaPE', 'PVG', 'MPVG')]),
    'test-tiny': ('LaPEViT', dict(arch='test-tiny', img_size=64), 64,
                  [(j, {}) for j in CLS_JOINS] + [('PVG', GAP),
                                                  ('MPVG', GAP)]),
}
DEFAULT_ARCHS = [a for a in ARCHS if a != 'test-tiny']


def measure(builder, kwargs, size, flops=True):
    """Parameters and FLOPs (None unless ``flops``) of one backbone."""
    from torch.utils.flop_counter import FlopCounterMode

    import mmlape.models as models
    model = getattr(models, builder)(**kwargs).eval()
    params = sum(p.numel() for p in model.parameters())
    if not flops:
        return params, None
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 3, size, size))
    return params, counter.get_total_flops()


def table(archs):
    rows = [
        '| architecture | join | input | params (M) | GFLOPs | '
        'params vs default |', '|---|---|---|---|---|---|'
    ]
    for arch in archs:
        builder, base, size, joins = ARCHS[arch]
        ref = None
        for join, extra in joins:
            kwargs = dict(base, pe_join=join, **extra)
            params, flops = measure(builder, kwargs, size)
            ref = params if ref is None else ref
            rows.append(f'| {arch} | {join} | {size}x{size} | '
                        f'{params / 1e6:.3f} | {flops / 1e9:.3f} | '
                        f'{params - ref:+,d} |')
    return '\n'.join(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--archs', nargs='+', default=DEFAULT_ARCHS, choices=list(ARCHS))
    parser.add_argument('--out', help='also write the table to this file')
    args = parser.parse_args(argv)
    text = table(args.archs)
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
