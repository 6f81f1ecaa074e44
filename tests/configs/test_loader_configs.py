"""Every provided config sets its loaders for a GPU: pinned memory,
persistent workers, a default ``num_workers`` for host tools and the
``auto_num_workers`` bounds mmlape's tools resolve (the demo configs, made
for a CPU, load in the training process).

The baselines are checked (parsing all configs costs 20 s here); the
join variants inherit their loaders, as one variant shows."""
import copy
import glob
import os.path as osp

import pytest
from conftest import ROOT, config_joins
from mmengine.config import Config

from mmlape.engine.loader_workers import apply_auto_num_workers

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
