"""The recorded-model check covers every backbone's structural options.

For each backbone (and each model family built on LaPEViT), a checkpoint
whose recorded config (``meta['cfg']``) differs from the run's config in one
option of the class's ``STRUCTURAL_OPTIONS`` is refused by
:func:`~mmlape.apis.check_checkpoint_fits` with one line that names the
option and both values; the same config passes.
"""
import os.path as osp

import pytest
import torch
from conftest import IMG, ROOT
from mmengine.config import Config

import mmlape  # noqa: F401  (registers the backbones)
from mmlape.apis import backbone_differences, check_checkpoint_fits
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

# (backbone config, option, value in this run's config, the recorded value
# and this run's value as the message shows them)
CASES = {
    'deit': (dict(type='LaPEViT', arch='test-tiny',
                  img_size=IMG), 'patch_size', 8, '16', '8'),
    'swin-abs-pe':
    (dict(type='LaPESwin', arch='test-tiny', img_size=IMG,
          window_size=4), 'use_abs_pos_embed', False, 'True', 'False'),
    'swin-window': (dict(type='LaPESwin', arch='test-tiny',
                         img_size=IMG), 'window_size', 4, '7', '4'),
    'vit-adapter':
    (dict(type='LaPEViTAdapter', arch='test-tiny',
          img_size=IMG), 'deform_num_heads', 4, '2', '4'),
    'segmenter':
    (_segmenter_backbone(), 'out_type', 'raw', "'featmap'", "'raw'"),
    't2t-vit': (dict(type='LaPEViT', arch='t2t-vit-7',
                     img_size=IMG), 'tokenizer',
                dict(_T2T, attention='transformer'),
                "dict(type='T2T', token_dims=64, attention='performer')",
                "dict(type='T2T', token_dims=64, attention='transformer')"),
    'ceit': (dict(type='LaPEViT', arch='ceit-tiny', img_size=IMG), 'ffn',
             dict(type='LeFF',
                  kernel_size=5), "dict(type='LeFF', kernel_size=3)",
             "dict(type='LeFF', kernel_size=5)"),
    'cct': (dict(type='LaPEViT', arch='cct-7/3x1'), 'tokenizer',
            dict(type='Conv', num_layers=2, kernel_size=3),
            "dict(type='Conv', num_layers=1, kernel_size=3)",
            "dict(type='Conv', num_layers=2, kernel_size=3)"),
    'vit-lite': (dict(type='LaPEViT',
                      arch='vit-lite-7/4'), 'qkv_bias', True, 'False', 'True'),
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


def test_every_backbone_declares_its_structural_options():
    """Each registered mmlape backbone declares options that its
    constructor takes (through its bases), the arch and the join among
    them."""
    import inspect

    from mmlape.models.backbones.base import LaPEBackbone
    backbones = [
        cls for cls in MODELS.module_dict.values()
        if isinstance(cls, type) and issubclass(cls, LaPEBackbone)
    ]
    assert len(backbones) >= 3
    for cls in backbones:
        options = cls.STRUCTURAL_OPTIONS
        assert {'arch', 'img_size', 'pe_join'} <= set(options), cls
        taken = set()
        for klass in cls.__mro__:
            if '__init__' in vars(klass):
                taken |= set(inspect.signature(klass.__init__).parameters)
        assert set(options) <= taken, (cls, set(options) - taken)
    assert {'use_abs_pos_embed',
            'window_size'} <= set(MODELS.get('LaPESwin').STRUCTURAL_OPTIONS)


@pytest.mark.parametrize('case', sorted(CASES))
def test_one_structural_option_apart_is_refused(case, tmp_path):
    backbone, option, value, theirs, ours = CASES[case]
    model, path = _save(tmp_path, backbone)
    state = check_checkpoint_fits(model, path, '--resume', _run_cfg(backbone))
    assert state.keys() == model.state_dict().keys()

    other = dict(backbone, **{option: value})
    assert backbone_differences(backbone, other) == [(option, theirs, ours)]
    with pytest.raises(CheckpointError) as info:
        check_checkpoint_fits(model, path, '--resume', _run_cfg(other))
    message = str(info.value)
    assert '\n' not in message
    assert message.startswith(
        f'--resume: "{path}" was saved from another model: '
        f'model.backbone.{option} is {theirs} there but {ours} in this '
        f'config. ')


def test_another_backbone_type_names_only_the_type(tmp_path):
    vit = CASES['deit'][0]
    swin = CASES['swin-window'][0]
    assert backbone_differences(vit,
                                swin) == [('type', "'LaPEViT'", "'LaPESwin'")]


def test_arch_names_compare_in_any_case():
    """The constructors read an arch name in any case (``'DeiT-Tiny'`` is
    ``'deit-tiny'``), so the recorded-model check does too; another arch is
    still named."""
    recorded = dict(type='LaPEViT', arch='DeiT-Tiny', patch_size=16)
    assert backbone_differences(recorded, dict(recorded,
                                               arch='deit-tiny')) == []
    assert backbone_differences(recorded, dict(recorded, arch='deit-small'))
