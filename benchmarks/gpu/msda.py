"""``msda``: mmcv's CUDA multi-scale deformable attention against its
PyTorch path at ViT-Adapter-Ti's 1024x1024 shapes: max abs differences
(output and gradients), speed, and whether the CUDA op takes half and
bfloat16."""
from typing import List, Sequence

import torch

from .common import Bench


def msda_inputs(bench: Bench,
                num_query: int,
                value_grids: Sequence,
                heads: int,
                dims: int,
                points: int,
                batch: int,
                dtype: torch.dtype = torch.float32) -> List:
    """Random inputs of ``multi_scale_deformable_attn``: value, spatial
    shapes, level starts, sampling locations, attention weights."""
    gen = torch.Generator(device=bench.device).manual_seed(0)
    dev = bench.device
    shapes = torch.tensor(value_grids, dtype=torch.long, device=dev)
    starts = torch.cat(
        [shapes.new_zeros(1), (shapes[:, 0] * shapes[:, 1]).cumsum(0)[:-1]])
    num_value = sum(h * w for h, w in value_grids)
    levels = len(value_grids)
    value = torch.randn(
        batch, num_value, heads, dims, device=dev, generator=gen)
    loc = torch.rand(
        batch, num_query, heads, levels, points, 2, device=dev, generator=gen)
    weight = torch.rand(
        batch, num_query, heads, levels, points, device=dev,
        generator=gen).flatten(-2).softmax(-1).view(batch, num_query, heads,
                                                    levels, points)
    return [
        value.to(dtype).requires_grad_(), shapes, starts,
        loc.to(dtype).requires_grad_(),
        weight.to(dtype).requires_grad_()
    ]


def section_msda(bench: Bench) -> None:
    """Max abs difference and speed of mmcv's CUDA deformable attention
    against its PyTorch path, at ViT-Adapter-Ti's shapes."""
    from mmcv.ops.multi_scale_deform_attn import (
        MultiScaleDeformableAttnFunction, multi_scale_deformable_attn_pytorch)
    s = 64 if bench.tiny else 1024
    heads, dims = (2, 8) if bench.tiny else (6, 32)
    batch = 1 if bench.tiny else 2
    pyramid = [(s // 8, s // 8), (s // 16, s // 16), (s // 32, s // 32)]
    vit = [(s // 16, s // 16)]
    # injector: the ViT tokens query the pyramid; extractor: the pyramid's
    # tokens (all three levels) query the ViT tokens
    shapes_of = {
        'injector': (vit[0][0] * vit[0][1], pyramid),
        'extractor': (sum(h * w for h, w in pyramid), vit),
    }
    for name, (num_query, value_grids) in shapes_of.items():
        case = f'MSDA {name}, {s}x{s} b{batch}'
        try:
            inputs = msda_inputs(bench, num_query, value_grids, heads, dims, 4,
                                 batch)
            value, shapes, starts, loc, weight = inputs

            def torch_path():
                return multi_scale_deformable_attn_pytorch(
                    value, shapes, loc, weight)

            def cuda_path():
                return MultiScaleDeformableAttnFunction.apply(
                    value, shapes, starts, loc, weight, 64)

            paths = {'PyTorch': torch_path}
            if bench.device.type == 'cuda':
                paths['CUDA'] = cuda_path
            outs, grads = {}, {}
            for key, fn in paths.items():
                out = fn()
                g = torch.autograd.grad(out.square().sum(),
                                        [value, loc, weight])
                outs[key], grads[key] = out.detach(), g
            cases = {}
            for key, fn in paths.items():
                cases[key, 'train'] = (lambda fn=fn: torch.autograd.grad(
                    fn().sum(), [value, loc, weight]))

                def fwd(fn=fn):
                    with torch.no_grad():
                        fn()

                cases[key, 'eval'] = fwd
            times = bench.fastest(cases)
            if 'CUDA' not in paths:
                bench.add(
                    'msda',
                    case,
                    'PyTorch path',
                    train=f'{1e3 * times["PyTorch", "train"]:.2f} ms',
                    eval_=f'{1e3 * times["PyTorch", "eval"]:.2f} ms',
                    note=f'the CUDA op needs a CUDA device '
                    f'({bench.device.type} here); fwd+bwd / fwd times')
                continue
            diff = (outs['CUDA'] - outs['PyTorch']).abs().max().item()
            gdiff = [(a - b).abs().max().item()
                     for a, b in zip(grads['CUDA'], grads['PyTorch'])]
            # the largest gradient of each input, to read the differences
            # against (a sampling location's gradient scales with the size
            # of the feature map it samples)
            gmax = [g.abs().max().item() for g in grads['PyTorch']]
            speedup = {
                mode: times['PyTorch', mode] / times['CUDA', mode]
                for mode in ('train', 'eval')
            }
            bench.add(
                'msda',
                case,
                'CUDA op',
                train=f'{1e3 * times["CUDA", "train"]:.2f} ms',
                train_x=f'{speedup["train"]:.1f}x faster',
                eval_=f'{1e3 * times["CUDA", "eval"]:.2f} ms',
                eval_x=f'{speedup["eval"]:.1f}x faster',
                note=f'max abs diff vs PyTorch path: out {diff:.1e}; grad '
                f'(of largest) value {gdiff[0]:.1e} ({gmax[0]:.1e}), loc '
                f'{gdiff[1]:.1e} ({gmax[1]:.1e}), weight {gdiff[2]:.1e} '
                f'({gmax[2]:.1e}); {msda_low_precision(bench, inputs)}')
        except Exception as err:  # noqa: BLE001 -- reported in the row
            bench.failed('msda', case, 'CUDA op', err)


def msda_low_precision(bench: Bench, inputs: List) -> str:
    """Whether the CUDA op runs in half and bfloat16."""
    from mmcv.ops.multi_scale_deform_attn import \
        MultiScaleDeformableAttnFunction
    value, shapes, starts, loc, weight = inputs
    said = []
    for dtype in (torch.float16, torch.bfloat16):
        try:
            MultiScaleDeformableAttnFunction.apply(value.detach().to(dtype),
                                                   shapes, starts,
                                                   loc.detach().to(dtype),
                                                   weight.detach().to(dtype),
                                                   64)
            bench.sync()
            said.append(f'{str(dtype)[6:]} runs')
        except RuntimeError as err:
            said.append(f'{str(dtype)[6:]} fails ({str(err)[:60]})')
    return ', '.join(said)
