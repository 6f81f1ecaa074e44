"""The recorded-model check, for every backbone and each model family built
on LaPEViT: a checkpoint whose recorded config (``meta['cfg']``) differs
from the run's in what the weights cannot show (the join and its options,
the PE type, the type) is refused by
:func:`~mmlape.apis.check_checkpoint_fits` with one line that names the
option and both values; one that differs in an option the weights show
(their keys and shapes) is refused by the strict load, one line naming the
keys; the same config passes.
"""
import os.path as osp

import pytest
import torch
from conftest import IMG, ROOT
from mmengine.config import Config

import mmlape  # noqa: F401  (registers the backbones)
from mmlape.apis import check_checkpoint_fits
from mmlape.models.checkpoint.recorded import model_differences
from mmlape.registry import MODELS
from mmlape.utils.errors import CheckpointError


def _segmenter_backbone() -> dict:
    """Segmenter's encoder as its base config states it (no init)."""
    cfg = Config.fromfile(
        osp.join(ROOT, 'configs/_base_/models/segmenter_vit-tiny.py'))
    backbone = cfg.segmenter_vit_tiny.to_dict()
    for key in ('_delete_', 'init_cfg', 'drop_path_rate'):
        backbone.pop(key)
    return backbone


_T2T = dict(type='T2T', token_dims=64, attention='performer')

# (backbone config, an option its weights show, the value in this run's
# config)
CASES = {
    'deit': (dict(type='LaPEViT', arch='test-tiny',
                  img_size=IMG), 'patch_size', 8),
    'swin-abs-pe': (dict(
        type='LaPESwin',
        arch='test-tiny',
        img_size=IMG,
        window_size=4,
        use_abs_pos_embed=True), 'use_abs_pos_embed', False),
    'swin-window': (dict(type='LaPESwin', arch='test-tiny',
                         img_size=IMG), 'window_size', 4),
    'vit-adapter':
    (dict(type='LaPEViTAdapter', arch='test-tiny',
          img_size=IMG), 'deform_num_heads', 4),
    'segmenter': (_segmenter_backbone(), 'patch_size', 8),
    't2t-vit':
    (dict(type='LaPEViT', arch='t2t-vit-7',
          img_size=IMG), 'tokenizer', dict(_T2T, attention='transformer')),
    'ceit': (dict(type='LaPEViT', arch='ceit-tiny',
                  img_size=IMG), 'ffn', dict(type='LeFF', kernel_size=5)),
    'cct': (dict(type='LaPEViT', arch='cct-7/3x1'), 'tokenizer',
            dict(type='Conv', num_layers=2, kernel_size=3)),
    'vit-lite': (dict(type='LaPEViT', arch='vit-lite-7/4'), 'qkv_bias', True),
}


def _save(tmp_path, backbone: dict) -> tuple:
    """The backbone built from ``backbone`` and a checkpoint of it that
    records ``backbone`` as mmengine records a run's config."""
    model = MODELS.build(dict(backbone))
    path = str(tmp_path / 'recorded.pth')
    text = Config(dict(model=dict(backbone=backbone))).pretty_text
    torch.save({
        'state_dict': model.state_dict(),
        'meta': dict(cfg=text)
    }, path)
    return model, path


def _run_cfg(backbone: dict) -> Config:
    return Config(dict(model=dict(backbone=backbone)))


def _build(backbone: dict) -> torch.nn.Module:
    return MODELS.build(dict(backbone))


@pytest.mark.parametrize('case', sorted(CASES))
def test_another_join_is_refused_naming_both(case, tmp_path):
    """``hierarchical`` changes no key: only the recorded config shows
    it."""
    backbone = dict(CASES[case][0], pe_join=dict(type='LaPE'))
    model, path = _save(tmp_path, backbone)
    state = check_checkpoint_fits(model, path, '--resume', _run_cfg(backbone))
    assert state.keys() == model.state_dict().keys()

    other = dict(backbone, pe_join=dict(type='LaPE', hierarchical=False))
    theirs = "dict(type='LaPE', hierarchical=True)"
    ours = "dict(type='LaPE', hierarchical=False)"
    assert model_differences(backbone, other) == [('pe_join', theirs, ours)]
    for current in (_build(other), _run_cfg(other)):  # built, or the config
        run = (current,
               None) if isinstance(current, torch.nn.Module) else (model,
                                                                   current)
        with pytest.raises(CheckpointError) as info:
            check_checkpoint_fits(run[0], path, '--resume', run[1])
        message = str(info.value)
        assert '\n' not in message
        assert message.startswith(
            f'--resume: "{path}" was saved from another model: '
            f'model.backbone.pe_join is {theirs} there but {ours} in this '
            f'config. ')


@pytest.mark.parametrize('case', sorted(CASES))
def test_another_layout_is_refused_by_the_strict_load(case, tmp_path):
    backbone, option, value = CASES[case]
    model, path = _save(tmp_path, backbone)
    other = dict(backbone, **{option: value})
    assert model_differences(backbone, other) == []  # the weights show it
    with pytest.raises(CheckpointError) as info:
        check_checkpoint_fits(_build(other), path, '--resume', _run_cfg(other))
    message = str(info.value)
    assert '\n' not in message
    assert message.startswith(
        f'--resume: "{path}" is a checkpoint of another model: ')


def test_another_pe_type_with_the_same_keys_is_refused(tmp_path):
    backbone = dict(CASES['deit'][0], pe_type='sincos1d')
    model, path = _save(tmp_path, backbone)
    other = dict(backbone, pe_type='sincos2d')
    with pytest.raises(CheckpointError) as info:
        check_checkpoint_fits(model, path, 'checkpoint', _run_cfg(other))
    assert ("model.backbone.pe_type is 'sincos1d' there but 'sincos2d' in "
            'this config') in str(info.value)


def test_another_backbone_type_names_only_the_type(tmp_path):
    vit = CASES['deit'][0]
    swin = CASES['swin-window'][0]
    assert model_differences(vit,
                             swin) == [('type', "'LaPEViT'", "'LaPESwin'")]


@pytest.mark.parametrize('ape', [None, 'learnable', 'sincos2d'])
def test_rotary_checkpoints_fit_their_model_and_no_other_absolute_pe(
        ape, tmp_path):
    """A rotary model fits its own checkpoint, built or as a config (the
    backbone's ``pe_type`` is the rotary one, not its join's); an absolute
    PE beside it that the weights cannot show (none, or a fixed sin-cos
    one) is compared by the recorded config."""
    backbone = dict(
        CASES['deit'][0],
        pe_type='rope_mixed',
        ape_type=ape,
        pe_join='LaPE' if ape else 'Default')
    model, path = _save(tmp_path, backbone)
    for current in (_build(backbone), _run_cfg(backbone)):
        assert model_differences(
            backbone, current if isinstance(current, torch.nn.Module) else
            current.model.backbone) == []
    check_checkpoint_fits(model, path, '--resume', _run_cfg(backbone))
    other = dict(backbone, ape_type='sincos2d' if ape != 'sincos2d' else None)
    if other['ape_type'] is None:
        other['pe_join'] = 'Default'
    assert [d[0] for d in model_differences(backbone, other)][:1] == \
        ['ape_type']
    if ape != 'learnable':  # the same keys: only the config tells
        with pytest.raises(CheckpointError, match='ape_type is'):
            check_checkpoint_fits(model, path, 'checkpoint', _run_cfg(other))
