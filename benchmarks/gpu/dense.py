"""``adapter`` and ``segmenter``: one training step per join of the dense
configs (ViT-Adapter-Ti Mask R-CNN and UperNet, Segmenter-Ti), random init,
SyncBN as BN in one process: time, memory, loss. ``msda``: mmcv's CUDA
multi-scale deformable attention against its PyTorch path at
ViT-Adapter-Ti's 1024x1024 shapes: max abs differences (output and
gradients), speed, and whether the CUDA op takes half and bfloat16."""
import os.path as osp
from typing import Callable, Dict, List, Sequence

import torch
import torch.nn as nn
from shared import ROOT, join_class, join_names
from small_dense import DENSE_CONFIGS, model_overrides

from mmlape.hosts import float32_mmcv_ops
from .common import Bench, fmt_mem, fmt_rate, fmt_ratio, free, peak_memory


def dense_configs(family: str) -> Dict[str, str]:
    """Join name -> config file of a dense family, for every join that
    has configs."""
    return {
        join:
        osp.join(ROOT,
                 DENSE_CONFIGS[family].format(join_class(join).config_suffix))
        for join in join_names(with_configs=True)
    }


def build_dense_model(config: str, family: str, size: int, tiny: bool,
                      device: torch.device) -> nn.Module:
    """The model of a dense config: random init (no pretrained file), one
    process (SyncBN becomes BN), the data preprocessor sized for
    ``size``."""
    from mmengine.config import Config
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import DefaultScope
    cfg = Config.fromfile(config)
    cfg.model.backbone.init_cfg = None
    if tiny:
        cfg.merge_from_dict(
            dict(model=model_overrides(family)), allow_list_keys=True)
        if family == 'segmenter':
            cfg.model.backbone.img_size = size
    if family != 'mask-rcnn':
        cfg.model.data_preprocessor.size = (size, size)
    scope = cfg.get('default_scope',
                    'mmdet' if family == 'mask-rcnn' else 'mmseg')
    if scope == 'mmdet':
        from mmdet.registry import MODELS
        from mmdet.utils import register_all_modules
    else:
        from mmseg.registry import MODELS
        from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope(scope):
        model = MODELS.build(cfg.model)
    model.init_weights()
    return revert_sync_batchnorm(model).to(device)


def dense_batch(family: str, batch: int, size: int,
                device: torch.device) -> Dict:
    """A generated batch in the form the models' data preprocessors take:
    uint8 images and data samples with boxes and masks (Mask R-CNN) or
    semantic labels (UperNet, Segmenter)."""
    import numpy as np
    from mmengine.structures import InstanceData, PixelData
    gen = torch.Generator().manual_seed(0)
    inputs, samples = [], []
    meta = dict(
        img_shape=(size, size),
        ori_shape=(size, size),
        pad_shape=(size, size),
        scale_factor=(1., 1.))
    for i in range(batch):
        inputs.append(
            torch.randint(0, 256, (3, size, size),
                          generator=gen).to(torch.uint8).to(device))
        if family == 'mask-rcnn':
            from mmdet.structures import DetDataSample
            from mmdet.structures.mask import BitmapMasks
            n = 4
            xy = torch.rand(n, 2, generator=gen) * size * 0.6
            wh = size * (0.1 + 0.25 * torch.rand(n, 2, generator=gen))
            boxes = torch.cat([xy, (xy + wh).clamp(max=size - 1)], dim=1)
            masks = np.zeros((n, size, size), dtype=np.uint8)
            for k, (x0, y0, x1, y1) in enumerate(boxes.long().tolist()):
                masks[k, y0:y1, x0:x1] = 1
            sample = DetDataSample(metainfo=dict(meta, img_id=i))
            sample.gt_instances = InstanceData(
                bboxes=boxes,
                labels=torch.randint(0, 80, (n, ), generator=gen),
                masks=BitmapMasks(masks, size, size))
        else:
            from mmseg.structures import SegDataSample
            sample = SegDataSample(metainfo=meta)
            sample.gt_sem_seg = PixelData(
                data=torch.randint(0, 150, (1, size, size), generator=gen))
        samples.append(sample.to(device))
    return dict(inputs=inputs, data_samples=samples)


def dense_step(bench: Bench, model: nn.Module, opt, data: Dict,
               losses: List[torch.Tensor]) -> Callable:
    """A training step as mmengine's AmpOptimWrapper runs it: the data
    preprocessor outside autocast, the loss under it, a dynamic loss scale
    for float16."""
    scaler = torch.amp.GradScaler(
        bench.device.type,
        enabled=bench.dense_dtype == torch.float16
        and bench.device.type == 'cuda')

    def step():
        batch = model.data_preprocessor(data, True)
        # RoIAlign and NMS in float32, as Float32MmcvOpsHook runs a step
        with float32_mmcv_ops(), bench.autocast(bench.dense_dtype):
            loss, _ = model.parse_losses(model(**batch, mode='loss'))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())

    return step


def one_step_section(bench: Bench, section: str, family: str, name: str,
                     real: tuple, tiny: tuple) -> None:
    """One training step of a dense family per join: time, memory, loss;
    ``(size, batch)`` of the ``real`` and the ``tiny`` runs."""
    size, batch = tiny if bench.tiny else real
    case = f'{name} {size}x{size} b{batch}'
    data = dense_batch(family, batch, size, bench.device)
    results = {}
    for join, config in dense_configs(family).items():
        if join not in bench.args.joins:
            continue
        label = 'MPVG (PVG join)' if join == 'MPVG' and \
            family != 'segmenter' else join
        try:
            model = build_dense_model(config, family, size, bench.tiny,
                                      bench.device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            losses: List[torch.Tensor] = []
            step = dense_step(bench, model, opt, data, losses)
            model.train()
            t = bench.fastest({'step': step}, iters=1)['step']
            mem = peak_memory(bench, step)
            loss = torch.stack(losses).float()
            results[join] = (label, t, mem, loss)
        except Exception as err:  # noqa: BLE001 -- reported in the row
            bench.failed(section, case, label, err)
        finally:
            model = opt = None
            free(bench)
    base = results.get('Default', (None, None))[1]
    for join, (label, t, mem, loss) in results.items():
        finite = bool(torch.isfinite(loss).all())
        bench.add(
            section,
            case,
            label,
            f'{str(bench.dense_dtype)[6:]} autocast; loss '
            f'{loss[0].item():.3f} -> {loss[-1].item():.3f} over '
            f'{len(loss)} steps on one batch' +
            ('' if finite else ' (NOT FINITE)'),
            train=f'{1e3 * t:.0f} ms/step ({fmt_rate(batch / t)})',
            train_x=fmt_ratio(t, base),
            memory=fmt_mem(mem))


def section_adapter(bench: Bench) -> None:
    one_step_section(bench, 'adapter', 'mask-rcnn',
                     'ViT-Adapter-Ti Mask R-CNN', (1024, 2), (64, 1))
    one_step_section(bench, 'adapter', 'upernet', 'ViT-Adapter-Ti UperNet',
                     (512, 8), (64, 2))


def section_segmenter(bench: Bench) -> None:
    one_step_section(bench, 'segmenter', 'segmenter', 'Segmenter-Ti', (512, 8),
                     (64, 2))


def msda_inputs(bench: Bench, num_query: int, value_grids: Sequence,
                heads: int, dims: int, points: int, batch: int) -> List:
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
        value.requires_grad_(), shapes, starts,
        loc.requires_grad_(),
        weight.requires_grad_()
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
            paths = {
                'PyTorch':
                lambda: multi_scale_deformable_attn_pytorch(
                    value, shapes, loc, weight)
            }
            if bench.device.type == 'cuda':
                paths['CUDA'] = lambda: MultiScaleDeformableAttnFunction.apply(
                    value, shapes, starts, loc, weight, 64)
            outs, grads, cases = {}, {}, {}
            for key, fn in paths.items():
                out = fn()
                g = torch.autograd.grad(out.square().sum(),
                                        [value, loc, weight])
                outs[key], grads[key] = out.detach(), g
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
                    'PyTorch path', f'the CUDA op needs a CUDA device '
                    f'({bench.device.type} here); fwd+bwd / fwd times',
                    train=f'{1e3 * times["PyTorch", "train"]:.2f} ms',
                    eval=f'{1e3 * times["PyTorch", "eval"]:.2f} ms')
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
                f'max abs diff vs PyTorch path: out {diff:.1e}; grad '
                f'(of largest) value {gdiff[0]:.1e} ({gmax[0]:.1e}), loc '
                f'{gdiff[1]:.1e} ({gmax[1]:.1e}), weight {gdiff[2]:.1e} '
                f'({gmax[2]:.1e}); {msda_low_precision(bench, inputs)}',
                train=f'{1e3 * times["CUDA", "train"]:.2f} ms',
                train_x=f'{speedup["train"]:.1f}x faster',
                eval=f'{1e3 * times["CUDA", "eval"]:.2f} ms',
                eval_x=f'{speedup["eval"]:.1f}x faster')
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
