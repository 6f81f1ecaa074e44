"""``deit``: DeiT-Ti and DeiT-B classifiers, every join against
mmpretrain's ``VisionTransformer`` and timm's DeiT: train and eval
throughput, peak memory, MFU against the measured bf16 matmul peak, the
targets. ``compile``: ``torch.compile`` per join: graph breaks of the train
and the eval forward (``torch._dynamo.explain``), the graphs compiled
(counted by wrapping the backend) and the speed-up over eager steps."""
import time
from typing import Callable, Dict

import torch
import torch.nn as nn
from shared import GAP, TARGETS, TINY_ARCH, join_class, targeted

from .common import (Bench, Classifier, eval_fn, fmt_flops, fmt_mem, fmt_rate,
                     fmt_ratio, free, peak_memory, train_fn)

#: Default join throughput relative to the reference implementations.
REFERENCE_TARGETS = {'timm': 0.98, 'mmpretrain ViT': 1.0}
DEIT_NAMES = {'tiny': 'DeiT-Ti', 'base': 'DeiT-B'}


def matmul_peak(bench: Bench, n: int) -> float:
    """Measured FLOP/s of an ``n`` x ``n`` matrix product in the autocast
    dtype."""
    gen = torch.Generator(device=bench.device).manual_seed(0)
    a, b = (
        torch.randn(
            n, n, device=bench.device, dtype=bench.dtype, generator=gen)
        for _ in range(2))
    times = bench.fastest({'mm': lambda: torch.mm(a, b)})
    return 2 * n**3 / times['mm']


def deit_models(bench: Bench, arch: str) -> Dict[str, Callable[[], nn.Module]]:
    """Builders of the models compared at one DeiT size: the joins of
    ``--joins`` that fit the PE setting ``--pe`` and, in DeiT's own
    setting, mmpretrain's and timm's ViT."""
    from mmlape.models import LaPEViT
    from mmlape.models.layers.pos_embed import join_pe_type, parse_pe_setting
    img = 32 if bench.tiny else 224
    mm_arch = TINY_ARCH if bench.tiny else f'deit-{arch}'
    dims = (TINY_ARCH
            if bench.tiny else LaPEViT.arch_zoo[mm_arch])['embed_dims']
    setting = getattr(bench.args, 'pe', None) or 'learnable'
    pe = {k: v for k, v in parse_pe_setting(setting).items() if v}
    builders = {}
    for join in bench.args.joins:
        if not join_class(join).fits(join_pe_type(setting)):
            continue
        gap = {} if join_class(join).allows_cls_token else GAP

        def build(join=join, gap=gap):
            return Classifier(
                LaPEViT(mm_arch, img_size=img, pe_join=join, **pe, **gap),
                dims)

        builders[join] = build
    if setting != 'learnable':
        return builders

    def mmpretrain_vit():
        from mmpretrain.models import VisionTransformer
        return Classifier(
            VisionTransformer(mm_arch, img_size=img, patch_size=16), dims)

    def timm_deit():
        import timm
        extra = dict(
            img_size=img, embed_dim=64, depth=4, num_heads=2) \
            if bench.tiny else {}
        return timm.create_model(
            f'deit_{arch}_patch16_224',
            pretrained=False,
            num_classes=1000,
            **extra)

    return dict(builders, **{'mmpretrain ViT': mmpretrain_vit}, timm=timm_deit)


def model_flops(model: nn.Module, img: int) -> float:
    """FLOPs of one image's forward pass (matmuls, convolutions,
    attention), counted by PyTorch's flop counter."""
    from mmlape.analysis import flop_counter
    device = next(model.parameters()).device
    model.eval()
    with torch.no_grad(), flop_counter() as counter:
        model(torch.randn(1, 3, img, img, device=device))
    return float(counter.get_total_flops())


def steps(bench: Bench, model, x, y):
    """A model's train and eval steps and their setups by mode, its
    optimizer."""
    opt = torch.optim.AdamW(
        model.parameters(), lr=1e-4, fused=bench.device.type == 'cuda')
    cases = dict(
        train=train_fn(bench, model, opt, x, y), eval=eval_fn(bench, model, x))
    return cases, dict(train=model.train, eval=model.eval), opt


def section_deit(bench: Bench) -> None:
    """Train/eval throughput, memory and MFU of the DeiT classifiers."""
    n = 512 if bench.tiny else 8192
    peak = matmul_peak(bench, n)
    bench.add(
        'deit',
        f'{bench.args.amp_dtype} matmul {n}x{n}x{n}',
        note='the peak that MFU is measured against',
        train=fmt_flops(peak) + '/s')
    img = 32 if bench.tiny else 224
    for arch, batch in (('tiny', 256), ('base', 128)):
        if arch not in bench.args.archs:
            continue
        batch = 4 if bench.tiny else batch
        case = f'{DEIT_NAMES[arch]} b{batch}'
        x, y = bench.inputs(batch, img)
        models, notes, cases, setups = {}, {}, {}, {}
        for name, build in deit_models(bench, arch).items():
            try:
                models[name] = build().to(bench.device)
            except ImportError as err:
                notes[name] = f'skipped: {err}'
            except Exception as err:  # noqa: BLE001 -- reported in the row
                bench.failed('deit', case, name, err)
        for name, model in models.items():
            more, setup, _ = steps(bench, model, x, y)
            cases.update({(name, m): s for m, s in more.items()})
            setups.update({(name, m): s for m, s in setup.items()})
        times = bench.fastest(cases, setups=setups)
        memory = {}
        for name, model in models.items():
            model.train()
            memory[name] = peak_memory(bench, cases[name, 'train'])
        base = {m: times.get(('Default', m)) for m in ('train', 'eval')}
        for name in list(models) + [n for n in notes if n not in models]:
            if name not in models:
                bench.add('deit', case, name, notes[name])
                continue
            tr, ev = times[name, 'train'], times[name, 'eval']
            row_notes = []
            if targeted(name) and base['train']:
                for mode, t in (('train', tr), ('eval', ev)):
                    ratio, limit = t / base[mode], TARGETS[mode]
                    row_notes.append(
                        f'{mode} {ratio:.3f}x <= {limit}: '
                        f'{"met" if ratio <= limit else "MISSED"}')
            if name == 'Default':
                for ref, limit in REFERENCE_TARGETS.items():
                    if (ref, 'train') in times:
                        ratio = times[ref, 'train'] / tr
                        row_notes.append(
                            f'throughput {ratio:.3f}x {ref} (>= {limit}: '
                            f'{"met" if ratio >= limit else "MISSED"})')
            if arch == 'base':
                flops = 3 * model_flops(models[name], img)
                mfu = batch / tr * flops / peak
                row_notes.append(f'MFU {100 * mfu:.1f}% '
                                 f'({fmt_flops(flops)}/img train)')
                models[name].train()
            bench.add(
                'deit',
                case,
                name,
                '; '.join(row_notes),
                train=fmt_rate(batch / tr),
                train_x=fmt_ratio(tr, base['train']),
                eval=fmt_rate(batch / ev),
                eval_x=fmt_ratio(ev, base['eval']),
                memory=fmt_mem(memory[name]))
        del models, cases
        free(bench)


def counting_backend(name: str, graphs: list):
    """The ``torch.compile`` backend ``name``, appending to ``graphs`` each
    time it compiles a graph (a first compile or a recompile)."""
    from torch._dynamo.backends.registry import lookup_backend
    inner = lookup_backend(name)

    def backend(gm, example_inputs):
        graphs.append(len(gm.graph.nodes))
        return inner(gm, example_inputs)

    return backend


def section_compile(bench: Bench) -> None:
    """Graph breaks and speed-up of ``torch.compile`` per join."""
    import torch._dynamo as dynamo
    arch = bench.args.compile_arch
    batch = 4 if bench.tiny else (256 if arch == 'tiny' else 128)
    case = f'{DEIT_NAMES[arch]} b{batch}, {bench.args.compile_backend}'
    x, y = bench.inputs(batch, 32 if bench.tiny else 224)
    builders = deit_models(bench, arch)
    for join in bench.args.joins:
        if join not in bench.args.compile_joins:
            continue
        try:
            dynamo.reset()
            model = builders[join]().to(bench.device)
            breaks = []
            # the second eval call takes the PE plan that the first cached
            for mode, label in (('train', 'train'), ('eval', 'eval'),
                                ('eval', 'eval, cached plan')):
                if label != 'eval, cached plan':  # eval() empties the cache
                    model.train(mode == 'train')
                grad = torch.enable_grad() if mode == 'train' else \
                    torch.no_grad()
                with grad, bench.autocast():
                    out = dynamo.explain(model)(x)
                reasons = sorted({
                    str(getattr(r, 'reason', r)).split('\n')[0][:80]
                    for r in out.break_reasons
                })
                breaks.append(f'{label}: {out.graph_break_count} break(s)' + (
                    f' ({"; ".join(reasons[:2])})' if reasons else ''))
            dynamo.reset()
            graphs = []
            compiled = torch.compile(
                model,
                backend=counting_backend(bench.args.compile_backend, graphs))
            eager, _, opt = steps(bench, model, x, y)
            start = time.perf_counter()
            model.train()
            train_fn(bench, compiled, opt, x, y)()
            model.eval()
            eval_fn(bench, compiled, x)()
            bench.sync()
            compile_s = time.perf_counter() - start
            first = len(graphs)
            cases = {
                'eager train': eager['train'],
                'compiled train': train_fn(bench, compiled, opt, x, y),
                'eager eval': eager['eval'],
                'compiled eval': eval_fn(bench, compiled, x),
            }
            setups = {
                k: model.train if k.endswith('train') else model.eval
                for k in cases
            }
            times = bench.fastest(cases, setups=setups)
            tr = times['eager train'] / times['compiled train']
            ev = times['eager eval'] / times['compiled eval']
            bench.add(
                'compile',
                case,
                join,
                '; '.join(breaks) + f'; first compile {compile_s:.0f} s'
                f' ({first} graphs); recompiles while timed: '
                f'{len(graphs) - first}',
                train=fmt_rate(batch / times['compiled train']),
                train_x=f'{tr:.2f}x faster',
                eval=fmt_rate(batch / times['compiled eval']),
                eval_x=f'{ev:.2f}x faster')
            del model, compiled, opt
        except Exception as err:  # noqa: BLE001 -- reported in the row
            bench.failed('compile', case, join, err)
        finally:
            dynamo.reset()
            free(bench)
