"""Starting values of every backbone after the runner's ``init_weights()``.

Each model is built from its config under configs/ (the real sizes), as the
runner builds it, and ``model.init_weights()`` is called, on both init
paths: from scratch (no ``init_cfg``) and ``init_cfg=Pretrained`` from an
mmlape classifier checkpoint written by the test. Each parameter group is
checked against the initialisation of the code the recipe follows:

- the ViT (DeiT, Segmenter, the ViT inside ViT-Adapter): DeiT's, linear
  layers truncated normal (std 0.02) with zero bias, norms ones and zeros,
  PE and class token std 0.02, the patch projection PyTorch's default;
  every tensor equal to the checkpoint's on the pretrained path;
- ViT-Adapter's own modules, on both paths: the official code's
  ``_init_weights`` (linear std 0.02, convolutions normal with std
  ``sqrt(2 / fan_out)``, norms ones and zeros, ``level_embed`` standard
  normal) and, last, ``MSDeformAttn._reset_parameters``.
"""
import copy
import functools
import importlib
import math
import os.path as osp

import pytest
import torch
import torch.nn as nn
from conftest import ROOT, save_backbone_checkpoint
from mmengine.config import Config
from mmengine.registry import DefaultScope

from mmlape.models import LaPEViT, resize_pos_embed
from mmlape.models.layers.adapter import DeformAttn

_NORMS = (nn.LayerNorm, nn.modules.batchnorm._BatchNorm, nn.GroupNorm)
ADAPTER_OWN = ('spm', 'interactions', 'up', 'norm1', 'norm2', 'norm3', 'norm4')


# ----------------------------------------------------------------------
# statistics
def assert_std(t, want, name, rel=None):
    """Sample std of ``t`` within ``rel`` of ``want`` (default: five
    standard errors of a normal sample std, at least 2 %), mean near 0."""
    t = t.detach().flatten()
    rel = rel or max(0.02, 5 / math.sqrt(2 * t.numel()))
    std = t.std().item()
    assert abs(std - want) <= rel * want, (
        f'{name}: std {std:.4f}, expected {want:.4f} (+-{rel:.0%})')
    assert abs(t.mean().item()) <= 6 * want / math.sqrt(t.numel()), (
        f'{name}: mean {t.mean().item():.4g}')


def assert_uniform(t, bound, name):
    """``U(-bound, bound)``: inside the bound, reaching close to it, with
    the std of a uniform law."""
    t = t.detach().flatten()
    assert t.abs().max() <= bound * (1 + 1e-6), f'{name}: outside +-{bound}'
    assert t.abs().max() >= 0.9 * bound, f'{name}: far inside +-{bound}'
    assert_std(t, bound / math.sqrt(3), name,
               max(0.03, 4 / math.sqrt(t.numel())))


def assert_const(t, value, name):
    t = t.detach()
    assert torch.equal(t, torch.full_like(
        t, value)), (f'{name}: not all {value} (min {t.min()}, max {t.max()})')


def offset_grid(heads, levels, points):
    """The official sampling-offset bias: head ``h`` points along the
    angle ``2 pi h / heads``, scaled so that the larger coordinate is 1,
    times ``point + 1``; the same for every level."""
    grid = torch.zeros(heads, levels, points, 2)
    for h in range(heads):
        angle = 2 * math.pi * h / heads
        d = torch.tensor([math.cos(angle), math.sin(angle)])
        d = d / d.abs().max()
        for p in range(points):
            grid[h, :, p] = d * (p + 1)
    return grid.flatten()


def deit_checks(vit, layer_scale=0.):
    """DeiT's starting values of a ViT built from scratch."""
    linear_w = []
    for name, m in vit.named_modules():
        if name.split('.')[0] in ADAPTER_OWN:
            continue  # ViT-Adapter's own modules: adapter_checks
        if isinstance(m, nn.Linear):
            assert_std(m.weight, 0.02, name, rel=0.06)
            assert m.weight.abs().max() < 0.2, name  # no outliers
            linear_w.append(m.weight.flatten())
            assert_const(m.bias, 0., f'{name}.bias')
        elif isinstance(m, nn.LayerNorm):
            assert_const(m.weight, 1., f'{name}.weight')
            assert_const(m.bias, 0., f'{name}.bias')
    assert linear_w, 'no linear layer found'
    assert_std(torch.cat(linear_w), 0.02, 'all ViT linear weights', 0.01)
    if isinstance(vit.pos_embed, nn.Parameter):
        assert_std(vit.pos_embed, 0.02, 'pos_embed')
    if vit.with_cls_token:
        assert_std(vit.cls_token, 0.02, 'cls_token', rel=0.25)
    # the patch projection keeps PyTorch's default (as in DeiT)
    proj = vit.patch_embed.proj
    fan_in = proj.weight[0].numel()
    assert_uniform(proj.weight, 1 / math.sqrt(fan_in), 'patch_embed.proj')
    assert proj.bias.abs().max() <= 1 / math.sqrt(fan_in)
    for i, blk in enumerate(vit.blocks):
        if layer_scale:
            assert_const(blk.gamma1, layer_scale, f'blocks.{i}.gamma1')
            assert_const(blk.gamma2, layer_scale, f'blocks.{i}.gamma2')
        else:
            assert not hasattr(blk, 'gamma1')


def adapter_checks(model):
    """ViT-Adapter's own modules start as in the official code."""
    deform = [(n, m) for n, m in model.named_modules()
              if isinstance(m, DeformAttn)]
    assert len(deform) == 2 * len(model.interactions) + 2
    value_w = []
    for name, m in deform:
        assert_const(m.sampling_offsets.weight, 0., f'{name} offset weight')
        torch.testing.assert_close(
            m.sampling_offsets.bias.detach(),
            offset_grid(m.num_heads, m.num_levels, m.num_points),
            msg=f'{name}: offset bias is not the direction grid')
        assert_const(m.attention_weights.weight, 0., f'{name} attn weight')
        assert_const(m.attention_weights.bias, 0., f'{name} attn bias')
        for proj in (m.value_proj, m.output_proj):
            fan_in, fan_out = proj.in_features, proj.out_features
            bound = math.sqrt(6 / (fan_in + fan_out))  # xavier uniform
            assert_uniform(proj.weight, bound, f'{name} projection')
            assert_const(proj.bias, 0., f'{name} projection bias')
        value_w.append(m.value_proj.weight.flatten())
    dims = model.embed_dims
    assert_std(
        torch.cat(value_w),
        math.sqrt(6 / (2 * dims)) / math.sqrt(3), 'all value_proj weights',
        0.01)

    deform_linear = {
        id(lin)
        for _, m in deform
        for lin in m.modules() if isinstance(lin, nn.Linear)
    }
    ffn_w, dwconv_w = [], []
    own = [('spm', model.spm), ('interactions', model.interactions),
           ('up', model.up)] + [(f'norm{i}', getattr(model, f'norm{i}'))
                                for i in range(1, 5)]
    for prefix, module in own:
        for name, m in module.named_modules(prefix=prefix):
            if isinstance(m, nn.Linear) and id(m) not in deform_linear:
                assert_std(m.weight, 0.02, name, rel=0.08)
                assert_const(m.bias, 0., f'{name}.bias')
                ffn_w.append(m.weight.flatten())
            elif isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                k = m.kernel_size[0] * m.kernel_size[1]
                std = math.sqrt(2 / (k * m.out_channels // m.groups))
                assert_std(m.weight, std, name)
                if m.groups > 1:
                    dwconv_w.append(m.weight.flatten() / std)
                if m.bias is not None:
                    assert_const(m.bias, 0., f'{name}.bias')
            elif isinstance(m, _NORMS):
                assert_const(m.weight, 1., f'{name}.weight')
                assert_const(m.bias, 0., f'{name}.bias')
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    assert_const(m.running_mean, 0., f'{name} mean')
                    assert_const(m.running_var, 1., f'{name} var')
    assert_std(torch.cat(ffn_w), 0.02, 'all ConvFFN linear weights', 0.02)
    assert_std(torch.cat(dwconv_w), 1., 'all depth-wise conv weights')
    for i, layer in enumerate(model.interactions):
        assert_const(layer.injector.gamma, 0., f'interactions.{i} gamma')
    assert_std(model.level_embed, 1., 'level_embed', rel=0.15)


# ----------------------------------------------------------------------
# building as the runner does
@functools.lru_cache()
def parse(config):
    return Config.fromfile(osp.join(ROOT, 'configs', config))


def build_backbone(config, scope, init_cfg):
    """The backbone of the config's model, its ``init_cfg`` replaced, after
    the ``init_weights()`` the runner calls.

    A classifier's own ``init_cfg`` (DeiT's generic pass over linear
    layers and norms) runs first, as in the runner, so the whole
    classifier is built. Detectors and segmentors have none (asserted):
    their ``init_weights()`` reaches the backbone's unchanged, so the
    backbone alone is built, which is much faster.
    """
    cfg = copy.deepcopy(parse(config))
    cfg.model.backbone.init_cfg = init_cfg
    importlib.import_module(f'{scope}.utils').register_all_modules(False)
    registry = importlib.import_module(f'{scope}.registry').MODELS
    whole = scope == 'mmpretrain'
    if not whole:
        assert not cfg.model.get('init_cfg'), config
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(cfg.model if whole else cfg.model.backbone)
    model.init_weights()
    return model.backbone if whole else model


def classifier_checkpoint(tmp_path, join, **kwargs):
    """An mmlape ImageNet classifier's backbone with distinct values (as
    ``configs/deit`` trains it), saved with ``backbone.`` keys."""
    kwargs.setdefault('with_cls_token', join not in ('PVG', 'MPVG'))
    kwargs.setdefault(
        'out_type', 'cls_token' if kwargs['with_cls_token'] else 'avg_featmap')
    src = LaPEViT('deit-tiny', img_size=224, pe_join=join, **kwargs)
    with torch.no_grad():
        for p in src.parameters():
            p.normal_(0.5, 0.3)
    path = tmp_path / 'pretrained.pth'
    save_backbone_checkpoint(
        src,
        path, {'head.layers.head.weight': torch.randn(10, src.embed_dims)},
        meta={})
    pretrained = dict(
        type='Pretrained', checkpoint=str(path), prefix='backbone.')
    return src.state_dict(), pretrained


def assert_loaded(model, src, skip=()):
    """Every tensor of the checkpoint the model has equals the
    checkpoint's (the PE fitted to the model's grid)."""
    own = model.state_dict()
    assert src.keys() - own.keys() <= {
        'cls_token', 'norm.weight', 'norm.bias', 'pe_join.last_norm.weight',
        'pe_join.last_norm.bias'
    }
    for key, value in src.items():
        if key not in own or key in skip:
            continue
        if key == 'pos_embed':
            extra = 1 if 'cls_token' in src else 0
            keep = model.num_extra_tokens
            value = value[:, extra - keep:] if extra > keep else value
            value = resize_pos_embed(
                value, (14, 14), model.grid_size, num_extra_tokens=keep)
            torch.testing.assert_close(own[key], value, msg=key)
        else:
            assert torch.equal(own[key], value), key


# ----------------------------------------------------------------------
SCRATCH, CKPT = False, True


@pytest.mark.parametrize(
    'config,join,pretrained', [
        ('deit-tiny_4xb256_in1k.py', 'Default', SCRATCH),
        ('deit-tiny-mpvg_4xb256_in1k.py', 'MPVG', SCRATCH),
        ('deit-tiny-lape_4xb256_in1k.py', 'LaPE', CKPT),
    ],
    ids=['Default-scratch', 'MPVG-scratch', 'LaPE-ckpt'])
def test_deit_backbone_init(config, join, pretrained, tmp_path):
    src, init = (
        classifier_checkpoint(tmp_path, join) if pretrained else (None, None))
    vit = build_backbone(f'deit/{config}', 'mmpretrain', init)
    assert vit.pe_join.name == join
    if pretrained:
        assert_loaded(vit, src)
        return
    deit_checks(vit)
    if join == 'MPVG':
        assert not vit.with_cls_token
        assert_const(vit.pe_join.last_norm.weight, 1., 'last_norm')


@pytest.mark.parametrize(
    'join,pretrained', [('', SCRATCH), ('-mpvg', CKPT)],
    ids=['Default-scratch', 'MPVG-ckpt'])
def test_segmenter_backbone_init(join, pretrained, tmp_path):
    config = f'segmenter/segmenter_vit-tiny{join}_mask_8xb1-160k_' \
             'ade20k-512x512.py'
    name = 'MPVG' if join else 'Default'
    src, init = (
        classifier_checkpoint(tmp_path, name) if pretrained else (None, None))
    vit = build_backbone(config, 'mmseg', init)
    assert vit.grid_size == (32, 32) and vit.final_norm
    assert vit.pe_join.name == name
    if pretrained:  # MPVG's last norm included: Segmenter uses it
        assert_loaded(vit, src)
        assert 'pe_join.last_norm.weight' in vit.state_dict()
        return
    deit_checks(vit)


MASK_RCNN = 'mask-rcnn_vit-adapter-tiny{}_fpn_3x_coco.py'
UPERNET = 'upernet_vit-adapter-tiny{}_8xb2-160k_ade20k-512x512.py'


@pytest.mark.parametrize(
    'config,scope,join,pretrained', [
        (MASK_RCNN.format(''), 'mmdet', 'Default', SCRATCH),
        (MASK_RCNN.format(''), 'mmdet', 'Default', CKPT),
        (UPERNET.format('-lape'), 'mmseg', 'LaPE', SCRATCH),
        (MASK_RCNN.format('-mpvg'), 'mmdet', 'MPVG', CKPT),
    ],
    ids=['Default-scratch', 'Default-ckpt', 'LaPE-scratch', 'MPVG-ckpt'])
def test_vit_adapter_init(config, scope, join, pretrained, tmp_path):
    src, init = (
        classifier_checkpoint(tmp_path, join) if pretrained else (None, None))
    backbone = build_backbone(f'vit_adapter/{config}', scope, init)
    assert backbone.pe_join.name == join
    adapter_checks(backbone)
    if pretrained:
        assert_loaded(backbone, src)
    else:
        deit_checks(backbone, layer_scale=1.)


def test_generic_init_cfg_comes_before_the_deformable_reset():
    """A generic init_cfg over every nn.Linear runs first; the deformable
    attention's own reset runs last and survives it."""
    from mmlape.models import LaPEViTAdapter
    model = LaPEViTAdapter(
        'test-tiny',
        img_size=64,
        init_cfg=dict(type='Constant', layer='Linear', val=0.5, bias=0.5))
    model.init_weights()
    assert_const(model.blocks[0].attn.qkv.weight, 0.5, 'qkv')
    attn = model.interactions[0].injector.attn
    assert_const(attn.sampling_offsets.weight, 0., 'offsets')
    torch.testing.assert_close(attn.sampling_offsets.bias.detach(),
                               offset_grid(2, 3, 4))
    assert attn.value_proj.weight.std() > 0.05  # xavier, not 0.5 constants
    assert_const(attn.value_proj.bias, 0., 'value_proj.bias')
