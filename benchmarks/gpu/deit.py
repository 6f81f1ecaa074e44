"""``deit``: DeiT-Ti and DeiT-B classifiers, every join against
mmpretrain's ``VisionTransformer`` and timm's DeiT: train and eval
throughput, peak memory, MFU against the measured bf16 matmul peak, the
targets."""
from typing import Callable, Dict

import torch
import torch.nn as nn

from .common import (GAP, TARGETS, TINY_ARCH, Bench, Classifier, eval_fn,
                     fmt_flops, fmt_mem, fmt_rate, fmt_ratio, free, join_class,
                     peak_memory, targeted, train_fn)

#: Default join throughput relative to the reference implementations.
REFERENCE_TARGETS = {'timm': 0.98, 'mmpretrain ViT': 1.0}
DEIT_NAMES = {'tiny': 'DeiT-Ti', 'base': 'DeiT-B'}


def matmul_peak(bench: Bench) -> float:
    """Measured FLOP/s of a square matrix product in the autocast dtype."""
    n = 512 if bench.tiny else 8192
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

    builders['mmpretrain ViT'] = mmpretrain_vit

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

    builders['timm'] = timm_deit
    return builders


def model_flops(model: nn.Module, img: int) -> float:
    """FLOPs of one image's forward pass (matmuls, convolutions,
    attention), counted by PyTorch's flop counter."""
    from torch.utils.flop_counter import FlopCounterMode
    device = next(model.parameters()).device
    model.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 3, img, img, device=device))
    return float(counter.get_total_flops())


def section_deit(bench: Bench) -> None:
    """Train/eval throughput, memory and MFU of the DeiT classifiers."""
    peak = matmul_peak(bench)
    n = 512 if bench.tiny else 8192
    bench.add(
        'deit',
        f'{bench.args.amp_dtype} matmul {n}x{n}x{n}',
        train=fmt_flops(peak) + '/s',
        note='the peak that MFU is measured against')
    sizes = (('tiny', 4 if bench.tiny else 256), ('base',
                                                  4 if bench.tiny else 128))
    for arch, batch in sizes:
        if arch not in bench.args.archs:
            continue
        img = 32 if bench.tiny else 224
        case = f'{DEIT_NAMES[arch]} b{batch}'
        gen = torch.Generator(device=bench.device).manual_seed(0)
        x = torch.randn(batch, 3, img, img, device=bench.device, generator=gen)
        y = torch.randint(
            0, 1000, (batch, ), device=bench.device, generator=gen)
        models, notes, steps, setups = {}, {}, {}, {}
        for name, build in deit_models(bench, arch).items():
            try:
                models[name] = build().to(bench.device)
            except ImportError as err:
                notes[name] = f'skipped: {err}'
            except Exception as err:  # noqa: BLE001 -- reported in the row
                bench.failed('deit', case, name, err)
        for name, model in models.items():
            opt = torch.optim.AdamW(
                model.parameters(), lr=1e-4, fused=bench.device.type == 'cuda')
            steps[name, 'train'] = train_fn(bench, model, opt, x, y)
            steps[name, 'eval'] = eval_fn(bench, model, x)
            setups[name, 'train'] = model.train
            setups[name, 'eval'] = model.eval
        times = bench.fastest(steps, setups=setups)
        memory = {}
        for name, model in models.items():
            model.train()
            memory[name] = peak_memory(bench, steps[name, 'train'])
        base = {m: times.get(('Default', m)) for m in ('train', 'eval')}
        for name in list(models) + [n for n in notes if n not in models]:
            if name not in models:
                bench.add('deit', case, name, note=notes[name])
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
                train=fmt_rate(batch / tr),
                train_x=fmt_ratio(tr, base['train']),
                eval_=fmt_rate(batch / ev),
                eval_x=fmt_ratio(ev, base['eval']),
                memory=fmt_mem(memory[name]),
                note='; '.join(row_notes))
        del models, steps
        free(bench)
