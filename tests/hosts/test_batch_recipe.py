"""Recipes hold at any GPU count: where the official code scales the
learning rate with the global batch (DeiT's ``lr * batch_size * world_size
/ 512``; Swin's, which scales the cosine's end too), the configs do so by
default; where it trains at a fixed lr, another global batch is one
warning line naming both batches and how to keep the recipe. Checked for
1, 4, 8 and 16 processes (the world size faked) with mmengine's own
``Runner.scale_lr``."""
import functools
import os.path as osp
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.registry import PARAM_SCHEDULERS
from mmengine.runner import Runner

from mmlape.hosts.batch_recipe import batch_and_lr, describe_batch

WORLD_SIZES = (1, 4, 8, 16)


@functools.lru_cache(maxsize=None)
def config(path):
    return Config.fromfile(osp.join(ROOT, 'configs', path))


def mmengine_scaled_lr(cfg, world_size):
    """The lr mmengine's runner trains with: its ``scale_lr`` on a
    one-parameter optimizer of the config's lr, the world size faked."""
    from mmengine.optim import OptimWrapper
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=cfg.optim_wrapper.optimizer.lr)
    wrapper = OptimWrapper(optimizer)
    fake = SimpleNamespace(
        world_size=world_size,
        _train_dataloader=dict(cfg.train_dataloader),
        param_schedulers=None,
        logger=MMLogger.get_instance('batch_recipe_test'))
    Runner.scale_lr(fake, wrapper, cfg.get('auto_scale_lr'))
    return optimizer.param_groups[0]['lr']


@pytest.mark.parametrize('world_size', WORLD_SIZES)
@pytest.mark.parametrize('path, per_process', [
    ('deit/deit-tiny_4xb256_in1k.py', 256),
    ('deit/deit-small-lape_4xb256_in1k.py', 256),
    ('deit/deit-base-mpvg_4xb256_in1k.py', 256),
    ('ceit/ceit-tiny_4xb256_in1k.py', 256),
])
def test_deit_recipes_scale_the_lr_as_the_official_code(
        path, per_process, world_size):
    cfg = config(path)
    official = 5e-4 * per_process * world_size / 512.0  # main.py
    assert mmengine_scaled_lr(cfg, world_size) == pytest.approx(official)
    total, base, lrs = batch_and_lr(cfg, world_size)
    assert total == per_process * world_size and base == 1024
    assert lrs == [pytest.approx(official)]
    line, warning = describe_batch(cfg, world_size)
    assert warning is None
    assert f'global batch {total} ({world_size} processes x 256)' in line


@pytest.mark.parametrize('world_size', WORLD_SIZES)
def test_swin_scales_lr_warmup_and_cosine_end_as_the_official_code(world_size):
    cfg = config('swin/swin-tiny_16xb64_in1k.py')
    batch = 64 * world_size
    lr = mmengine_scaled_lr(cfg, world_size)
    # microsoft/Swin-Transformer main.py: BASE_LR 5e-4, WARMUP_LR 5e-7,
    # MIN_LR 5e-6, each x batch x processes / 512
    assert lr == pytest.approx(5e-4 * batch / 512)
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=lr)
    schedulers = []
    for sched in cfg.param_scheduler:
        sched = dict(sched)
        sched.pop('_scope_', None)
        sched.pop('convert_to_iter_based', None)
        sched.setdefault('end', 300)
        schedulers.append(
            PARAM_SCHEDULERS.build(dict(sched, optimizer=optimizer)))
    assert optimizer.param_groups[0]['lr'] == pytest.approx(5e-7 * batch / 512)
    # the cosine ends at MIN_LR (mmengine: eta_min_ratio x its base lr)
    cosine = schedulers[1]
    assert cosine.eta_min_ratio * cosine.base_values[0] == pytest.approx(
        5e-6 * batch / 512)
    for _ in range(300):
        optimizer.step()
        for s in schedulers:
            s.step()
    assert optimizer.param_groups[0]['lr'] == pytest.approx(
        5e-6 * batch / 512, rel=1e-2)


@pytest.mark.parametrize('path, base, per_process', [
    ('t2t_vit/t2t-vit-7_8xb64_in1k.py', 512, 64),
    ('vit_lite/vit-lite-7-4_1xb128-310e_cifar100.py', 128, 128),
    ('vit_adapter/mask-rcnn_vit-adapter-tiny_fpn_3x_coco.py', 16, 2),
    ('vit_adapter/upernet_vit-adapter-tiny_8xb2-160k_ade20k-512x512.py', 16,
     2),
    ('segmenter/segmenter_vit-tiny_mask_8xb1-160k_ade20k-512x512.py', 8, 1),
])
@pytest.mark.parametrize('world_size', WORLD_SIZES)
def test_fixed_lr_recipes_warn_at_another_global_batch(path, base, per_process,
                                                       world_size):
    cfg = config(path)
    lr = cfg.optim_wrapper.optimizer.lr
    assert mmengine_scaled_lr(cfg, world_size) == lr  # never scaled
    line, warning = describe_batch(cfg, world_size)
    total = per_process * world_size
    assert f'global batch {total} ' in line and f'lr {lr:.6g}' in line
    if total == base:
        assert warning is None
        return
    assert warning is not None and '\n' not in warning
    assert f'global batch is {total}' in warning
    assert f'the recipe\'s is {base}' in warning
    assert f'run {base // per_process} processes of {per_process}' in warning
    if base % world_size == 0:
        assert f'train_dataloader.batch_size={base // world_size}' in warning


@pytest.mark.slow
def test_the_run_logs_its_global_batch_and_lr(pos_shapes_data, tmp_path,
                                              capsys):
    import sys
    sys.path.insert(0, ROOT)
    from conftest import tool_options

    from tools import train
    train.main([
        osp.join(ROOT, 'configs/demo/deit-demo_pos-shapes.py'), '--work-dir',
        str(tmp_path)
    ] + tool_options(pos_shapes_data, 1))
    out = capsys.readouterr().out
    assert 'global batch 4 (1 processes x 4), lr ' in out
