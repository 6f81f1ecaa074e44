"""Cost of each PE join, as ratios to the default join in one run: for
DeiT-Ti (224x224, and mmpretrain's ``VisionTransformer``, which the
default join replaces), T2T-ViT-7 (224x224), ViT-Lite-7/4 (32x32) or, with
``--swin``, Swin-Ti (and mmpretrain's Swin, and the PE plan's own time),
every registered join that fits the model (``--pe``: in another PE
setting, e.g. ``rope_mixed+learnable``): parameters, FLOPs, an eval forward
and a train step (interleaved, the fastest round counts) and the
activation memory a train step keeps; the targets (joins that are not
baselines <= 1.03x train and 1.01x eval, the default <= 1.02x mmpretrain's
ViT) are checked. docs/speed.md reads them.

Example:
    python benchmarks/bench_joins.py --batch 8 --rounds 15 --out bench.md
    python benchmarks/bench_joins.py --model t2t-vit-7
    python benchmarks/bench_joins.py --model vit-lite-7/4 --batch 64
    python benchmarks/bench_joins.py --pe rope_mixed+learnable
    python benchmarks/bench_joins.py --swin   # Swin-Ti
"""
import functools
import sys
import time

import torch
from shared import (GAP, TARGETS, fastest, interleaved_minima, parser,
                    print_and_save, table, targeted)

#: model -> input size, default batch, classes, mmpretrain's counterpart
#: (T2T_ViT has no Performer token layers there: none).
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
    't2t-vit-7':
    dict(size=224, batch=8, classes=1000, mmpretrain=None),
    'vit-lite-7/4':
    dict(size=32, batch=64, classes=100, mmpretrain=None),
}
COLUMNS = ('params', 'GFLOPs', 'eval ms', 'eval x', 'train ms', 'train x',
           'act. MB')


def arch_joins(arch, staged=False, setting=None):
    """``{join: extra backbone args}`` of every registered join that fits
    ``arch`` (a LaPEViT arch, or Swin's with ``staged``) in the PE
    ``setting`` (None: the arch's own); without a class token, GAP."""
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


def model_configs(arch, setting=None):
    """Backbone configs of every model timed for ``arch`` in the PE
    ``setting`` (None: the arch's own), by name."""
    from mmlape.models.layers.pos_embed import parse_pe_setting
    spec, models = ARCHS[arch], {}
    if spec['mmpretrain'] is not None and setting is None:
        models['mmpretrain ViT'] = spec['mmpretrain']
    pe = {} if setting is None else {
        k: v
        for k, v in parse_pe_setting(setting).items() if v
    }
    for join, extra in arch_joins(arch, setting=setting).items():
        models[join] = dict(
            type='LaPEViT',
            arch=arch,
            img_size=spec['size'],
            pe_join=join,
            **pe,
            **extra)
    return models


def swin_models():
    """Backbone configs of the Swin models: mmpretrain's, and LaPESwin with
    every registered join that runs on a staged backbone."""
    models = {
        'mmpretrain Swin':
        dict(type='SwinTransformer', arch='tiny', use_abs_pos_embed=True)
    }
    for join in arch_joins('tiny', staged=True):
        models[join] = dict(
            type='LaPESwin', arch='tiny', pe_join=join, use_abs_pos_embed=True)
    return models


def build(backbone, classes, dims, swin=False):
    """An mmpretrain classifier of ``backbone`` (Swin: a GAP neck and a
    linear head)."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    from mmpretrain.utils import register_all_modules

    import mmlape  # noqa: F401
    register_all_modules(init_default_scope=False)
    head = dict(
        type='LinearClsHead' if swin else 'VisionTransformerClsHead',
        num_classes=classes,
        in_channels=dims)
    more = dict(neck=dict(type='GlobalAveragePooling')) if swin else {}
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(
            dict(type='ImageClassifier', backbone=backbone, head=head, **more))


def flops_of(model, img):
    from mmlape.analysis import flop_counter
    with torch.no_grad(), flop_counter() as counter:
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


def clock(args):
    return time.process_time if args.clock == 'cpu' else time.perf_counter


def compare(models, img, target, args):
    """Each model's row (name, then :data:`COLUMNS`) and the targets it
    misses, its fastest times, the default join's."""

    def step(model, mode):
        if mode == 'train':
            loss = torch.nn.functional.cross_entropy(
                model(img, mode='tensor'), target)
            loss.backward()
            model.zero_grad(set_to_none=True)
        else:
            with torch.no_grad():
                model(img, mode='tensor')

    best = interleaved_minima(
        models,
        step,
        rounds=args.rounds,
        warmup=args.warmup,
        clock=clock(args))
    base, rows, failed = best['Default'], [], []
    for name, model in models.items():
        params = sum(p.numel() for p in model.parameters())
        gflops = flops_of(model.eval(), img) / 1e9
        ev, tr = best[name]['eval'], best[name]['train']
        rows.append(
            (name, f'{params / 1e6:.3f}M', f'{gflops:.3f}', f'{ev * 1e3:.1f}',
             f'{ev / base["eval"]:.3f}', f'{tr * 1e3:.1f}',
             f'{tr / base["train"]:.3f}', f'{activation_mb(model, img):.1f}'))
        for mode, limit in TARGETS.items():
            ratio = best[name][mode] / base[mode]
            if targeted(name) and ratio > limit:
                failed.append(f'{name} {mode} {ratio:.3f}x > {limit}x')
    return rows, failed, best, base


def main(argv=None):
    from mmlape.models.layers.pos_embed import pe_settings
    parse = parser(__doc__, (
        ('--model', 'deit-tiny', None, dict(choices=list(ARCHS))),
        ('--batch', int, "default: 8 at 224x224, 64 for ViT-Lite's 32x32"),
        ('--rounds', 15, None),
        ('--warmup', 3, None),
        ('--threads', 1, 'torch threads (1: least noise from the rest of a '
         'small machine; on 2 cores, 2-thread ratios move by +-3%% between '
         'runs)'),
        ('--clock', 'wall', 'wall time, or the CPU time of this process '
         '(with 1 thread: what other processes on a busy machine do not '
         'inflate)', dict(choices=('wall', 'cpu'))),
        ('--pe', None, "the PE setting of every model (default: the arch's "
         'own), e.g. rope_mixed or rope_mixed+learnable',
         dict(choices=pe_settings())),
        ('--out', None, 'also write the table (markdown)'),
        ('--swin', False, 'time Swin-Ti instead'),
    ))
    args = parse.parse_args(argv)
    if args.swin and args.pe:
        parse.error('--pe does not apply to --swin (Swin-Ti keeps its '
                    'stage-1 absolute PE)')
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.swin:
        return swin_main(args)
    spec = ARCHS[args.model]
    batch, size = args.batch or spec['batch'], spec['size']
    img = torch.randn(batch, 3, size, size)
    target = torch.randint(0, spec['classes'], (batch, ))
    from mmlape.models import LaPEViT
    dims = LaPEViT.arch_zoo[args.model]['embed_dims']
    models = {
        n: build(cfg, spec['classes'], dims)
        for n, cfg in model_configs(args.model, args.pe).items()
    }
    rows, failed, best, base = compare(models, img, target, args)
    pe = f' (PE: {args.pe})' if args.pe else ''
    note = (f'{args.model}{pe}, {size}x{size}, batch {batch}, '
            f'{args.threads} CPU threads, {args.clock} clock, fastest of '
            f'{args.rounds} interleaved rounds; x = ratio to the default '
            f'join.')
    if 'mmpretrain ViT' in best:
        ref = best['mmpretrain ViT']
        for mode in ('eval', 'train'):
            if base[mode] / ref[mode] > 1.02:
                failed.append(f'default {mode} {base[mode] / ref[mode]:.3f}x '
                              f'mmpretrain ViT > 1.02x')
        note += (f' Default vs mmpretrain ViT: eval '
                 f'{base["eval"] / ref["eval"]:.3f}x, train '
                 f'{base["train"] / ref["train"]:.3f}x.')
    return report(table(('model', ) + COLUMNS, rows), note, failed, args)


def report(lines, note, failed, args):
    """Print the table, the note and the targets; the table and the note to
    ``--out``."""
    text = '\n'.join(lines)
    targets = 'all met' if not failed else '; '.join(failed)
    print_and_save(f'{text}\n{note}\ntargets: {targets}', args.out,
                   f'{text}\n\n{note}\n')
    return 0


def swin_main(args):
    """Swin-Ti (``--swin``): LaPESwin with each join against its default
    join (an absolute PE at stage 1) and mmpretrain's SwinTransformer
    (``use_abs_pos_embed``), 224x224; then the joins' own work, the PE
    plan's forward and backward, timed alone."""
    args.batch = args.batch or 8
    img = torch.randn(args.batch, 3, 224, 224)
    target = torch.randint(0, 1000, (args.batch, ))
    models = {
        n: build(dict(cfg, img_size=224), 1000, 768, swin=True)
        for n, cfg in swin_models().items()
    }
    rows, failed, best, base = compare(models, img, target, args)
    ref = best['mmpretrain Swin']

    def plan_step(backbone):
        plan = backbone.pe_plan(backbone.grid_size)
        terms = [plan.input, plan.final] + plan.attn
        sum(t.sum() for t in terms if t is not None).backward()

    plan_steps = {
        n: functools.partial(plan_step, m.backbone)
        for n, m in models.items() if targeted(n)
    }
    setups = {n: m.backbone.train for n, m in models.items() if targeted(n)}
    seconds = fastest(
        plan_steps, args.rounds, 0, setups=setups, clock=clock(args))
    ms = {n: s * 1e3 for n, s in seconds.items()}
    plan = ', '.join(f'{n} {t:.1f} ms ({t / base["train"] / 10:.2f}%)'
                     for n, t in ms.items())
    lines = table(
        ('Swin-Ti', ) + COLUMNS,
        rows) + ['', f'PE plan per train step (forward + backward): {plan}']
    note = (f'Swin-Ti, 224x224, batch {args.batch}, {args.threads} CPU '
            f'threads, fastest of {args.rounds} interleaved rounds '
            f'({args.clock} time); x = ratio to the default join. Default vs '
            f'mmpretrain Swin: eval '
            f'{base["eval"] / ref["eval"]:.3f}x, train '
            f'{base["train"] / ref["train"]:.3f}x.')
    return report(lines, note, failed, args)


if __name__ == '__main__':
    sys.exit(main())
