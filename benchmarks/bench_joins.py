"""Cost of each PE join, as ratios in one run: DeiT-Ti (224x224), and the
other ViT-family backbones T2T-ViT-7 (224x224) and ViT-Lite-7/4 (32x32).

For every join and, for DeiT-Ti, for mmpretrain's own ``VisionTransformer``
(the model mmlape's default join replaces) it measures parameters, FLOPs,
the time of an eval forward (no grad) and of a train step (forward +
backward), and the activation memory a train step keeps for backward.
Timings are interleaved across models, round by round, and the fastest
round counts (see ``timing.py``); ratios are against mmlape's default join
measured in the same run.

The joins are those registered that fit the model (``PE_JOINS``); ``--pe``
times them in another PE setting (``pos_embed.pe_settings``: any
``pe_type``, or a rotary one beside an absolute PE, e.g.
``rope_mixed+learnable``), the joins that fit it, against the default join
in the same setting (mmpretrain's ViT is timed with the arch's own PE
only). Targets:
every join that is not a baseline (LaPE, PVG, MPVG) train <= 1.03x and eval
<= 1.01x the default join; the default join <= 1.02x mmpretrain's
VisionTransformer (DeiT-Ti).

Example:
    python benchmarks/bench_joins.py --batch 8 --rounds 15 --out bench.md
    python benchmarks/bench_joins.py --model t2t-vit-7
    python benchmarks/bench_joins.py --model vit-lite-7/4 --batch 64
    python benchmarks/bench_joins.py --pe rope_mixed+learnable
    python benchmarks/bench_joins.py --swin   # Swin-Ti (section at the end)
"""
import argparse
import functools
import os.path as osp
import sys
import time

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from timing import fastest, interleaved_minima  # noqa: E402

GAP = dict(with_cls_token=False, out_type='avg_featmap')
#: model -> input size, default batch, classes, mmpretrain's counterpart (or
#: None). The joins are every registered one that fits the model (T2T-ViT's
#: fixed PE: no Unshare); a join without a class token pools by GAP.
ARCHS = {
    'deit-tiny':
    dict(
        size=224,
        batch=8,
        classes=1000,
        mmpretrain=dict(
            type='VisionTransformer',
            arch='deit-tiny',
            img_size=224,
            patch_size=16)),
    # (mmpretrain's T2T_ViT has no Performer token layers: no counterpart)
    't2t-vit-7':
    dict(size=224, batch=8, classes=1000, mmpretrain=None),
    'vit-lite-7/4':
    dict(size=32, batch=64, classes=100, mmpretrain=None),
}
TARGETS = {'train': 1.03, 'eval': 1.01}


def pe_kwargs(setting=None):
    """The backbone arguments of a PE setting (none: the arch's own)."""
    from mmlape.models.layers.pos_embed import parse_pe_setting
    if setting is None:
        return {}
    return {k: v for k, v in parse_pe_setting(setting).items() if v}


def arch_joins(arch, staged=False, setting=None):
    """``{join: extra backbone args}`` of every registered join that fits
    ``arch`` (a LaPEViT arch, or Swin's with ``staged``) in the PE
    ``setting`` (None: the arch's own)."""
    from mmlape.models import LaPEViT
    from mmlape.models.layers import pe_join_classes
    from mmlape.models.layers.pos_embed import join_pe_type
    if setting is not None:
        pe_type = join_pe_type(setting)
    else:
        pe_type = 'learnable' if staged else LaPEViT.arch_zoo[arch].get(
            'pe_type', 'learnable')
    return {
        name: ({} if cls.allows_cls_token else dict(GAP))
        for name, cls in pe_join_classes().items()
        if cls.fits(pe_type, staged)
    }


def targeted(name):
    """Whether the cost targets hold for ``name`` (every join that is not
    a baseline: LaPE, PVG, MPVG, ...)."""
    from mmlape.registry import PE_JOINS
    cls = PE_JOINS.module_dict.get(name)
    return cls is not None and not cls.baseline


def model_configs(arch, setting=None):
    """Backbone configs of every model timed for ``arch`` in the PE
    ``setting`` (None: the arch's own), by name."""
    spec = ARCHS[arch]
    models = {}
    if spec['mmpretrain'] is not None and setting is None:
        models['mmpretrain ViT'] = spec['mmpretrain']
    for join, extra in arch_joins(arch, setting=setting).items():
        models[join] = dict(
            type='LaPEViT',
            arch=arch,
            img_size=spec['size'],
            pe_join=join,
            **pe_kwargs(setting),
            **extra)
    return models


def build(backbone, arch):
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS as REG
    from mmpretrain.utils import register_all_modules

    import mmlape  # noqa: F401
    from mmlape.models import LaPEViT
    register_all_modules(init_default_scope=False)
    dims = LaPEViT.arch_zoo[arch]['embed_dims']
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = REG.build(
            dict(
                type='ImageClassifier',
                backbone=backbone,
                head=dict(
                    type='VisionTransformerClsHead',
                    num_classes=ARCHS[arch]['classes'],
                    in_channels=dims)))
    return model


def train_step(model, img, target):
    logits = model(img, mode='tensor')
    loss = torch.nn.functional.cross_entropy(logits, target)
    loss.backward()
    model.zero_grad(set_to_none=True)


def eval_step(model, img):
    with torch.no_grad():
        model(img, mode='tensor')


def flops_of(model, img):
    from torch.utils.flop_counter import FlopCounterMode
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(img[:1], mode='tensor')
    return counter.get_total_flops()


def activation_mb(model, img):
    """Memory a train step keeps for backward: the bytes of every distinct
    storage autograd saves during the forward pass. Deterministic, unlike
    the process's resident size, which the allocator makes noisy."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = \
            t.untyped_storage().nbytes()
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(img, mode='tensor')
    return sum(storages.values()) / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--model', default='deit-tiny', choices=list(ARCHS))
    parser.add_argument(
        '--batch',
        type=int,
        default=None,
        help="default: 8 at 224x224, 64 for ViT-Lite's 32x32")
    parser.add_argument('--rounds', type=int, default=15)
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument(
        '--threads',
        type=int,
        default=1,
        help='torch threads (1: least noise from the rest of '
        'a small machine; on 2 cores, 2-thread ratios move '
        'by +-3%% between runs)')
    parser.add_argument(
        '--clock',
        choices=('wall', 'cpu'),
        default='wall',
        help='wall time, or the CPU time of this process (with 1 thread: '
        'what other processes on a busy machine do not inflate)')
    from mmlape.models.layers.pos_embed import pe_settings
    parser.add_argument(
        '--pe',
        choices=pe_settings(),
        help='the PE setting of every model (default: the arch\'s own), '
        'e.g. rope_mixed or rope_mixed+learnable')
    parser.add_argument('--out', help='also write the table (markdown)')
    parser.add_argument(
        '--swin', action='store_true', help='time Swin-Ti instead (below)')
    args = parser.parse_args()
    if args.swin and args.pe:
        parser.error('--pe does not apply to --swin (Swin-Ti keeps its '
                     'stage-1 absolute PE)')
    if args.swin:
        return swin_main(args)
    spec = ARCHS[args.model]
    batch = args.batch or spec['batch']
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    img = torch.randn(batch, 3, spec['size'], spec['size'])
    target = torch.randint(0, spec['classes'], (batch, ))
    models = {
        name: build(cfg, args.model)
        for name, cfg in model_configs(args.model, args.pe).items()
    }

    def step(model, mode):
        if mode == 'train':
            train_step(model, img, target)
        else:
            eval_step(model, img)

    clock = time.process_time if args.clock == 'cpu' else time.perf_counter
    med = interleaved_minima(
        models, step, rounds=args.rounds, warmup=args.warmup, clock=clock)
    base = med['Default']
    rows = []
    header = ('| model | params | GFLOPs | eval ms | eval x | train ms | '
              'train x | act. MB |')
    rows.append(header)
    rows.append('|' + '---|' * 8)
    failed = []
    for name, model in models.items():
        params = sum(p.numel() for p in model.parameters())
        gflops = flops_of(model.eval(), img) / 1e9
        ev, tr = med[name]['eval'], med[name]['train']
        mem = activation_mb(model, img)
        rows.append(f'| {name} | {params / 1e6:.3f}M | {gflops:.3f} | '
                    f'{ev * 1e3:.1f} | {ev / base["eval"]:.3f} | '
                    f'{tr * 1e3:.1f} | {tr / base["train"]:.3f} | {mem:.1f} |')
        if targeted(name):
            for mode, limit in TARGETS.items():
                if med[name][mode] / base[mode] > limit:
                    failed.append(f'{name} {mode} '
                                  f'{med[name][mode] / base[mode]:.3f}x > '
                                  f'{limit}x')
    size = spec['size']
    pe = f' (PE: {args.pe})' if args.pe else ''
    note = (f'{args.model}{pe}, {size}x{size}, batch {batch}, '
            f'{args.threads} CPU threads, {args.clock} clock, fastest of '
            f'{args.rounds} interleaved rounds; x = ratio to the default '
            f'join.')
    if 'mmpretrain ViT' in med:
        ref = med['mmpretrain ViT']
        for mode in ('eval', 'train'):
            if base[mode] / ref[mode] > 1.02:
                failed.append(f'default {mode} {base[mode] / ref[mode]:.3f}x '
                              f'mmpretrain ViT > 1.02x')
        note += (f' Default vs mmpretrain ViT: eval '
                 f'{base["eval"] / ref["eval"]:.3f}x, train '
                 f'{base["train"] / ref["train"]:.3f}x.')
    table = '\n'.join(rows)
    print(table)
    print(note)
    print('targets: ' + ('all met' if not failed else '; '.join(failed)))
    if args.out:
        with open(args.out, 'w') as f:
            f.write(table + '\n\n' + note + '\n')
    return 0


# ---------------------------------------------------------------------------
# Swin-Ti (``--swin``): mmlape's LaPESwin with each join against its default
# join (Swin-T with an absolute PE at stage 1) and against mmpretrain's
# SwinTransformer(arch='tiny', use_abs_pos_embed=True); GAP neck and a
# 1000-way linear head, 224x224. Same timing, ratios and targets as above.
MMPRETRAIN_SWIN = dict(
    type='SwinTransformer', arch='tiny', use_abs_pos_embed=True)


def swin_models():
    """Backbone configs of the Swin models: mmpretrain's, and LaPESwin with
    every registered join that runs on a staged backbone."""
    models = {'mmpretrain Swin': MMPRETRAIN_SWIN}
    for join in arch_joins('tiny', staged=True):
        models[join] = dict(
            type='LaPESwin', arch='tiny', pe_join=join, use_abs_pos_embed=True)
    return models


def build_swin(backbone):
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS as REG
    from mmpretrain.utils import register_all_modules

    import mmlape  # noqa: F401
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return REG.build(
            dict(
                type='ImageClassifier',
                backbone=dict(backbone, img_size=224),
                neck=dict(type='GlobalAveragePooling'),
                head=dict(
                    type='LinearClsHead', num_classes=1000, in_channels=768)))


def swin_main(args):
    args.batch = args.batch or 8
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    img = torch.randn(args.batch, 3, 224, 224)
    target = torch.randint(0, 1000, (args.batch, ))
    models = {name: build_swin(cfg) for name, cfg in swin_models().items()}

    def step(model, mode):
        if mode == 'train':
            train_step(model, img, target)
        else:
            eval_step(model, img)

    clock = time.process_time if args.clock == 'cpu' else time.perf_counter
    best = interleaved_minima(
        models, step, rounds=args.rounds, warmup=args.warmup, clock=clock)
    base, ref = best['Default'], best['mmpretrain Swin']
    rows = [
        '| Swin-Ti | params | GFLOPs | eval ms | eval x | train ms | '
        'train x | act. MB |', '|' + '---|' * 8
    ]
    failed = []
    for name, model in models.items():
        params = sum(p.numel() for p in model.parameters())
        gflops = flops_of(model.eval(), img) / 1e9
        ev, tr = best[name]['eval'], best[name]['train']
        rows.append(f'| {name} | {params / 1e6:.3f}M | {gflops:.3f} | '
                    f'{ev * 1e3:.1f} | {ev / base["eval"]:.3f} | '
                    f'{tr * 1e3:.1f} | {tr / base["train"]:.3f} | '
                    f'{activation_mb(model, img):.1f} |')
        if targeted(name):
            for mode, limit in TARGETS.items():
                ratio = best[name][mode] / base[mode]
                if ratio > limit:
                    failed.append(f'{name} {mode} {ratio:.3f}x > {limit}x')
    table = '\n'.join(rows)

    # The joins' own work, timed alone: what a train step pays for the PE
    # plan (norms and the carry through the mergings, forward + backward).
    def plan_step(backbone):
        plan = backbone.pe_plan(backbone.grid_size)
        terms = [plan.input, plan.final] + plan.attn
        sum(t.sum() for t in terms if t is not None).backward()

    plan_steps, setups = {}, {}
    for name, model in models.items():
        if targeted(name):
            plan_steps[name] = functools.partial(plan_step, model.backbone)
            setups[name] = model.backbone.train
    plan_ms = {
        name: seconds * 1e3
        for name, seconds in fastest(
            plan_steps,
            rounds=args.rounds,
            warmup=0,
            setups=setups,
            clock=clock).items()
    }
    table += '\n\nPE plan per train step (forward + backward): ' + ', '.join(
        f'{name} {ms:.1f} ms ({ms / base["train"] / 10:.2f}%)'
        for name, ms in plan_ms.items())
    note = (f'Swin-Ti, 224x224, batch {args.batch}, {args.threads} CPU '
            f'threads, fastest of {args.rounds} interleaved rounds '
            f'({args.clock} time); x = ratio to the default join. Default vs '
            f'mmpretrain Swin: eval '
            f'{base["eval"] / ref["eval"]:.3f}x, train '
            f'{base["train"] / ref["train"]:.3f}x.')
    print(table)
    print(note)
    print('targets: ' + ('all met' if not failed else '; '.join(failed)))
    if args.out:
        with open(args.out, 'w') as f:
            f.write(table + '\n\n' + note + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
