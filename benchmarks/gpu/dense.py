"""``adapter`` and ``segmenter``: one training step per join of the dense
configs (ViT-Adapter-Ti Mask R-CNN and UperNet, Segmenter-Ti), random init,
SyncBN as BN in one process: time, memory, loss."""
import os.path as osp
from typing import Callable, Dict, List

import torch
import torch.nn as nn
from small_dense import model_overrides

from mmlape.hosts import float32_mmcv_ops
from .common import (ROOT, Bench, fmt_mem, fmt_rate, fmt_ratio, free,
                     join_class, join_names, peak_memory)

#: Config of each dense family, ``{}`` for the join's suffix.
CONFIGS = {
    'mask-rcnn': 'vit_adapter/mask-rcnn_vit-adapter-tiny{}_fpn_3x_coco.py',
    'upernet':
    'vit_adapter/upernet_vit-adapter-tiny{}_8xb2-160k_ade20k-512x512.py',
    'segmenter':
    'segmenter/segmenter_vit-tiny{}_mask_8xb1-160k_ade20k-512x512.py',
}


def dense_configs(family: str) -> Dict[str, str]:
    """Join name -> config file of a dense family, for every join that
    has configs."""
    return {
        join:
        osp.join(ROOT, 'configs',
                 CONFIGS[family].format(join_class(join).config_suffix))
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


def one_step_section(bench: Bench, section: str, family: str, case: str,
                     size: int, batch: int) -> None:
    """One training step of a dense family per join: time, memory, loss."""
    configs = dense_configs(family)
    data = dense_batch(family, batch, size, bench.device)
    results = {}
    for join, config in configs.items():
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
            train=f'{1e3 * t:.0f} ms/step ({fmt_rate(batch / t)})',
            train_x=fmt_ratio(t, base),
            memory=fmt_mem(mem),
            note=f'{str(bench.dense_dtype)[6:]} autocast; loss '
            f'{loss[0].item():.3f} -> {loss[-1].item():.3f} over '
            f'{len(loss)} steps on one batch' +
            ('' if finite else ' (NOT FINITE)'))


def section_adapter(bench: Bench) -> None:
    size = 64 if bench.tiny else 1024
    batch = 1 if bench.tiny else 2
    one_step_section(bench, 'adapter', 'mask-rcnn',
                     f'ViT-Adapter-Ti Mask R-CNN {size}x{size} b{batch}', size,
                     batch)
    size = 64 if bench.tiny else 512
    batch = 2 if bench.tiny else 8
    one_step_section(bench, 'adapter', 'upernet',
                     f'ViT-Adapter-Ti UperNet {size}x{size} b{batch}', size,
                     batch)


def section_segmenter(bench: Bench) -> None:
    size = 64 if bench.tiny else 512
    batch = 2 if bench.tiny else 8
    one_step_section(bench, 'segmenter', 'segmenter',
                     f'Segmenter-Ti {size}x{size} b{batch}', size, batch)
