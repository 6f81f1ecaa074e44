"""Parameters and FLOPs of every PE join for every architecture, as markdown.

Parameters are counted as the papers count them
(:func:`mmlape.analysis.count_parameters`): every parameter plus the fixed
weights the official code stores as frozen parameters (T2T-ViT's sinusoid
and Performer features, fixed sin-cos PEs), which mmlape keeps as buffers;
the last two columns split the count into learnable parameters and fixed
weights. Backbones only (heads and necks depend on the task), one image:
DeiT-Ti/S/B, T2T-ViT-7 and CeiT-Ti at 224x224, ViT-Lite-7/4 and CCT-7/3x1
at 32x32, ViT-Adapter-Ti/S/B at 512x512, Segmenter's ViT-Ti at 512x512.
The joins are those registered (``mmlape.registry.PE_JOINS``) that fit the
backbone; the dense backbones and Swin take the joins that have configs.
A join without a class token (PVG/MPVG) pools by GAP (CeiT-Ti: LCA over
the GAP token of every layer, as the MPVG paper counts it); CCT keeps its
sequence pooling; ViT-Adapter with MPVG has its final
norm on, as its configs. FLOPs are counted by
``torch.utils.flop_counter`` (a multiply-add is 2 FLOPs; attention's
products counted on the CPU too, :func:`mmlape.analysis.flop_counter`); the
bilinear sampling inside ViT-Adapter's deformable attention (mmcv's CPU
path) is not counted.

``--pe`` measures the ViT-family rows in other PE settings
(``mmlape.models.layers.pos_embed.pe_settings``: every ``pe_type``, and
each rotary one beside each absolute PE, e.g. ``rope_mixed+learnable``),
each with the joins that fit it; Swin keeps its own absolute PE.

Example:
    python tools/analysis/complexity.py --out complexity.md
    python tools/analysis/complexity.py --archs deit-tiny vit-adapter-tiny
    python tools/analysis/complexity.py --archs t2t-vit-7 cct-7/3x1
    python tools/analysis/complexity.py --archs deit-tiny \
        --pe learnable rope_mixed rope_mixed+learnable
"""
import argparse
import os.path as osp
import sys
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch

sys.path.insert(0,
                osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))


class Arch(NamedTuple):
    """One row group of the table.

    ``joins``: ``'all'`` (every registered join that fits the backbone) or
    ``'configs'`` (the joins that have configs: the dense tasks and Swin,
    where the papers compare those only). A join without a class token
    adds ``gap`` to the backbone's arguments (the backbones themselves
    build PVG/MPVG without a class token, and ViT-Adapter's MPVG with its
    final norm).
    """
    builder: str
    kwargs: dict
    size: int
    joins: str = 'all'
    gap: dict = {}
    staged: bool = False


ARCHS = {
    **{
        f'deit-{a}': Arch('LaPEViT', dict(arch=f'deit-{a}'), 224)
        for a in ('tiny', 'small', 'base')
    },
    **{
        f'vit-adapter-{size}':
        Arch('LaPEViTAdapter', dict(arch=size), 512, 'configs')
        for size in ('tiny', 'small', 'base')
    },
    'segmenter-tiny':
    Arch('LaPEViT', dict(arch='deit-tiny', img_size=512, out_type='featmap'),
         512, 'configs'),
    't2t-vit-7':
    Arch('LaPEViT', dict(arch='t2t-vit-7'), 224),
    # PVG/MPVG as the MPVG paper counts them: LCA over every layer's GAP
    # token (configs/ceit/README.md)
    'ceit-tiny':
    Arch(
        'LaPEViT',
        dict(arch='ceit-tiny'),
        224,
        gap=dict(
            with_cls_token=False, pooling=dict(type='LCA',
                                               layer_token='gap'))),
    'vit-lite-7/4':
    Arch('LaPEViT', dict(arch='vit-lite-7/4'), 32),
    # no class token: sequence pooling with every join
    'cct-7/3x1':
    Arch('LaPEViT', dict(arch='cct-7/3x1'), 32),
    # Swin-Ti (224x224): Swin-T with an absolute PE at stage 1 (MPVG's
    # Table 1). Its FLOPs include building the PE plan (the carry through
    # the patch mergings), which an eval-mode model does once per size.
    'swin-tiny':
    Arch(
        'LaPESwin',
        dict(arch='tiny', use_abs_pos_embed=True),
        224,
        'configs',
        staged=True),
    'test-tiny':
    Arch('LaPEViT', dict(arch='test-tiny', img_size=64), 64),
}
DEFAULT_ARCHS = [a for a in ARCHS if a != 'test-tiny']


def setting_kwargs(setting: Optional[str]) -> dict:
    """The backbone arguments of a PE setting (none for the arch's own)."""
    from mmlape.models.layers.pos_embed import parse_pe_setting
    if setting is None:
        return {}
    return {k: v for k, v in parse_pe_setting(setting).items() if v}


def arch_joins(arch: str,
               setting: Optional[str] = None) -> List[Tuple[str, dict]]:
    """``(join, extra backbone kwargs)`` of every join measured for
    ``arch`` in the PE ``setting`` (None: the arch's own), read from the
    join registry when called: the joins that fit the PE they act on (the
    absolute one beside a rotary PE)."""
    from mmlape.models import LaPEViT
    from mmlape.models.layers import pe_join_classes
    from mmlape.models.layers.pos_embed import join_pe_type
    spec = ARCHS[arch]
    zoo = LaPEViT.arch_zoo.get(spec.kwargs.get('arch'), {})
    if setting is None:
        pe_type = spec.kwargs.get('pe_type', zoo.get('pe_type', 'learnable'))
    else:
        pe_type = join_pe_type(setting)
    out = []
    for name, cls in pe_join_classes(spec.joins == 'configs').items():
        if not cls.fits(pe_type, spec.staged):
            continue
        out.append((name, {} if cls.allows_cls_token else dict(spec.gap)))
    return out


def measure_counts(builder, kwargs, size, flops=True):
    """Parameters (:class:`~mmlape.analysis.ParamCount`: learnable, fixed
    and the papers' count) and FLOPs (None unless ``flops``) of one
    backbone."""
    import mmlape.models as models
    from mmlape.analysis import count_parameters, flop_counter
    model = getattr(models, builder)(**kwargs).eval()
    params = count_parameters(model)
    if not flops:
        return params, None
    with torch.no_grad(), flop_counter() as counter:
        model(torch.randn(1, 3, size, size))
    return params, counter.get_total_flops()


def measure(builder, kwargs, size, flops=True):
    """Parameters as the papers count them (fixed weights included) and
    FLOPs (None unless ``flops``) of one backbone."""
    params, n_flops = measure_counts(builder, kwargs, size, flops)
    return params.paper, n_flops


def table(archs, settings: Optional[Sequence[str]] = None):
    """The markdown table; with ``settings`` (PE setting names), the rows
    of every arch but Swin once per setting, labelled with it."""
    rows = [
        '| architecture | join | input | params (M) | GFLOPs | '
        'params vs default | learnable (M) | fixed |',
        '|---|---|---|---|---|---|---|---|'
    ]
    for arch in archs:
        builder, base, size = ARCHS[arch][:3]
        for setting in settings or [None]:
            if setting is not None and ARCHS[arch].staged:
                continue  # Swin: its stage-1 absolute PE only
            label = arch if setting is None else f'{arch} {setting}'
            ref = None
            for join, extra in arch_joins(arch, setting):
                kwargs = dict(
                    base, pe_join=join, **setting_kwargs(setting), **extra)
                count, flops = measure_counts(builder, kwargs, size)
                params = count.paper
                ref = params if ref is None else ref
                rows.append(f'| {label} | {join} | {size}x{size} | '
                            f'{params / 1e6:.3f} | {flops / 1e9:.3f} | '
                            f'{params - ref:+,d} | '
                            f'{count.learnable / 1e6:.3f} | '
                            f'{count.fixed:,d} |')
    return '\n'.join(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--archs', nargs='+', default=DEFAULT_ARCHS, choices=list(ARCHS))
    from mmlape.models.layers.pos_embed import pe_settings
    parser.add_argument(
        '--pe',
        nargs='+',
        metavar='SETTING',
        choices=pe_settings(),
        help='measure the ViT-family rows in these PE settings: '
        f'{", ".join(pe_settings())} (default: each arch\'s own)')
    parser.add_argument('--out', help='also write the table to this file')
    args = parser.parse_args(argv)
    text = table(args.archs, args.pe)
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
