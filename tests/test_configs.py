"""Every config under configs/ parses and its model builds."""
import glob
import importlib
import os.path as osp

import pytest
from mmengine.config import Config
from mmengine.registry import DefaultScope

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIGS = sorted(
    glob.glob(osp.join(ROOT, 'configs', '**', '*.py'), recursive=True))
JOINS = {'lape': 'LaPE', 'pvg': 'PVG', 'mpvg': 'MPVG'}


def join_of(path):
    name = osp.basename(path)
    for suffix, join in JOINS.items():
        if f'-{suffix}_' in name:
            return join
    return 'Default'


def load(path):
    cfg = Config.fromfile(path)
    scope = cfg.get('default_scope')
    assert scope in ('mmpretrain', 'mmdet', 'mmseg'), path
    importlib.import_module(f'{scope}.utils').register_all_modules(False)
    return cfg, scope


def test_configs_exist():
    names = {osp.relpath(p, ROOT) for p in CONFIGS}
    for arch in ('tiny', 'small', 'base'):
        for suffix in ('', '-lape', '-pvg', '-mpvg'):
            assert f'configs/deit/deit-{arch}{suffix}_4xb256_in1k.py' in names


@pytest.mark.parametrize(
    'path', [p for p in CONFIGS if '/demo/' not in p],
    ids=lambda p: osp.relpath(p, ROOT))
def test_config_builds(path):
    cfg, scope = load(path)
    registry = importlib.import_module(f'{scope}.registry').MODELS
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(cfg.model)
    backbone = model.backbone
    assert type(backbone).__name__.startswith('LaPEViT')
    assert backbone.pe_join.name == join_of(path)
    assert 'mmlape' in cfg.custom_imports['imports']


@pytest.mark.parametrize(
    'path', [p for p in CONFIGS if '/deit/' in p],
    ids=lambda p: osp.basename(p))
def test_deit_recipe(path):
    cfg, _ = load(path)
    assert cfg.train_cfg.max_epochs == 300
    assert cfg.model.backbone.drop_path_rate == 0.1
    assert cfg.optim_wrapper.optimizer.lr == pytest.approx(1e-3)
    assert cfg.optim_wrapper.optimizer.weight_decay == 0.05
    keys = cfg.optim_wrapper.paramwise_cfg.custom_keys
    for key in ('.pos_embed', '.cls_token', '.pe_norm'):
        assert keys[key]['decay_mult'] == 0.0
    warmup, cosine = cfg.param_scheduler
    assert warmup.end == 5 and cosine.begin == 5
    assert cfg.train_dataloader.batch_size == 256
    augments = cfg.model.train_cfg.augments
    assert [a['alpha'] for a in augments] == [0.8, 1.0]
    assert cfg.model.head.loss.label_smooth_val == 0.1
