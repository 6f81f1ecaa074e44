"""Every provided config sets its loaders for a GPU: pinned memory,
persistent workers, a default ``num_workers`` for host tools and the
``auto_num_workers`` bounds mmlape's tools resolve (the demo configs, made
for a CPU, load in the training process).

The baselines are checked (parsing all configs costs 20 s here); the
join variants inherit their loaders, as one variant shows."""
import copy
import glob
import os.path as osp
import sys

import pytest
from conftest import ROOT, config_joins
from mmengine.config import Config

from mmlape.hosts.loader_workers import apply_auto_num_workers

CONFIGS = sorted(
    p for p in glob.glob(osp.join(ROOT, 'configs', '*', '*.py'))
    if '_base_' not in p.split(osp.sep))
SUFFIXES = [s for s in config_joins() if s]
#: The baseline of each family; the join variants inherit from them.
GPU_CONFIGS = [
    p for p in CONFIGS
    if '/demo/' not in p and not any(f'{s}_' in osp.basename(p)
                                     for s in SUFFIXES)
] + [osp.join(ROOT, 'configs', 'deit', 'deit-tiny-lape_4xb256_in1k.py')]
LOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')
#: Ceilings: the workers an H200 needs at the model's measured speed
#: (README "Feeding the GPU"); models not timed on a GPU take DeiT-Ti's.
CEILINGS = {'deit-base': 16}


def _family(path):
    if '/vit_adapter/' in path or '/segmenter/' in path:
        return 'dense'
    return 'cifar' if 'cifar' in osp.basename(path) else 'imagenet'


@pytest.mark.parametrize(
    'path', GPU_CONFIGS, ids=lambda p: osp.relpath(p, ROOT))
def test_gpu_config_loaders(path):
    cfg = Config.fromfile(path)
    bounds = cfg.auto_num_workers
    family = _family(path)
    floor = {'imagenet': 5, 'cifar': 2, 'dense': 2}[family]
    ceiling = {'imagenet': 48, 'cifar': 16, 'dense': 4}[family]
    ceiling = next((c for name, c in CEILINGS.items()
                    if osp.basename(path).startswith(name)), ceiling)
    assert bounds == dict(floor=floor, ceiling=ceiling)
    for name in LOADERS:
        loader = cfg[name]
        # host tools ignore auto_num_workers and start these
        assert isinstance(loader.num_workers, int) and \
            loader.num_workers >= 1, name
        assert loader.pin_memory is True, name
        assert loader.persistent_workers is True, name
    # one image size a batch: the loader stacks it (default_collate); the
    # dense models' images differ in size and stay a list (pseudo_collate)
    want = 'pseudo_collate' if family == 'dense' else 'default_collate'
    for name in LOADERS:
        collate = cfg[name].get('collate_fn', dict(type='pseudo_collate'))
        assert collate == dict(type=want), name
    # one label an image: the batch's targets in one go, and the pinned
    # batch copied without waiting (tests/hosts/test_cls_preprocessor.py)
    if family != 'dense':
        assert cfg.data_preprocessor.type == 'LaPEClsDataPreprocessor'
        assert cfg.data_preprocessor.non_blocking is True
        # one input size: cuDNN's fastest algorithms, as the official
        # scripts (mmseg's configs have it too; mmdet's sizes vary)
        assert cfg.env_cfg.cudnn_benchmark is True
        # a batch's results copied to the host in one go, with the
        # family's top-k (tests/hosts/test_cls_metric.py)
        topk = (1, ) if family == 'cifar' else (1, 5)
        for name in ('val_evaluator', 'test_evaluator'):
            assert cfg[name].type == 'LaPEAccuracy', name
            assert tuple(cfg[name].topk) == topk, name
        # DeiT's and CeiT's evaluation batches: 1.5 x the training batch
        # (their official main.py); the others evaluate at mmpretrain's
        name = osp.basename(path)
        if name.startswith(('deit-', 'ceit-')):
            assert cfg.val_dataloader.batch_size == \
                cfg.train_dataloader.batch_size * 3 // 2 == 384
            assert cfg.test_dataloader.batch_size == 384
        # T2T-ViT's model average: one multi-tensor update
        # (tests/hosts/test_ema.py), mmpretrain's momentum and priority
        hooks = [h for h in cfg.get('custom_hooks', []) if 'EMA' in h.type]
        if name.startswith('t2t-vit-7') and 'cifar' not in name:
            assert hooks == [
                dict(
                    type='EMAHook',
                    momentum=4e-5,
                    priority='ABOVE_NORMAL',
                    ema_type='LaPEExponentialMovingAverage')
            ]
        else:
            assert hooks == []
    # mmengine's runtime info hook: the lazy one is opt-in
    # (speedups.lazy_log, tests/hosts/test_speedups.py)
    assert cfg.default_hooks.get('runtime_info', {}).get(
        'type', 'RuntimeInfoHook') == 'RuntimeInfoHook'
    # a crowded node gets the floor, a node with many CPUs the ceiling
    for cpus, want in ((2, floor), (400, ceiling)):
        run = copy.deepcopy(cfg)
        run.launcher = 'none'
        apply_auto_num_workers(run, {}, cpus=cpus)
        assert [run[n].num_workers for n in LOADERS] == [want] * 3


def test_cpu_demo_configs_load_in_the_training_process():
    demos = [p for p in CONFIGS if '/demo/' in p]
    assert demos
    for path in demos:
        cfg = Config.fromfile(path)
        assert cfg.get('auto_num_workers') is None
        assert cfg.train_dataloader.num_workers == 0
        # the demo takes any images (no resize in its pipeline): mixed
        # sizes are padded by the preprocessor, as mmpretrain's do
        for name in LOADERS:
            assert 'collate_fn' not in cfg[name]
        assert 'runtime_info' not in cfg.default_hooks


@pytest.mark.parametrize('split', ['train', 'val'])
def test_stacked_batch_preprocesses_as_the_list(imagenet, split):
    """DeiT's pipelines through the real loader: the batch the loader stacks
    (default_collate) leaves mmpretrain's data preprocessor with the same
    inputs and labels as the list of images (pseudo_collate), Mixup and
    CutMix included, while the preprocessor runs a fixed number of
    operations instead of a few per image."""
    import numpy as np
    import torch
    from mmengine.dataset import default_collate, pseudo_collate
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import DATASETS, MODELS
    from mmpretrain.utils import register_all_modules
    sys.path.insert(0, osp.join(ROOT, 'benchmarks'))
    from bench_host_loop import OpCount
    register_all_modules(False)
    cfg = Config.fromfile(
        osp.join(ROOT, 'configs', 'deit', 'deit-tiny-lape_4xb256_in1k.py'))
    loader = cfg[f'{split}_dataloader']
    assert loader.collate_fn == dict(type='default_collate')
    ds_cfg = copy.deepcopy(loader.dataset)
    ds_cfg.data_root = imagenet
    ds_cfg.pop('split', None)
    ds_cfg.data_prefix = split
    ds_cfg.ann_file = f'meta/{split}.txt'
    cfg.model.backbone.arch = dict(
        embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=64)
    cfg.model.head.in_channels = 32
    cfg.model.data_preprocessor = cfg.data_preprocessor
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        dataset = DATASETS.build(ds_cfg)
        model = MODELS.build(cfg.model)
    items = [dataset[i] for i in range(3)]

    outs, ops = [], []
    for collate in (pseudo_collate, default_collate):
        # fresh samples, as a loader makes them: the preprocessor writes
        # the soft targets into the samples it is given
        batch = collate(copy.deepcopy(items))
        torch.manual_seed(3)
        np.random.seed(3)
        with OpCount() as count:
            outs.append(model.data_preprocessor(batch, split == 'train'))
        ops.append(count.ops)
    listed, stacked = outs
    assert isinstance(collate(items)['inputs'], torch.Tensor)
    assert stacked['inputs'].shape == (3, 3, 224, 224)
    assert torch.equal(listed['inputs'], stacked['inputs'])
    for a, b in zip(listed['data_samples'], stacked['data_samples']):
        assert a is not b
        assert torch.equal(a.gt_label, b.gt_label)
        if split == 'train':  # Mixup/CutMix's soft targets
            assert torch.equal(a.gt_score, b.gt_score)
    # the list's preprocessing grows with the batch: 3 images already cost
    # more operations than the whole stacked batch
    assert ops[1] < ops[0], ops
