"""Every config under configs/ parses and its model builds."""
import glob
import importlib
import os.path as osp

import pytest
from conftest import ROOT, config_joins
from mmengine.config import Config
from mmengine.registry import DefaultScope

ALL = sorted(
    glob.glob(osp.join(ROOT, 'configs', '**', '*.py'), recursive=True))
#: Configs to train and test (the model bases under configs/_base_/ are
#: parts of them).
CONFIGS = [p for p in ALL if '_base_' not in p.split(osp.sep)]
#: name suffix (no dash) -> join, of the joins with configs but the default
JOINS = {s[1:]: join for s, join in config_joins().items() if s}


def join_of(path):
    name = osp.basename(path)
    for suffix, join in JOINS.items():
        if f'-{suffix}_' in name:
            return join
    return 'Default'


def suffix_of(path):
    name = osp.basename(path)
    return next((s for s in JOINS if f'-{s}_' in name), None)


def load(path):
    cfg = Config.fromfile(path)
    scope = cfg.get('default_scope')
    assert scope in ('mmpretrain', 'mmdet', 'mmseg'), path
    importlib.import_module(f'{scope}.utils').register_all_modules(False)
    return cfg, scope


#: The rotary DeiT configs: name part -> the backbone's PE setting.
ROTARY = {
    '-rope-mixed-ape': 'rope_mixed+learnable',
    '-rope-mixed': 'rope_mixed',
    '-rope-axial-ape': 'rope_axial+learnable',
    '-rope-axial': 'rope_axial'
}


def pe_setting_of(path):
    name = osp.basename(path)
    return next(
        (v for k, v in ROTARY.items() if f'{k}_' in name or f'{k}-' in name),
        None)


def test_configs_exist():
    names = {osp.relpath(p, ROOT) for p in CONFIGS}
    for arch in ('tiny', 'small', 'base'):
        for suffix in ('', '-lape', '-pvg', '-mpvg'):
            assert f'configs/deit/deit-{arch}{suffix}_4xb256_in1k.py' in names
    for arch in ('tiny', 'small'):
        for suffix in ('-rope-mixed', '-rope-mixed-ape',
                       '-rope-mixed-ape-lape', '-rope-mixed-ape-mpvg'):
            assert f'configs/deit/deit-{arch}{suffix}_4xb256_in1k.py' in names


@pytest.mark.slow  # builds every full-size model
@pytest.mark.parametrize(
    'path', [p for p in CONFIGS if '/demo/' not in p],
    ids=lambda p: osp.relpath(p, ROOT))
def test_config_builds(path):
    cfg, scope = load(path)
    registry = importlib.import_module(f'{scope}.registry').MODELS
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(cfg.model)
    backbone = model.backbone
    assert type(backbone).__name__.startswith(('LaPEViT', 'LaPESwin'))
    assert backbone.pe_join.name == join_of(path)
    if pe_setting_of(path):
        assert backbone.pe_setting == pe_setting_of(path)
    if not backbone.pe_join.allows_cls_token:  # PVG, MPVG: by default
        assert not getattr(backbone, 'with_cls_token', False), path
    if '/vit_adapter/' in path:  # MPVG's last-norm term, reading (b)
        assert backbone.final_norm == (join_of(path) == 'MPVG')
    assert 'mmlape' in cfg.custom_imports['imports']
    # the recipe's global batch (tests/hosts/test_batch_recipe.py)
    assert (cfg.get('auto_scale_lr') or {}).get('base_batch_size'), path
    init = cfg.model.backbone.get('init_cfg')
    if init:  # fine-tuned from the ImageNet checkpoint of the same join
        suffix = suffix_of(path)
        ckpt = osp.basename(init['checkpoint'])
        want = f'-{suffix}_in1k' if suffix else '_in1k'
        others = [f'-{s}_in1k' for s in JOINS if s != suffix]
        assert want in ckpt and not any(o in ckpt for o in others), ckpt


#: The official ViT-Adapter sizes (czczup/ViT-Adapter,
#: mask_rcnn_deit_adapter_{size}_fpn_3x_coco.py and
#: upernet_deit_adapter_{size}_512_160k_ade20k.py): width, drop path,
#: deformable heads and value ratio, UperNet's lr. All else is one recipe.
VIT_ADAPTER_SIZES = {
    'tiny': dict(width=192, drop_path=0.1, heads=6, ratio=1.0, seg_lr=12e-5),
    'small': dict(width=384, drop_path=0.2, heads=6, ratio=1.0, seg_lr=6e-5),
    'base': dict(width=768, drop_path=0.3, heads=12, ratio=0.5, seg_lr=6e-5),
}


def size_of(path):
    name = osp.basename(path)
    return next((s for s in VIT_ADAPTER_SIZES if f'-{s}' in name), None)


def test_dense_configs_exist():
    names = {osp.relpath(p, ROOT) for p in CONFIGS}
    for size in VIT_ADAPTER_SIZES:
        for suffix in ('', '-lape', '-pvg', '-mpvg'):
            assert (f'configs/vit_adapter/mask-rcnn_vit-adapter-{size}'
                    f'{suffix}_fpn_3x_coco.py') in names
            assert (f'configs/vit_adapter/upernet_vit-adapter-{size}'
                    f'{suffix}_8xb2-160k_ade20k-512x512.py') in names


@pytest.mark.parametrize('size', list(VIT_ADAPTER_SIZES))
def test_vit_adapter_recipes(size):
    official = VIT_ADAPTER_SIZES[size]
    det, _ = load(
        osp.join(
            ROOT, 'configs/vit_adapter/'
            f'mask-rcnn_vit-adapter-{size}_fpn_3x_coco.py'))
    assert det.optim_wrapper.optimizer.lr == 1e-4
    assert det.optim_wrapper.optimizer.weight_decay == 0.05
    assert det.train_cfg.max_epochs == 36
    assert det.param_scheduler[1].milestones == [27, 33]
    assert det.train_dataloader.batch_size * 8 == 16
    assert det.model.backbone.vit_feature_source == 'last'
    assert det.model.backbone.window_size == [14, 14, 0] * 4
    assert det.model.neck.in_channels == [official['width']] * 4
    seg, _ = load(
        osp.join(
            ROOT, 'configs/vit_adapter/'
            f'upernet_vit-adapter-{size}_8xb2-160k_'
            'ade20k-512x512.py'))
    assert seg.optim_wrapper.optimizer.lr == official['seg_lr']
    assert seg.optim_wrapper.optimizer.weight_decay == 0.01
    assert seg.optim_wrapper.paramwise_cfg.layer_decay_rate == 0.95
    assert seg.train_cfg.max_iters == 160000
    assert seg.param_scheduler[1].type == 'PolyLR'
    assert seg.train_dataloader.batch_size * 8 == 16
    assert seg.model.backbone.vit_feature_source == 'per_interaction'
    assert seg.model.backbone.get('window_size', 0) == 0
    assert seg.model.decode_head.in_channels == [official['width']] * 4
    assert seg.model.decode_head.channels == 512
    assert seg.model.auxiliary_head.in_channels == official['width']
    assert seg.model.auxiliary_head.channels == 256
    for cfg in (det, seg):
        bb = cfg.model.backbone
        assert bb.arch == size
        assert bb.drop_path_rate == official['drop_path']
        assert bb.interaction_indexes == [[0, 2], [3, 5], [6, 8], [9, 11]]
        assert bb.conv_inplane == 64 and bb.n_points == 4
        assert bb.deform_num_heads == official['heads']
        assert bb.deform_ratio == official['ratio']
        assert bb.cffn_ratio == 0.25
        assert bb.adapter_norm_cfg.type == 'SyncBN'
        assert bb.init_cfg.checkpoint == f'pretrained/deit-{size}_in1k.pth'


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
    for key in ('.pos_embed', '.cls_token'):
        assert keys[key]['decay_mult'] == 0.0
    (schedule, ) = cfg.param_scheduler  # the rest: test_recipes.py
    assert schedule.warmup_epochs == 5
    assert cfg.train_dataloader.batch_size == 256
    augments = cfg.model.train_cfg.augments
    assert [a['alpha'] for a in augments] == [0.8, 1.0]
    assert cfg.model.head.loss.label_smooth_val == 0.1


@pytest.mark.parametrize('backbone, base, families', [
    ('LaPEViTAdapter', 'vit-adapter-tiny.py', ('vit_adapter', )),
    ('LaPEViT', 'segmenter_vit-tiny.py', ('segmenter', )),
])
def test_dense_backbones_are_defined_once(backbone, base, families):
    """The dense configs take their backbone from one file under
    configs/_base_/models/: no other config states its type, and every
    task's model base (Mask R-CNN, UperNet, Segmenter) builds that same
    backbone, to which only the task's own settings are added. ViT-Adapter-S
    and -B are that backbone with the official size settings of
    configs/_base_/models/vit-adapter-{small,base}.py merged in."""
    shared = osp.join(ROOT, 'configs', '_base_', 'models', base)
    stating = []
    for path in ALL:
        with open(path, encoding='utf-8') as f:
            if f"type='{backbone}'" in f.read():
                stating.append(path)
    dense = [p for p in stating if p.split(osp.sep)[-2] in families]
    assert dense == [] and shared in stating, stating
    defined = dict(
        Config.fromfile(shared)[base.split('.')[0].replace('-', '_')])
    defined.pop('_delete_', None)
    paths = [
        p for p in CONFIGS
        if p.split(osp.sep)[-2] in families and join_of(p) == 'Default'
    ]
    assert len(paths) == (6 if backbone == 'LaPEViTAdapter' else 1)
    for path in paths:
        want = defined
        if backbone == 'LaPEViTAdapter' and size_of(path) != 'tiny':
            want = sized_vit_adapter(defined, size_of(path))
        built = dict(Config.fromfile(path).model.backbone)
        added = {k for k in built if k not in want}
        assert added <= {'window_size', 'vit_feature_source'}, (path, added)
        assert {k: built[k] for k in want} == want, path


def sized_vit_adapter(tiny, size):
    """ViT-Adapter-Ti's definition with a size's settings merged in; the
    size file states the five settings in which the official sizes differ
    and nothing else."""
    name = f'vit-adapter-{size}.py'
    settings = Config.fromfile(
        osp.join(ROOT, 'configs', '_base_', 'models',
                 name))[f'vit_adapter_{size}'].to_dict()
    assert set(settings) == {
        'arch', 'drop_path_rate', 'deform_num_heads', 'deform_ratio',
        'init_cfg'
    } and set(settings['init_cfg']) == {'checkpoint'}, name
    init_cfg = dict(tiny['init_cfg'], **settings.pop('init_cfg'))
    return dict(tiny, init_cfg=init_cfg, **settings)
