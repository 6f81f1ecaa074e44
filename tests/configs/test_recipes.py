"""Every config carries the recipe of docs/recipes.md.

Each family's rows (the mmlape column of docs/recipes.md) are checked on
every config of the family, and the values the test checks must be the ones
the document shows (the `code` snippets of each mmlape cell). The weight
decay groups are built on tiny models and compared with the official rules,
written here from the official code: timm's ``add_weight_decay`` (DeiT),
mmcv 1.x's ``custom_keys`` substring rule (ViT-Adapter detection) and
ViT-Adapter's ``LayerDecayOptimizerConstructor`` (segmentation). The
schedules are run and compared with the official ones.
"""
import copy
import functools
import glob
import math
import os.path as osp
import re

import pytest
import torch
from conftest import ROOT
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import PARAM_SCHEDULERS, DefaultScope

DOC = osp.join(ROOT, 'docs', 'recipes.md')
FAMILIES = {
    'deit': 'DeiT-Ti/S/B',
    'mask-rcnn': 'Mask R-CNN',
    'upernet': 'UperNet',
    'segmenter': 'Segmenter',
}
ROWS = [
    'optimizer', 'lr', 'weight decay', 'layer decay', 'schedule and warm-up',
    'batch', 'train pipeline', 'test pipeline', 'drop path', 'initialisation',
    'pretrained weights', 'precision'
]
IMAGENET_MEAN = [123.675, 116.28, 103.53]


def family_of(path):
    if '/demo/' in path:
        return None
    name = osp.basename(path)
    for family in FAMILIES:
        if name.startswith(family):
            return family
    return None


CONFIGS = sorted(
    p for p in glob.glob(
        osp.join(ROOT, 'configs', '**', '*.py'), recursive=True)
    if family_of(p) and '_base_' not in p.split(osp.sep))


@functools.lru_cache(maxsize=None)
def _load(path):
    return Config.fromfile(path)


def load(path):
    return copy.deepcopy(_load(path))


def types(pipeline):
    return [t['type'] for t in pipeline]


def find(pipeline, name):
    hits = [t for t in pipeline if t['type'] == name]
    assert len(hits) == 1, (name, types(pipeline))
    return hits[0]


# ----------------------------------------------------------------------
# the mmlape column: row -> (snippets shown in the document, check)
def deit_rows():

    def optimizer(c):
        opt = c.optim_wrapper.optimizer
        assert opt.type == 'AdamW' and opt.eps == 1e-8
        assert tuple(opt.betas) == (0.9, 0.999)

    def lr(c):
        assert c.optim_wrapper.optimizer.lr == pytest.approx(1e-3)
        assert c.auto_scale_lr.base_batch_size == 1024

    def decay(c):
        assert c.optim_wrapper.optimizer.weight_decay == 0.05
        assert c.optim_wrapper.paramwise_cfg.to_dict() == dict(
            flat_decay_mult=0.0,
            custom_keys={
                '.cls_token': dict(decay_mult=0.0),
                '.pos_embed': dict(decay_mult=0.0)
            })

    def layer_decay(c):
        assert c.optim_wrapper.get('constructor') is None

    def schedule(c):
        assert [s.to_dict() for s in c.param_scheduler] == [
            dict(
                type='LaPEDeiTCosineLR',
                warmup_epochs=5,
                warmup_lr=1e-6,
                min_lr=1e-5,
                cosine_epochs=300,
                lag_epochs=1,
                by_epoch=True)
        ]
        assert c.train_cfg.max_epochs == 300 and c.train_cfg.by_epoch

    def batch(c):
        assert c.train_dataloader.batch_size == 256
        assert c.train_dataloader.drop_last is True

    def repeated(c):
        sampler = c.train_dataloader.sampler.to_dict()
        sampler.pop('_scope_', None)
        assert sampler == dict(
            type='RepeatAugSampler', num_repeats=3, shuffle=True)

    def train_pipeline(c):
        pipe = c.train_dataloader.dataset.pipeline
        assert types(pipe) == [
            'LoadImageFromFile', 'RandomResizedCrop', 'RandomFlip',
            'RandAugment', 'RandomErasing', 'PackInputs'
        ]
        crop = find(pipe, 'RandomResizedCrop')
        assert crop.scale == 224 and crop.interpolation == 'bicubic'
        assert find(pipe, 'RandomFlip').prob == 0.5
        ra = find(pipe, 'RandAugment')
        assert (ra.policies, ra.num_policies, ra.magnitude_level,
                ra.magnitude_std, ra.total_level) == ('timm_increasing', 2, 9,
                                                      0.5, 10)
        er = find(pipe, 'RandomErasing')
        assert er.erase_prob == 0.25 and er.mode == 'rand'
        assert [(a.type, a.alpha)
                for a in c.model.train_cfg.augments] == [('Mixup', 0.8),
                                                         ('CutMix', 1.0)]
        loss = c.model.head.loss
        assert (loss.type, loss.label_smooth_val, loss.mode) == \
            ('LabelSmoothLoss', 0.1, 'original')

    def test_pipeline(c):
        pipe = c.test_dataloader.dataset.pipeline
        assert types(pipe) == [
            'LoadImageFromFile', 'ResizeEdge', 'CenterCrop', 'PackInputs'
        ]
        edge = find(pipe, 'ResizeEdge')
        assert (edge.scale, edge.edge, edge.interpolation) == (256, 'short',
                                                               'bicubic')
        assert find(pipe, 'CenterCrop').crop_size == 224
        assert c.val_dataloader.dataset.pipeline == pipe

    def drop_path(c):
        assert c.model.backbone.drop_path_rate == 0.1

    def init(c):
        assert c.model.head.init_cfg.to_dict() == dict(
            type='TruncNormal', layer='Linear', std=0.02, bias=0.)

    def pretrained(c):
        assert c.model.backbone.get('init_cfg') is None
        assert c.get('load_from') is None

    def precision(c):
        assert c.optim_wrapper.get('type', 'OptimWrapper') == 'OptimWrapper'

    def clip(c):
        assert c.optim_wrapper.clip_grad is None

    def ema(c):
        assert not any('EMA' in h.type for h in c.get('custom_hooks', []))

    return {
        'optimizer': (['`AdamW`', '`eps=1e-8`',
                       '`betas=(0.9, 0.999)`'], optimizer),
        'lr': (['`lr=5e-4 * 1024 / 512`', '`base_batch_size=1024`'], lr),
        'weight decay': ([
            '`weight_decay=0.05`', '`flat_decay_mult=0.0`', '`.cls_token`',
            '`.pos_embed`', '`decay_mult=0.0`'
        ], decay),
        'layer decay': (['none'], layer_decay),
        'schedule and warm-up': ([
            '`LaPEDeiTCosineLR`', '`warmup_epochs=5`', '`warmup_lr=1e-6`',
            '`min_lr=1e-5`', '`cosine_epochs=300`', '`lag_epochs=1`',
            '`max_epochs=300`'
        ], schedule),
        'batch': (['`4xb256`', '`drop_last=True`'], batch),
        'repeated augmentation': (['`RepeatAugSampler`',
                                   '`num_repeats=3`'], repeated),
        'train pipeline': ([
            '`RandomResizedCrop`', '`RandAugment`', '`RandomErasing`',
            '`Mixup`', '`CutMix`', '`LabelSmoothLoss`'
        ], train_pipeline),
        'test pipeline': (['`ResizeEdge` 256 bicubic',
                           '`CenterCrop` 224'], test_pipeline),
        'drop path': (['`drop_path_rate=0.1`'], drop_path),
        'initialisation': (['`TruncNormal`', '`std=0.02`', '`bias=0.`'], init),
        'pretrained weights': (['none'], pretrained),
        'precision': (['fp32', '`--amp`'], precision),
        'gradient clipping': (['`clip_grad=None`'], clip),
        'EMA': (['none'], ema),
    }


def _adapter_common(c, wd, lr):
    opt = c.optim_wrapper.optimizer
    assert opt.type == 'AdamW' and tuple(opt.betas) == (0.9, 0.999)
    assert opt.lr == lr and opt.weight_decay == wd


def mask_rcnn_rows():
    scales = [(480 + 32 * i, 1333) for i in range(11)]

    def optimizer(c):
        _adapter_common(c, 0.05, 1e-4)

    def lr(c):
        assert c.optim_wrapper.optimizer.lr == 1e-4

    def decay(c):
        assert c.optim_wrapper.optimizer.weight_decay == 0.05
        assert c.optim_wrapper.paramwise_cfg.to_dict() == dict(
            custom_keys={
                k: dict(decay_mult=0.0)
                for k in ('level_embed', 'pos_embed', 'norm', 'bias')
            })

    def layer_decay(c):
        assert c.optim_wrapper.get('constructor') is None

    def schedule(c):
        warm, step = [s.to_dict() for s in c.param_scheduler]
        assert warm == dict(
            type='LinearLR',
            start_factor=0.001,
            by_epoch=False,
            begin=0,
            end=501)
        assert step['type'] == 'MultiStepLR' and step['by_epoch']
        assert step['milestones'] == [27, 33]
        assert step.get('gamma', 0.1) == 0.1
        assert c.train_cfg.max_epochs == 36

    def batch(c):
        assert c.train_dataloader.batch_size == 2
        assert c.auto_scale_lr.base_batch_size == 16

    def train_pipeline(c):
        pipe = c.train_dataloader.dataset.pipeline
        assert types(pipe) == [
            'LoadImageFromFile', 'LoadAnnotations', 'RandomFlip',
            'RandomChoice', 'RandomCrop', 'PackDetInputs'
        ]
        assert find(pipe, 'RandomFlip').prob == 0.5
        first, second = find(pipe, 'RandomChoice').transforms
        assert [tuple(s) for s in first[0].scales] == scales
        assert types(second) == [
            'RandomChoiceResize', 'RandomCrop', 'RandomChoiceResize'
        ]
        assert [tuple(s)
                for s in second[0].scales] == [(400, 1333), (500, 1333),
                                               (600, 1333)]
        assert tuple(second[1].crop_size) == (384, 600)
        assert second[1].crop_type == 'absolute_range'
        assert [tuple(s) for s in second[2].scales] == scales
        crop = find(pipe, 'RandomCrop')
        assert tuple(crop.crop_size) == (1024, 1024)
        assert crop.crop_type == 'absolute_range'
        assert crop.allow_negative_crop is True
        assert c.model.data_preprocessor.pad_size_divisor == 32
        assert c.model.data_preprocessor.mean == IMAGENET_MEAN

    def test_pipeline(c):
        resize = find(c.test_dataloader.dataset.pipeline, 'Resize')
        assert tuple(resize.scale) == (1333, 800) and resize.keep_ratio

    def drop_path(c):
        assert c.model.backbone.drop_path_rate == 0.1

    def init(c):
        assert c.model.backbone.type == 'LaPEViTAdapter'

    def pretrained(c):
        init = c.model.backbone.init_cfg
        assert init.type == 'Pretrained' and init.prefix == 'backbone.'
        assert re.fullmatch(
            r'pretrained/deit-tiny(-lape|-pvg|-mpvg)?_in1k'
            r'\.pth', init.checkpoint)

    def precision(c):
        assert c.optim_wrapper.type == 'OptimWrapper'

    def clip(c):
        assert c.optim_wrapper.clip_grad is None

    return {
        'optimizer': (['`AdamW`', '`betas=(0.9, 0.999)`'], optimizer),
        'lr': (['`lr=1e-4`'], lr),
        'weight decay': ([
            '`weight_decay=0.05`', "`'norm'`", "`'bias'`", "`'level_embed'`",
            "`'pos_embed'`"
        ], decay),
        'layer decay': (['none'], layer_decay),
        'schedule and warm-up': ([
            '`LinearLR`', '`start_factor=0.001`', '`end=501`', '`MultiStepLR`',
            '`milestones=[27, 33]`', '`max_epochs=36`'
        ], schedule),
        'batch': (['`8xb2`'], batch),
        'train pipeline': ([
            '`RandomChoice`', '`RandomChoiceResize`', '`RandomCrop`',
            '`pad_size_divisor=32`'
        ], train_pipeline),
        'test pipeline': (['`pad_size_divisor=32`'], test_pipeline),
        'drop path': (['`drop_path_rate=0.1`'], drop_path),
        'initialisation': (['`init_adapter_weights`'], init),
        'pretrained weights':
        (['`pretrained/deit-tiny[-lape\\|-pvg\\|-mpvg]_in1k.pth`'],
         pretrained),
        'precision': (['fp32'], precision),
        'gradient clipping': (['`clip_grad=None`'], clip),
    }


def upernet_rows():

    def optimizer(c):
        _adapter_common(c, 0.01, 12e-5)

    def lr(c):
        assert c.optim_wrapper.optimizer.lr == 12e-5

    def decay(c):
        assert c.optim_wrapper.optimizer.weight_decay == 0.01
        assert c.optim_wrapper.paramwise_cfg.to_dict() == dict(
            layer_decay_rate=0.95, flat_decay_mult=0.0)

    def layer_decay(c):
        assert c.optim_wrapper.constructor == \
            'LaPELayerDecayOptimWrapperConstructor'
        assert c.optim_wrapper.paramwise_cfg.layer_decay_rate == 0.95

    def schedule(c):
        assert [s.to_dict() for s in c.param_scheduler] == [
            dict(
                type='LinearLR',
                start_factor=1e-6,
                by_epoch=False,
                begin=0,
                end=1501),
            dict(
                type='PolyLR',
                power=1.0,
                eta_min=0.0,
                by_epoch=False,
                begin=0,
                end=160001)
        ]
        assert c.train_cfg.max_iters == 160000

    def batch(c):
        assert c.train_dataloader.batch_size == 2

    def train_pipeline(c):
        pipe = c.train_dataloader.dataset.pipeline
        assert types(pipe) == [
            'LoadImageFromFile', 'LoadAnnotations', 'RandomResize',
            'RandomCrop', 'RandomFlip', 'PhotoMetricDistortion',
            'PackSegInputs'
        ]
        resize = find(pipe, 'RandomResize')
        assert tuple(resize.scale) == (2048, 512)
        assert tuple(resize.ratio_range) == (0.5, 2.0)
        crop = find(pipe, 'RandomCrop')
        assert tuple(crop.crop_size) == (512, 512)
        assert crop.cat_max_ratio == 0.75
        pre = c.model.data_preprocessor
        assert tuple(pre.size) == (512, 512)
        assert (pre.pad_val, pre.seg_pad_val) == (0, 255)
        assert pre.mean == IMAGENET_MEAN

    def test_pipeline(c):
        pipe = c.test_dataloader.dataset.pipeline
        assert tuple(find(pipe, 'Resize').scale) == (2048, 512)
        assert find(pipe, 'ResizeToMultiple').size_divisor == 32
        test = c.model.test_cfg
        assert test.mode == 'slide' and tuple(test.stride) == (341, 341)
        assert tuple(test.crop_size) == (512, 512)

    def drop_path(c):
        assert c.model.backbone.drop_path_rate == 0.1

    def init(c):
        assert c.model.backbone.type == 'LaPEViTAdapter'

    def pretrained(c):
        init = c.model.backbone.init_cfg
        assert init.type == 'Pretrained' and init.prefix == 'backbone.'

    def precision(c):
        assert c.optim_wrapper.type == 'OptimWrapper'

    def clip(c):
        assert c.optim_wrapper.clip_grad is None

    return {
        'optimizer': (['`AdamW`', '`betas=(0.9, 0.999)`'], optimizer),
        'lr': (['`lr=12e-5`'], lr),
        'weight decay': (['`weight_decay=0.01`',
                          '`flat_decay_mult=0.0`'], decay),
        'layer decay': ([
            '`LaPELayerDecayOptimWrapperConstructor`',
            '`layer_decay_rate=0.95`'
        ], layer_decay),
        'schedule and warm-up': ([
            '`LinearLR`', '`start_factor=1e-6`', '`end=1501`', '`PolyLR`',
            '`end=160001`', '`power=1.0`', '`eta_min=0.0`'
        ], schedule),
        'batch': (['`8xb2`'], batch),
        'train pipeline': (['crop 512'], train_pipeline),
        'test pipeline':
        (['`ResizeToMultiple` 32', "`mode='slide'`",
          '`stride=(341, 341)`'], test_pipeline),
        'drop path': (['`drop_path_rate=0.1`'], drop_path),
        'initialisation': (['as for Mask R-CNN'], init),
        'pretrained weights':
        (["mmlape's DeiT-Ti of the same join"], pretrained),
        'precision': (['fp32', '`--amp`'], precision),
        'gradient clipping': (['`clip_grad=None`'], clip),
    }


def segmenter_rows():

    def optimizer(c):
        opt = c.optim_wrapper.optimizer
        assert opt.type == 'SGD' and opt.momentum == 0.9

    def lr(c):
        assert c.optim_wrapper.optimizer.lr == 0.001

    def decay(c):
        assert c.optim_wrapper.optimizer.weight_decay == 0.0

    def layer_decay(c):
        assert c.optim_wrapper.get('constructor') is None

    def schedule(c):
        (poly, ) = c.param_scheduler
        assert (poly.type, poly.power, poly.eta_min, poly.begin,
                poly.end) == ('PolyLR', 0.9, 1e-4, 0, 160000)
        assert c.train_cfg.max_iters == 160000

    def batch(c):
        assert c.train_dataloader.batch_size == 1

    def train_pipeline(c):
        crop = find(c.train_dataloader.dataset.pipeline, 'RandomCrop')
        assert tuple(crop.crop_size) == (512, 512)
        pre = c.model.data_preprocessor
        assert pre.mean == IMAGENET_MEAN
        assert pre.std == [58.395, 57.12, 57.375]

    def test_pipeline(c):
        test = c.model.test_cfg
        assert test.mode == 'slide' and tuple(test.stride) == (480, 480)

    def drop_path(c):
        assert c.model.backbone.drop_path_rate == 0.1

    def init(c):
        bb = c.model.backbone
        assert bb.get('patch_bias', True) is True
        assert bb.interpolate_mode == 'bicubic'

    def pretrained(c):
        init = c.model.backbone.init_cfg
        assert init.type == 'Pretrained' and init.prefix == 'backbone.'
        assert c.model.pretrained is None

    def precision(c):
        assert c.optim_wrapper.type == 'OptimWrapper'

    def clip(c):
        assert c.optim_wrapper.get('clip_grad') is None

    return {
        'optimizer': (['`SGD`', '`momentum=0.9`'], optimizer),
        'lr': (['`lr=0.001`'], lr),
        'weight decay': (['`weight_decay=0.0`'], decay),
        'layer decay': (['none'], layer_decay),
        'schedule and warm-up': (['`PolyLR`', '`power=0.9`',
                                  '`eta_min=1e-4`'], schedule),
        'batch': (['`8xb1`'], batch),
        'train pipeline':
        (['`mean=[123.675, 116.28, 103.53]`'], train_pipeline),
        'test pipeline': (["`mode='slide'`",
                           '`stride=(480, 480)`'], test_pipeline),
        'drop path': (['`drop_path_rate=0.1`'], drop_path),
        'initialisation': (['patch-projection bias'], init),
        'pretrained weights':
        (["mmlape's DeiT-Ti of the same join"], pretrained),
        'precision': (['fp32'], precision),
        'gradient clipping': (['`clip_grad=None`'], clip),
    }


EXPECTED = {
    'deit': deit_rows(),
    'mask-rcnn': mask_rcnn_rows(),
    'upernet': upernet_rows(),
    'segmenter': segmenter_rows(),
}


# ----------------------------------------------------------------------
# the document
def _cells(line):
    return [c.strip() for c in re.split(r'(?<!\\)\|', line.strip())[1:-1]]


def doc_tables():
    """{family: {setting: mmlape cell}} from docs/recipes.md."""
    tables, family = {}, None
    with open(DOC) as f:
        for line in f:
            if line.startswith('## '):
                family = next((k for k, v in FAMILIES.items() if v in line),
                              None)
                continue
            if family and line.startswith('|'):
                cells = _cells(line)
                if cells[0] in ('setting', '---'):
                    assert cells[:4] == [
                        'setting', 'official (file)', 'mmlape', 'why different'
                    ] or set(cells[0]) == {'-'}, cells
                    continue
                tables.setdefault(family, {})[cells[0]] = cells[2]
    return tables


def test_document_has_every_row_and_shows_the_checked_values():
    tables = doc_tables()
    assert set(tables) == set(FAMILIES)
    for family, rows in EXPECTED.items():
        table = tables[family]
        for row in ROWS:
            assert row in table, (family, row)
        for row, (snippets, _) in rows.items():
            for snippet in snippets:
                assert snippet in table[row], (family, row, snippet)


def test_readme_links_the_recipes():
    with open(osp.join(ROOT, 'README.md')) as f:
        assert '(docs/recipes.md)' in f.read()


def test_every_family_has_configs():
    found = {family_of(p) for p in CONFIGS}
    assert found == set(FAMILIES)


@pytest.mark.parametrize(
    'path', CONFIGS, ids=lambda p: osp.relpath(p, osp.join(ROOT, 'configs')))
def test_config_follows_the_recipe(path):
    cfg = load(path)
    for row, (_, check) in EXPECTED[family_of(path)].items():
        try:
            check(cfg)
        except AssertionError as err:
            raise AssertionError(
                f'{osp.basename(path)} drifts from docs/recipes.md, row '
                f'"{row}": {err}') from err


# ----------------------------------------------------------------------
# weight-decay groups against the official rules
def tiny_model(path):
    cfg = load(path)
    family = family_of(path)
    bb = cfg.model.backbone
    bb.init_cfg = None
    if family == 'deit':
        bb.update(arch='test-tiny', img_size=32, patch_size=8)
        cfg.model.head.update(in_channels=64, num_classes=10)
    elif family == 'segmenter':
        bb.update(arch='test-tiny', img_size=64)
        cfg.model.decode_head.update(
            in_channels=64, channels=64, embed_dims=64, num_heads=2)
    else:
        bb.update(
            arch='test-tiny',
            img_size=64,
            deform_num_heads=2,
            interaction_indexes=None,
            adapter_norm_cfg=dict(type='BN'))
        if family == 'mask-rcnn':
            bb.window_size = 0
            cfg.model.neck.update(in_channels=[64] * 4, out_channels=16)
            cfg.model.rpn_head.update(in_channels=16, feat_channels=16)
            roi = cfg.model.roi_head
            roi.bbox_roi_extractor.out_channels = 16
            roi.bbox_head.update(in_channels=16, fc_out_channels=16)
            roi.mask_roi_extractor.out_channels = 16
            roi.mask_head.update(in_channels=16, conv_out_channels=16)
        else:
            norm = dict(type='BN')
            cfg.model.decode_head.update(
                in_channels=[64] * 4, channels=16, norm_cfg=norm)
            cfg.model.auxiliary_head.update(
                in_channels=64, channels=16, norm_cfg=norm)
    scope = cfg.default_scope
    import importlib
    importlib.import_module(f'{scope}.utils').register_all_modules(False)
    registry = importlib.import_module(f'{scope}.registry').MODELS
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(cfg.model)
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    return model, wrapper


def groups_by_name(model, wrapper):
    ids = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for group in wrapper.optimizer.param_groups:
        for p in group['params']:
            out[ids[id(p)]] = group
    assert set(out) == {n for n, p in model.named_parameters()}
    return out


def official_deit_no_decay(name, param):
    """timm 0.3 ``add_weight_decay`` with DeiT's ``no_weight_decay()``,
    on the names of the timm model (the backbone's, the head's)."""
    timm_name = name[len('backbone.'):] if name.startswith(
        'backbone.') else name
    return (param.ndim == 1 or timm_name.endswith('.bias')
            or timm_name in ('pos_embed', 'cls_token'))


def official_detection_no_decay(name, param):
    """mmcv 1.x ``custom_keys`` of the official detection config: a key
    contained in the name sets its decay_mult (0 for all four)."""
    return any(k in name for k in ('level_embed', 'pos_embed', 'norm', 'bias'))


def official_segmentation_group(name, param):
    """ViT-Adapter's ``LayerDecayOptimizerConstructor``: (no decay, layer
    id) for a parameter of the whole segmentor."""
    no_decay = (
        param.ndim == 1 or name.endswith('.bias')
        or name in ('pos_embed', 'cls_token', 'visual_embed'))
    if name in ('backbone.cls_token', 'backbone.pos_embed') or \
            name.startswith('backbone.patch_embed'):
        layer = 0
    elif name.startswith('backbone.blocks'):
        layer = int(name.split('.')[2]) + 1
    else:
        layer = 12 + 2 - 1
    return no_decay, layer


@pytest.mark.parametrize('config, rule', [
    ('deit/deit-tiny-lape_4xb256_in1k.py', official_deit_no_decay),
    ('deit/deit-tiny-mpvg_4xb256_in1k.py', official_deit_no_decay),
    ('vit_adapter/mask-rcnn_vit-adapter-tiny-lape_fpn_3x_coco.py',
     official_detection_no_decay),
])
def test_decay_groups_follow_the_official_rule(config, rule):
    model, wrapper = tiny_model(osp.join(ROOT, 'configs', config))
    base = wrapper.optimizer.defaults['weight_decay']
    groups = groups_by_name(model, wrapper)
    params = dict(model.named_parameters())
    for name, group in groups.items():
        want = 0. if rule(name, params[name]) else base
        assert group['weight_decay'] == want, name
    names = list(groups)
    if 'mask-rcnn' in config:  # the difference the issue names
        assert groups['backbone.spm.stem.1.weight']['weight_decay'] == base
        assert groups['backbone.spm.stem.1.bias']['weight_decay'] == 0
        assert groups['backbone.blocks.0.gamma1']['weight_decay'] == base
    assert any('pe_norm' in n for n in names)
    assert all(groups[n]['weight_decay'] == 0 for n in names
               if 'pe_norm' in n or 'last_norm' in n or 'pos_embed' in n)


def test_segmentation_groups_follow_the_official_constructor():
    model, wrapper = tiny_model(
        osp.join(ROOT, 'configs', 'vit_adapter',
                 'upernet_vit-adapter-tiny-lape_8xb2-160k_ade20k-512x512.py'))
    groups = groups_by_name(model, wrapper)
    params = dict(model.named_parameters())
    depth = model.backbone.num_layers + 2
    for name, group in groups.items():
        no_decay, layer = official_segmentation_group(name, params[name])
        if model.backbone.num_layers != 12 and layer == 12 + 2 - 1:
            layer = depth - 1
        assert group['weight_decay'] == (0. if no_decay else 0.01), name
        assert group['lr'] == pytest.approx(12e-5 *
                                            0.95**(depth - layer - 1)), name
    # decayed in effect, as in the official runs
    assert groups['backbone.pos_embed']['weight_decay'] == 0.01
    assert groups['backbone.level_embed']['weight_decay'] == 0.01
    assert groups['backbone.blocks.1.pe_norm.weight']['weight_decay'] == 0


def test_deit_classifier_head_starts_as_deits():
    model, _ = tiny_model(
        osp.join(ROOT, 'configs', 'deit', 'deit-tiny_4xb256_in1k.py'))
    model.init_weights()
    fc = model.head.layers.head
    assert 0.015 < fc.weight.std().item() < 0.025
    assert abs(fc.weight.mean().item()) < 0.005
    assert torch.all(fc.bias == 0)


def test_deit_sampler_repeats_each_image_three_times():
    from mmpretrain.registry import DATA_SAMPLERS
    cfg = load(osp.join(ROOT, 'configs', 'deit', 'deit-tiny_4xb256_in1k.py'))
    sampler = DATA_SAMPLERS.build(
        cfg.train_dataloader.sampler, default_args=dict(dataset=range(12)))
    indices = list(sampler)
    assert len(indices) == 12
    assert all(indices[i] == indices[i + 1] == indices[i + 2]
               for i in range(0, 12, 3))


# ----------------------------------------------------------------------
# schedules against the official ones
class OfficialDeiTSchedule:
    """timm 0.3's CosineLRScheduler as DeiT's main.py drives it: created at
    ``warmup_lr``, ``step(epoch)`` after each epoch."""

    def __init__(self,
                 base,
                 epochs=300,
                 warmup=5,
                 warmup_lr=1e-6,
                 min_lr=1e-5):
        self.base, self.epochs, self.warmup = base, epochs, warmup
        self.warmup_lr, self.min_lr = warmup_lr, min_lr
        self.lr = warmup_lr
        self.step_size = (base - warmup_lr) / warmup

    def step(self, t):
        if t < self.warmup:
            self.lr = self.warmup_lr + t * self.step_size
        else:
            i = t // self.epochs
            t_curr = t - self.epochs * i
            if i < 1:
                self.lr = self.min_lr + 0.5 * (self.base - self.min_lr) * (
                    1 + math.cos(math.pi * t_curr / self.epochs))
            else:
                self.lr = self.min_lr


def test_deit_schedule_is_the_official_one_epoch_by_epoch():
    cfg = load(osp.join(ROOT, 'configs', 'deit', 'deit-tiny_4xb256_in1k.py'))
    import mmlape  # noqa: F401  (registers LaPEDeiTCosineLR)
    bases = [1e-3, 4e-4]  # a second group with its own rate
    params = [torch.nn.Parameter(torch.zeros(1)) for _ in bases]
    optim = torch.optim.AdamW(
        [dict(params=[p], lr=lr) for p, lr in zip(params, bases)])
    sched = PARAM_SCHEDULERS.build(
        cfg.param_scheduler[0], default_args=dict(optimizer=optim))
    official = [OfficialDeiTSchedule(b) for b in bases]
    for epoch in range(cfg.train_cfg.max_epochs):
        got = [g['lr'] for g in optim.param_groups]
        assert got == pytest.approx([o.lr for o in official], rel=1e-12), \
            epoch
        optim.step()
        sched.step()  # mmengine: after each epoch
        for o in official:
            o.step(epoch)  # main.py: lr_scheduler.step(epoch)
    assert optim.param_groups[0]['lr'] > 1e-5  # 300 epochs, no cool-down


def test_deit_scheduler_validates_its_options():
    from mmlape.engine import LaPEDeiTCosineLR
    optim = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.)
    with pytest.raises(ValueError, match='warmup_epochs=300 must be below'):
        LaPEDeiTCosineLR(optim, warmup_epochs=300, cosine_epochs=300)
    with pytest.raises(ValueError, match='by_epoch=False'):
        LaPEDeiTCosineLR(optim, by_epoch=False)
    with pytest.raises(ValueError, match='lag_epochs=-1'):
        LaPEDeiTCosineLR(optim, lag_epochs=-1)


def test_segmentation_warmup_multiplies_the_poly_rate():
    """mmcv 1.x: lr(t) = base * (1 - t / T) * (r + (1 - r) * t / W) for
    t < W, base * (1 - t / T) after; the config's two schedulers, run on a
    100x shorter horizon (ends W + 1 and T + 1, as in the config), give
    exactly that."""
    cfg = load(
        osp.join(ROOT, 'configs', 'vit_adapter',
                 'upernet_vit-adapter-tiny_8xb2-160k_ade20k-512x512.py'))
    optim = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=12e-5)
    scheds = []
    for s in cfg.param_scheduler:
        s = s.to_dict()
        s['end'] = 16 if s['type'] == 'LinearLR' else 1601
        scheds.append(
            PARAM_SCHEDULERS.build(s, default_args=dict(optimizer=optim)))
    warm, total, ratio = 15, 1600, 1e-6
    for t in range(total):
        want = 12e-5 * (1 - t / total)
        if t < warm:
            want *= ratio + (1 - ratio) * t / warm
        assert optim.param_groups[0]['lr'] == pytest.approx(
            want, rel=1e-9, abs=1e-15), t
        optim.step()
        for s in scheds:
            s.step()
