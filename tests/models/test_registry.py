"""mmlape's models resolve from every OpenMMLab scope."""
import importlib

import pytest
from mmengine.registry import DefaultScope

import mmlape
from mmlape.models import LaPEViT


@pytest.mark.parametrize('scope', ['mmpretrain', 'mmdet', 'mmseg', 'mmlape'])
@pytest.mark.parametrize('name', ['LaPEViT', 'mmlape.LaPEViT'])
def test_backbone_builds_under_every_scope(scope, name):
    registry = importlib.import_module(f'{scope}.registry').MODELS
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(
            dict(
                type=name,
                arch='test-tiny',
                img_size=32,
                patch_size=8,
                pe_join=dict(type='LaPE')))
    assert isinstance(model, LaPEViT)
    assert model.pe_join.name == 'LaPE'


def test_version():
    assert mmlape.__version__.count('.') == 2
    assert mmlape.version_info[0] >= 0
