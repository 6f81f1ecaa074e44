"""The T2T-ViT, CeiT, ViT-Lite and CCT configs: every join, the official
recipes, and CIFAR-100 through mmpretrain's CIFAR100 dataset on a tiny set
generated in the python pickle layout."""
import glob
import os.path as osp

import pytest
import torch
from conftest import ROOT, config_joins
from generated_cifar import accept_generated_files, make_cifar100
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmpretrain.registry import DATASETS, MODELS
from mmpretrain.utils import register_all_modules

FAMILIES = ('t2t_vit', 'ceit', 'vit_lite', 'cct')
CONFIGS = sorted(
    p for f in FAMILIES
    for p in glob.glob(osp.join(ROOT, 'configs', f, '*.py')))
JOINS = tuple(config_joins())


def cfg_of(name):
    register_all_modules(False)
    return Config.fromfile(osp.join(ROOT, 'configs', name))


def test_every_join_has_a_config():
    names = {osp.relpath(p, osp.join(ROOT, 'configs')) for p in CONFIGS}
    for j in JOINS:
        assert f't2t_vit/t2t-vit-7{j}_8xb64_in1k.py' in names
        assert (f't2t_vit/t2t-vit-7{j}_in1k-pre_1xb128-60e_cifar100.py'
                in names)
        assert f'ceit/ceit-tiny{j}_4xb256_in1k.py' in names
        assert f'vit_lite/vit-lite-7-4{j}_1xb128-310e_cifar100.py' in names
        assert f'cct/cct-7-3x1{j}_1xb128-300e_cifar100.py' in names
    assert len(CONFIGS) == 5 * len(JOINS)


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: osp.relpath(p, ROOT))
def test_recipe(path):
    cfg = Config.fromfile(path)
    name = osp.basename(path)
    bb = cfg.model.backbone
    opt = cfg.optim_wrapper.optimizer
    assert cfg.default_hooks.checkpoint.type == 'AtomicCheckpointHook'
    assert bb.drop_path_rate == 0.1
    # The official heads: trunc_normal(0.02) weights, zero bias (mmengine's
    # TruncNormal default; the DeiT-based configs state it).
    head_init = dict(cfg.model.head.init_cfg)
    assert head_init.pop('bias', 0.) == 0.
    assert head_init == dict(type='TruncNormal', layer='Linear', std=.02)
    gap = '-pvg' in name or '-mpvg' in name
    if gap:
        # the join sets the readout: no class token; GAP, or the arch's own
        # pooling (CCT's sequence pooling; CeiT-Ti as the MPVG paper counts
        # it: LCA kept, over the GAP token of every layer,
        # configs/ceit/README.md)
        assert 'with_cls_token' not in bb and 'out_type' not in bb
        with torch.device('meta'):
            built = MODELS.build(bb)
        assert not built.with_cls_token
        pooled = '/ceit/' in path or '/cct/' in path
        assert built.out_type == ('pooled' if pooled else 'avg_featmap')
        if '/ceit/' in path:
            assert bb.pooling == dict(type='LCA', layer_token='gap')
    if '_in1k.py' in name:  # ImageNet
        assert cfg.train_dataloader.dataset.type == 'ImageNet'
        aug = cfg.model.train_cfg.augments
        assert [a['alpha'] for a in aug] == [0.8, 1.0]
        assert cfg.model.head.loss.label_smooth_val == 0.1
        warmup, cosine = cfg.param_scheduler
        assert cosine.eta_min == 1e-5 and opt.type == 'AdamW'
    if name.startswith('t2t-vit-7') and '_in1k.py' in name:
        assert cfg.train_cfg.max_epochs == 310
        assert cfg.train_dataloader.batch_size * 8 == 512
        assert opt.lr == 1e-3 and opt.weight_decay == 0.03
        assert warmup.end == 10 and warmup.start_factor * opt.lr == 1e-6
        assert cosine.end == 300  # then 10 epochs at eta_min
        assert cfg.custom_hooks[0].type == 'EMAHook'
        assert cfg.custom_hooks[0].momentum == pytest.approx(1 - 0.99996)
    elif name.startswith('ceit'):
        assert cfg.train_cfg.max_epochs == 300
        assert cfg.train_dataloader.batch_size * 4 == 1024
        assert opt.lr == pytest.approx(5e-4 * 1024 / 512)
        assert opt.weight_decay == 0.05 and warmup.end == 5
        assert cfg.optim_wrapper.clip_grad is None
        assert bb.arch == 'ceit-tiny'
    elif 'cifar100' in name:
        assert cfg.train_dataloader.dataset.type == 'CIFAR100'
        assert cfg.train_dataloader.batch_size == 128
        assert cfg.data_preprocessor.num_classes == 100
        assert cfg.model.head.num_classes == 100
    if name.startswith('t2t-vit-7') and 'cifar100' in name:
        assert cfg.train_cfg.max_epochs == 60
        assert opt.type == 'SGD' and opt.lr == 0.05
        assert opt.momentum == 0.9 and opt.weight_decay == 5e-4
        keys = cfg.optim_wrapper.paramwise_cfg.custom_keys
        assert keys['backbone.blocks'].lr_mult == 0.01
        assert keys['backbone.patch_embed'].lr_mult == 0.01
        assert cfg.param_scheduler.eta_min == 2e-4
        assert cfg.param_scheduler.T_max == 60
        assert bb.init_cfg.type == 'Pretrained'
    if name.startswith(('vit-lite', 'cct')):
        assert opt.type == 'AdamW' and opt.lr == 6e-4
        assert opt.weight_decay == 0.06
        assert bb.img_size == 32 and bb.attn_drop_rate == 0.1
        warmup, cosine = cfg.param_scheduler
        assert warmup.end == 10
        assert warmup.start_factor * opt.lr == pytest.approx(1e-6)
        assert cosine.eta_min == 1e-5 and cosine.end == 300
        assert cfg.model.head.loss.label_smooth_val == 0.1
        aug = cfg.model.train_cfg.augments
        assert [a['alpha'] for a in aug] == [0.8, 1.0]
        epochs = 310 if name.startswith('vit-lite') else 300
        assert cfg.train_cfg.max_epochs == epochs
        crop = cfg.train_dataloader.dataset.pipeline[0]
        assert crop.crop_ratio_range == (0.8, 1.0)
        paramwise = cfg.optim_wrapper.paramwise_cfg
        assert paramwise.norm_decay_mult == 0.0
        assert 'custom_keys' not in paramwise  # PE decayed, as official


@pytest.fixture(scope='module')
def cifar(tmp_path_factory):
    accept_generated_files()
    return make_cifar100(str(tmp_path_factory.mktemp('cifar')), 8, 4)


@pytest.mark.parametrize('name,size', [
    ('vit_lite/vit-lite-7-4_1xb128-310e_cifar100.py', 32),
    ('t2t_vit/t2t-vit-7_in1k-pre_1xb128-60e_cifar100.py', 224),
])
def test_cifar100_pipelines_read_the_pickle_layout(cifar, name, size):
    cfg = cfg_of(name)
    for split in ('train', 'val'):
        ds_cfg = cfg[f'{split}_dataloader'].dataset
        ds_cfg.data_root = cifar
        dataset = DATASETS.build(ds_cfg)
        assert len(dataset) == (8 if split == 'train' else 4)
        item = dataset[0]
        assert item['inputs'].shape == (3, size, size)
        assert item['inputs'].dtype == torch.uint8
        assert 0 <= item['data_samples'].gt_label.item() < 100
    assert dataset.CLASSES[0] == 'apple'  # mmpretrain's CIFAR-100 names


def test_cct_trains_a_step_from_the_config(cifar):
    """The CCT config's model, data preprocessor and pipeline together: one
    loss through the real loader (tiny widths)."""
    from mmengine.runner import Runner
    cfg = cfg_of('cct/cct-7-3x1-lape_1xb128-300e_cifar100.py')
    cfg.train_dataloader.dataset.data_root = cifar
    cfg.train_dataloader.batch_size = 4
    cfg.train_dataloader.num_workers = 0
    cfg.train_dataloader.pop('persistent_workers', None)
    cfg.model.backbone.arch = dict(
        embed_dims=32,
        num_layers=2,
        num_heads=2,
        feedforward_channels=64,
        img_size=32,
        tokenizer=dict(type='Conv', num_layers=1, kernel_size=3),
        with_cls_token=False,
        out_type='pooled',
        pooling=dict(type='SeqPool'))
    cfg.model.head.in_channels = 32
    cfg.model.data_preprocessor = cfg.data_preprocessor
    loader = Runner.build_dataloader(cfg.train_dataloader)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg.model)
    batch = next(iter(loader))
    data = model.data_preprocessor(batch, training=True)
    assert data['inputs'].shape == (4, 3, 32, 32)
    assert data['inputs'].dtype == torch.float32
    losses = model(**data, mode='loss')
    assert torch.isfinite(losses['loss'])
    losses['loss'].backward()
    assert model.backbone.blocks[0].pe_norm.weight.grad is not None
