"""docs/recipes.md and the configs, checked against each other and against
the official code.

The mmlape column of each family's table in docs/recipes.md states the
configs' values as code spans (the document's opening paragraph says how
each is read); every config of the family must hold every claim, and every
span is either a claim or listed in ``PROSE``. What a config cannot state
itself is checked by running it: the weight-decay groups built on tiny
models against the official rules, written here from the official code:
timm's ``add_weight_decay`` (DeiT), mmcv 1.x's ``custom_keys`` substring
rule (ViT-Adapter detection) and ViT-Adapter's
``LayerDecayOptimizerConstructor`` (segmentation); and the schedules,
run and compared with the official ones.
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
# row -> the parts of a config its claims are looked up in ('{}': the test
# and the val dataloader, each); the first part of a pipeline row is the
# pipeline
SCOPES = {
    'architecture': [
        'model.backbone', 'model.neck', 'model.decode_head',
        'model.auxiliary_head'
    ],
    'optimizer': ['optim_wrapper.optimizer'],
    'lr': ['optim_wrapper.optimizer', 'auto_scale_lr'],
    'weight decay': ['optim_wrapper'],
    'layer decay': ['optim_wrapper'],
    'schedule and warm-up': ['param_scheduler', 'train_cfg'],
    'batch': ['train_dataloader'],
    'evaluation batch': ['{}_dataloader'],
    'repeated augmentation': ['train_dataloader.sampler'],
    'train pipeline': [
        'train_dataloader.dataset.pipeline', 'model.train_cfg', 'model.head',
        'model.data_preprocessor'
    ],
    'test pipeline': [
        '{}_dataloader.dataset.pipeline', 'model.test_cfg',
        'model.data_preprocessor'
    ],
    'drop path': ['model.backbone'],
    'initialisation': ['model.backbone', 'model.head'],
    'pretrained weights': ['model.backbone.init_cfg'],
    'precision': ['optim_wrapper'],
    'gradient clipping': ['optim_wrapper'],
    'EMA': ['custom_hooks'],
}
ROWS = [
    r for r in SCOPES if r not in ('architecture', 'repeated augmentation',
                                   'EMA', 'evaluation batch')
]
# (row, how the cell starts) -> what the words claim
WORDS = {
    # (LaPEOptimWrapperConstructor only groups the parameters)
    ('layer decay', 'none'):
    lambda c: 'Decay' not in c['optim_wrapper'].get('constructor', '') and
    'layer_decay_rate' not in c['optim_wrapper'].get('paramwise_cfg', {}),
    ('pretrained weights', 'none'):
    lambda c: c['model']['backbone'].get('init_cfg') is None and c.get(
        'load_from') is None,
    ('EMA', 'none'):
    lambda c: not any('EMA' in h['type'] for h in c.get('custom_hooks', [])),
    ('precision', 'fp32'):
    lambda c: c['optim_wrapper'].get('type', 'OptimWrapper') == 'OptimWrapper',
    ('initialisation', "encoder from the checkpoint with DeiT's patch-"):
    lambda c: c['model']['backbone'].get('patch_bias', True) is True,
}
# code spans of the mmlape column that name no config value
PROSE = {
    '--auto-scale-lr', 'tools/dist_train.sh CONFIG 4 --amp', '--amp',
    'pe_join.last_norm', 'end - 1', 'pos_embed', 'level_embed',
    'blocks.{i}.pe_norm', 'norm', 'init_adapter_weights', 'up(c2) + c1',
    'configs/deit', 'tools/convert/to_mmlape.py --family vit',
    'LaPEViT.get_layer_depth', 'blocks.{i}.attn.rope_freqs',
    'int(1.5 * args.batch_size)', 'tests/models/test_vit_adapter.py'
}
NAMESPACE = {'__builtins__': {}, 'dict': dict, 'range': range}


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


# ----------------------------------------------------------------------
# the document
def _cells(line):
    return [c.strip() for c in re.split(r'(?<!\\)\|', line.strip())[1:-1]]


@functools.lru_cache(maxsize=None)
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


def claim(span):
    """(kind, name, values) that a code span of an mmlape cell claims, or
    None when it is not a claim."""

    def kwargs(source):  # the repository's own document
        return eval(source, NAMESPACE)

    call = re.fullmatch(r'([A-Z]\w*)(?:\((.*)\))?', span)
    if call:
        return 'type', call[1], kwargs(f'dict({call[2] or ""})')
    if re.fullmatch(r"'\w+'|\.\w+", span):
        return 'key', span.strip("'"), {}
    batch = re.fullmatch(r'(\d+)xb(\d+)', span)
    if batch:
        return 'batch', span, dict(gpus=int(batch[1]), size=int(batch[2]))
    if span.startswith('pretrained/'):
        return 'checkpoint', span, {}
    try:
        return 'values', None, kwargs(f'dict({span})')
    except (SyntaxError, NameError, TypeError):
        return None


#: A size's label (``Ti: ``, ``S: ``, ``B: ``) before a code span: that
#: span and the spans after it, up to the next label or ``;``, claim for
#: that size's configs only.
SIZES = {'tiny': 'Ti', 'small': 'S', 'base': 'B'}
LABELLED = r'(?:(?<![\w-])(Ti|S|B): )?`([^`]+)`'


def size_of(path):
    """The size label (``Ti``, ``S``, ``B``) of a config's name."""
    found = re.search(r'-(tiny|small|base)(?=[-_])', osp.basename(path))
    return SIZES[found[1]] if found else None


def labelled_spans(cell):
    """(size label or '', span) of each code span of a cell."""
    out = []
    for clause in cell.split(';'):
        label = ''
        for m in re.finditer(LABELLED, clause):
            label = m[1] or label
            out.append((label, m[2]))
    return out


def claims(cell, size=None):
    """(span, claim) of each code span of a cell; given a size, the spans
    of other sizes left out."""
    return [(span, claim(span)) for label, span in labelled_spans(cell)
            if size is None or label in ('', size)]


def sizes_named(cell):
    return {label for label, _ in labelled_spans(cell) if label}


def test_document_has_every_row_and_every_span_is_checked():
    tables = doc_tables()
    assert set(tables) == set(FAMILIES)
    for family, table in tables.items():
        assert set(ROWS) <= set(table), family
        for row, cell in table.items():
            if row not in SCOPES:
                continue
            said = [c for _, c in claims(cell) if c]
            words = [w for r, w in WORDS if r == row and cell.startswith(w)]
            assert said or words, (family, row, cell)
            for span, c in claims(cell):
                assert c or span in PROSE, (family, row, span)


def test_readme_links_the_recipes():
    with open(osp.join(ROOT, 'README.md')) as f:
        assert '(docs/recipes.md)' in f.read()


def test_every_family_has_configs():
    found = {family_of(p) for p in CONFIGS}
    assert found == set(FAMILIES)


# ----------------------------------------------------------------------
# the configs against the document
def plain(value):
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def part(cfg, path):
    for key in path.split('.'):
        cfg = cfg.get(key) if isinstance(cfg, dict) else None
    return cfg


def dicts(obj):
    """Every dict in ``obj``, in order, nested ones included."""
    if isinstance(obj, dict):
        yield obj
        obj = list(obj.values())
    if isinstance(obj, list):
        for item in obj:
            yield from dicts(item)


def holds(d, kind, name, values):
    return (kind != 'type' or d.get('type') == name) and all(
        k in d and plain(d[k]) == plain(v) for k, v in values.items())


def check_claim(cfg, path, scope, span, kind, name, values):
    found = list(dicts(scope))
    if kind == 'key' or (kind == 'type' and not values):
        assert any(name in d or name in d.values() for d in found), span
    elif kind in ('type', 'values'):
        assert any(holds(d, kind, name, values) for d in found), span
    elif kind == 'batch':
        assert cfg['train_dataloader']['batch_size'] == values['size']
        total = values['gpus'] * values['size']
        assert cfg.get('auto_scale_lr', {}).get('base_batch_size',
                                                total) == total
    else:  # the checkpoint of the config's own size and join
        want = re.sub(
            r'\[(.*?)\]', lambda m: next(
                (j for j in m[1].split('\\|')
                 if re.search(re.escape(j) + '[-_]', osp.basename(path))), ''),
            span)
        assert any(d.get('checkpoint') == want for d in found), (span, want)


def check_pipeline(pipeline, said, span):
    """The transforms a pipeline row names are all of the pipeline's, but
    loading and packing, in the document's order."""
    body = [t for t in pipeline if not t['type'].startswith(('Load', 'Pack'))]
    named = [
        next((i for i, t in enumerate(body) if holds(t, *c)), None)
        for c in said if c[0] == 'type'
    ]
    named = [i for i in named if i is not None]
    if named:
        assert named == list(range(len(body))), (span, named)


@pytest.mark.parametrize(
    'path', CONFIGS, ids=lambda p: osp.relpath(p, osp.join(ROOT, 'configs')))
def test_config_follows_the_recipe(path):
    cfg = load(path).to_dict()
    for row, cell in doc_tables()[family_of(path)].items():
        if row not in SCOPES:
            continue
        try:
            for (r, words), check in WORDS.items():
                if r == row and cell.startswith(words):
                    assert check(cfg), words
            sets = [SCOPES[row]]
            if '{}' in sets[0][0]:
                sets = [[p.format(s) for p in sets[0]]
                        for s in ('test', 'val')]
            size = size_of(path)
            assert not sizes_named(cell) or size in sizes_named(cell), (
                f'the row names values for {sorted(sizes_named(cell))}, '
                f'none for {size}')
            for paths in sets:
                scope = [part(cfg, p) for p in paths]
                said = [c for _, c in claims(cell, size) if c]
                for span, c in claims(cell, size):
                    if c:
                        check_claim(cfg, path, scope, span, *c)
                if 'pipeline' in row:
                    check_pipeline(scope[0], said, cell)
        except AssertionError as err:
            raise AssertionError(
                f'{osp.basename(path)} drifts from docs/recipes.md, row '
                f'"{row}": {err}') from err


# ----------------------------------------------------------------------
# weight-decay groups against the official rules
def tiny_model(path, cfg=None):
    cfg = cfg or load(path)
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


def official_rope_no_decay(name, param):
    """timm's ``add_weight_decay`` with its RoPE-ViT models'
    ``no_weight_decay()`` (``eva.py``: ``pos_embed``, ``cls_token`` and
    RoPE-Mixed's ``rope.freqs``, which mmlape splits into
    ``blocks.{i}.attn.rope_freqs``)."""
    return official_deit_no_decay(name,
                                  param) or name.endswith('.attn.rope_freqs')


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
    ('deit/deit-tiny-rope-mixed-ape-lape_4xb256_in1k.py',
     official_rope_no_decay),
    ('deit/deit-small-rope-mixed-ape-mpvg_4xb256_in1k.py',
     official_rope_no_decay),
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
    if 'rope' in config:  # the frequencies are there, and not decayed
        freqs = [n for n in names if n.endswith('rope_freqs')]
        assert len(freqs) == model.backbone.num_layers
        assert all(groups[n]['weight_decay'] == 0 for n in freqs)


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
    from mmlape.hosts import LaPEDeiTCosineLR
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


# ----------------------------------------------------------------------
# fused AdamW
ALL_CONFIGS = sorted(
    p for p in glob.glob(
        osp.join(ROOT, 'configs', '**', '*.py'), recursive=True)
    if '_base_' not in p.split(osp.sep))


def optimizer_of(path):
    return _load(path).optim_wrapper.optimizer


def test_every_adamw_config_asks_for_the_fused_kernel():
    adamw = [p for p in ALL_CONFIGS if optimizer_of(p).type == 'AdamW']
    assert len(adamw) > 20  # DeiT, ViT-Adapter, T2T, CeiT, Swin, CCT, ...
    for path in adamw:
        assert optimizer_of(path).get('fused') is True, path


@pytest.mark.parametrize('config', [
    'deit/deit-tiny-lape_4xb256_in1k.py',
    'vit_adapter/upernet_vit-adapter-tiny-mpvg_8xb2-160k_ade20k-512x512.py'
])
def test_fused_adamw_step_equals_the_unfused_one(config):
    """Two steps of the configured (fused) optimizer, weight-decay groups
    and layer decay included, and of the same optimizer unfused, from the
    same weights and gradients."""
    path = osp.join(ROOT, 'configs', config)
    model, fused = tiny_model(path)
    assert fused.optimizer.defaults['fused'] is True
    twin = copy.deepcopy(model)
    cfg = load(path)
    cfg.optim_wrapper.optimizer.pop('fused')
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        unfused = build_optim_wrapper(twin, cfg.optim_wrapper)
    assert not unfused.optimizer.defaults.get('fused')
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(0)
    for _ in range(2):
        for a, b in zip(model.parameters(), twin.parameters()):
            a.grad = torch.randn(a.shape, generator=gen)
            b.grad = a.grad.clone()
        fused.step()
        unfused.step()
    for (name, a), b in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=name)
        assert not torch.equal(a, start[name]), name


def test_clipped_norms_are_clipped_and_logged_as_mmengines():
    """Every config that clips its gradients by norm (Swin's recipe, at 5)
    builds an optimizer wrapper that clips and logs the norm as mmengine's
    does (the opt-in ``LazyRuntimeInfoHook`` rebinds it to keep the norm on
    the device, tests/hosts/test_lazy_log.py); the layer-decay
    constructor's wrapper as well."""
    from mmengine.optim import OptimWrapper
    clipping = [
        p for p in ALL_CONFIGS
        if (load(p).optim_wrapper.get('clip_grad') or {}).get('max_norm')
    ]
    assert clipping and all('swin' in p for p in clipping), clipping
    upernet = osp.join(
        ROOT, 'configs', 'vit_adapter',
        'upernet_vit-adapter-tiny-lape_8xb2-160k_ade20k-'
        '512x512.py')
    for path in clipping + [upernet]:
        cfg = load(path)
        cfg.optim_wrapper.clip_grad = dict(max_norm=5.0)
        if path == upernet:
            model, wrapper = tiny_model(path, cfg)
        else:
            model = torch.nn.Linear(8, 4)
            with DefaultScope.overwrite_default_scope(cfg.default_scope):
                wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
        assert isinstance(wrapper, OptimWrapper), path
        # mmengine's clipping (the lazy logging of its norm comes with the
        # opt-in LazyRuntimeInfoHook, tests/hosts/test_lazy_log.py)
        assert wrapper.clip_func is torch.nn.utils.clip_grad_norm_, path
        params = [
            p for g in wrapper.optimizer.param_groups for p in g['params']
        ]
        for p in params:
            p.grad = torch.full_like(p, 10.)
        wrapper.step()
        norm = wrapper.message_hub.log_scalars['train/grad_norm'].current()
        grads = torch.cat([p.grad.flatten() for p in params])
        assert norm == pytest.approx(10. * grads.numel()**0.5), path
        assert grads.double().norm().item() == pytest.approx(5.0, rel=1e-5), \
            path


def test_fused_flag_is_dropped_where_torch_has_no_kernel():
    from mmlape.hosts.runner_setup import fit_fused_optimizer
    cfg = Config(
        dict(optim_wrapper=dict(optimizer=dict(type='AdamW', fused=True))))
    assert fit_fused_optimizer(cfg, 'cuda') is None
    assert fit_fused_optimizer(cfg, 'cpu') is None
    assert cfg.optim_wrapper.optimizer.fused is True
    note = fit_fused_optimizer(cfg, 'plainchip')
    assert 'fused' not in cfg.optim_wrapper.optimizer
    assert note.startswith('optimizer AdamW: torch has no fused kernel for '
                           'plainchip (only [')


# ----------------------------------------------------------------------
# one optimizer group per set of options (LaPEOptimWrapperConstructor)
def _options(group):
    return {k: v for k, v in group.items() if k != 'params'}


def _per_parameter_twin(path, model, cfg=None):
    """A copy of ``model`` and the optimizer mmengine's own constructor
    builds for it from the same config (one group per parameter)."""
    twin = copy.deepcopy(model)
    cfg = copy.deepcopy(cfg or load(path))
    assert cfg.optim_wrapper.pop('constructor') == \
        'LaPEOptimWrapperConstructor'
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        return twin, build_optim_wrapper(twin, cfg.optim_wrapper)


@pytest.mark.parametrize('config', [
    'deit/deit-tiny-lape_4xb256_in1k.py',
    'vit_adapter/mask-rcnn_vit-adapter-tiny-lape_fpn_3x_coco.py'
])
def test_parameters_with_equal_options_share_one_group(config, monkeypatch):
    from mmlape.hosts import param_groups
    said = []
    monkeypatch.setattr(param_groups, 'print_log',
                        lambda msg, **kwargs: said.append(msg))
    path = osp.join(ROOT, 'configs', config)
    model, merged = tiny_model(path)
    n = len(list(model.parameters()))
    groups = len(merged.optimizer.param_groups)
    assert said == [
        f'optimizer: {n} parameters in {groups} groups, one per set of '
        'options (LaPEOptimWrapperConstructor)'
    ]
    twin, per_param = _per_parameter_twin(path, model)
    groups = per_param.optimizer.param_groups
    assert len(groups) == len(list(model.parameters()))
    distinct = []
    for group in groups:
        if _options(group) not in distinct:
            distinct.append(_options(group))
    # the distinct option sets, in the order they first appear
    assert [_options(g) for g in merged.optimizer.param_groups] == distinct
    if config.startswith('deit/'):
        # decay or not, as the official code; the PE and class token's
        # custom_keys group also carries mmengine's decay_mult entry
        assert [g['weight_decay'] for g in distinct] == [0.0, 0.05, 0.0]
        assert distinct[0]['decay_mult'] == 0.0
    # every parameter keeps the options mmengine's constructor gives it
    mine, theirs = groups_by_name(model,
                                  merged), groups_by_name(twin, per_param)
    for name, group in mine.items():
        assert _options(group) == _options(theirs[name]), name
    # plain dicts, not mmengine's ConfigDicts (read on every step), which
    # the schedulers drive as before
    assert type(groups[0]).__name__ == 'ConfigDict'
    assert all(type(g) is dict for g in merged.optimizer.param_groups)
    from mmengine.optim import LinearLR
    lrs = [g['lr'] for g in merged.optimizer.param_groups]
    LinearLR(merged, start_factor=0.5, end=4, by_epoch=False)
    assert [g['lr'] for g in merged.optimizer.param_groups] == \
        [lr * 0.5 for lr in lrs]


def test_one_group_per_option_set_steps_and_resumes_the_same():
    """Two steps with the merged groups equal two with one group per
    parameter, bit for bit; an optimizer state saved with one group per
    parameter (a checkpoint of mmengine's constructor) resumes the merged
    optimizer, which then steps as the per-parameter one goes on to."""
    path = osp.join(ROOT, 'configs', 'deit', 'deit-tiny-lape_4xb256_in1k.py')
    model, merged = tiny_model(path)
    twin, per_param = _per_parameter_twin(path, model)
    gen = torch.Generator().manual_seed(0)

    def step(pairs):
        grads = [
            torch.randn(p.shape, generator=gen)
            for p in pairs[0][0].parameters()
        ]
        for net, optim in pairs:
            for p, g in zip(net.parameters(), grads):
                p.grad = g.clone()
            optim.step()

    for _ in range(2):
        step([(model, merged), (twin, per_param)])
    for (name, a), b in zip(model.named_parameters(), twin.parameters()):
        assert torch.equal(a, b), name
    saved = copy.deepcopy(per_param.state_dict())
    assert len(saved['param_groups']) == len(list(model.parameters()))
    resumed_model, resumed = tiny_model(path)
    resumed_model.load_state_dict(model.state_dict())
    resumed.load_state_dict(saved)
    assert len(resumed.optimizer.param_groups) == 3
    for a, b in zip(resumed.optimizer.param_groups,
                    merged.optimizer.param_groups):
        assert _options(a) == _options(b)
    step([(resumed_model, resumed), (twin, per_param), (model, merged)])
    for (name, a), b, c in zip(resumed_model.named_parameters(),
                               twin.parameters(), model.parameters()):
        assert torch.equal(a, b) and torch.equal(a, c), name
    # the merged state saves and loads as it is
    resumed.load_state_dict(copy.deepcopy(merged.state_dict()))
    # a state of another model is refused, as PyTorch refuses it
    del saved['param_groups'][-1]
    with pytest.raises(ValueError, match='parameter group'):
        tiny_model(path)[1].load_state_dict(saved)


def test_a_shared_parameter_is_refused_not_stepped_twice():
    """mmengine's constructor puts a parameter that two modules share into
    two groups, which PyTorch refuses; joined into one group it would be
    stepped twice, so the constructor refuses it too, and with
    bypass_duplicate skips its second name as mmengine does."""
    import torch.nn as nn

    class Tied(nn.Module):

        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)
            self.b.weight = self.a.weight

    def build(bypass):
        return build_optim_wrapper(
            Tied(),
            dict(
                constructor='LaPEOptimWrapperConstructor',
                optimizer=dict(type='SGD', lr=1., weight_decay=0.1),
                paramwise_cfg=dict(
                    bias_decay_mult=0., bypass_duplicate=bypass)))

    with pytest.raises(ValueError, match='more than one parameter group'):
        build(False)
    groups = build(True).optimizer.param_groups
    assert [len(g['params']) for g in groups] == [1, 2]  # weight; 2 biases


def test_a_state_whose_schedules_would_not_line_up_is_refused():
    """mmengine's schedulers resume their per-group values by position; a
    state saved with one group per parameter whose learning rates differ
    from the joined groups' at some position is refused with the way to
    resume it, not resumed with the wrong rates."""
    path = osp.join(ROOT, 'configs', 'deit', 'deit-tiny-lape_4xb256_in1k.py')
    cfg = load(path)
    cfg.optim_wrapper.paramwise_cfg.custom_keys[
        'patch_embed.proj.bias'] = dict(lr_mult=0.1)
    model, merged = tiny_model(path, cfg)
    lrs = [g['lr'] for g in merged.optimizer.param_groups]
    assert lrs[2] == pytest.approx(0.1 * lrs[0])  # the bias's own group
    twin, per_param = _per_parameter_twin(path, model, cfg)
    for p in twin.parameters():
        p.grad = torch.ones_like(p)
    per_param.step()
    with pytest.raises(ValueError, match='cannot resume this optimizer') as e:
        merged.load_state_dict(copy.deepcopy(per_param.state_dict()))
    assert 'optim_wrapper.constructor=DefaultOptimWrapperConstructor' in \
        str(e.value)
