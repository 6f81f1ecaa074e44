"""mmpretrain's model APIs know mmlape's configs (issue 21, req. 5):
``list_models``, ``get_model`` and ``inference_model`` by name, in either
import order, once :func:`mmlape.hosts.install_mmpretrain_hub` (or
:func:`mmlape.hosts.apply`, as the tools call it) has run, without
importing mmpretrain itself."""
import sys
import textwrap

import numpy as np
import pytest
import torch
import yaml
from conftest import ROOT, run
from mmengine.config import Config

from mmlape.hosts import hub

DEMO = 'deit-demo-lape_pos-shapes'  # 32x32, 4 classes: fast to build
#: mmlape names that are also mmpretrain's own models.
SHARED = ('deit-tiny_4xb256_in1k', 'deit-small_4xb256_in1k',
          'swin-tiny_16xb64_in1k')


def index_entries():
    with open(f'{ROOT}/model-index.yml') as f:
        imports = yaml.safe_load(f)['Import']
    out = []
    for path in imports:
        with open(f'{ROOT}/{path}') as f:
            out.extend(yaml.safe_load(f)['Models'])
    return out


def fake_hub():
    """mmpretrain's ModelHub with models of its own (the shared names), and
    the indexes registered through its public ``register_model_index``."""
    from mmpretrain.apis.model import ModelHub

    class FakeHub(ModelHub):
        _models_dict = {name: f'mmpretrain {name}' for name in SHARED}
        indexes = []

        @classmethod
        def register_model_index(cls, model_index_path, config_prefix=None):
            cls.indexes.append(model_index_path)
            super().register_model_index(model_index_path, config_prefix)

    return FakeHub


pytestmark = pytest.mark.usefixtures('fresh_default_scope')


def test_registration_keeps_mmpretrain_names_and_states_tasks():
    FakeHub = fake_hub()
    names = hub.register_mmpretrain_models(FakeHub)
    assert len(FakeHub.indexes) == 1  # one index, through the public call
    entries = index_entries()
    classifiers = {
        m['Name']
        for m in entries if m['Metadata']['Default Scope'] == 'mmpretrain'
    }
    dense = {m['Name'] for m in entries} - classifiers
    assert dense and all(
        n.startswith(('mask-rcnn', 'upernet', 'segmenter')) for n in dense)
    assert set(names) == classifiers
    for name in SHARED:  # the plain name stays mmpretrain's
        assert FakeHub._models_dict[name] == f'mmpretrain {name}'
        assert names[name] == f'mmlape::{name}'
    lape = FakeHub._models_dict['deit-tiny-lape_4xb256_in1k']
    # the same entry under the prefix (the public call registers one record
    # per name): every field equal but the name
    prefixed = FakeHub._models_dict['mmlape::deit-tiny-lape_4xb256_in1k']
    assert prefixed.name == 'mmlape::deit-tiny-lape_4xb256_in1k'
    assert hub.entry_record(prefixed) == dict(
        hub.entry_record(lape), Name=prefixed.name)
    # every entry as mmlape's index builds it, but the name
    built = {entry.name: entry for entry in hub.mmpretrain_entries()}
    for name, key in names.items():
        want = hub.entry_record(built[name])
        want.pop('In Collection')
        for got in {key, f'mmlape::{name.lower()}'}:
            assert hub.entry_record(FakeHub._models_dict[got]) == dict(
                want, Name=FakeHub._models_dict[got].name), got
    assert lape.config.endswith('configs/deit/deit-tiny-lape_4xb256_in1k.py')
    assert lape.config.startswith('/')
    # a published config keeps its results; one no paper reports states its
    # task (what inference_model reads) and no metrics
    assert lape.results[0].metrics == {'Top 1 Accuracy': 72.94}
    demo = FakeHub._models_dict[DEMO]
    assert [r.task for r in demo.results] == ['Image Classification']
    assert demo.results[0].metrics == {}
    for name in dense:
        assert name not in FakeHub._models_dict
        assert f'mmlape::{name}' not in FakeHub._models_dict
    # idempotent
    before = dict(FakeHub._models_dict)
    assert hub.register_mmpretrain_models(FakeHub) is names
    assert FakeHub._models_dict == before
    assert len(FakeHub.indexes) == 1


def test_mmpretrain_apis_by_name():
    hub.install_mmpretrain_hub()  # as an entry point does, first
    from mmpretrain import get_model, inference_model, list_models
    assert DEMO in list_models('deit-demo')
    assert 'deit-tiny-mpvg_4xb256_in1k' in list_models(
        'deit-tiny', task='Image Classification')
    assert 'mmlape::deit-tiny_4xb256_in1k' in list_models('mmlape::deit')
    assert not list_models('mask-rcnn_vit-adapter')  # mmdet's
    torch.manual_seed(0)
    model = get_model(DEMO)
    assert type(model.backbone).__name__ == 'LaPEViT'
    assert model.backbone.pe_join.name == 'LaPE'
    assert model._metainfo.name == DEMO
    img = np.random.RandomState(0).randint(0, 255, (32, 32, 3), np.uint8)
    result = inference_model(model, img)
    assert result['pred_scores'].shape == (model.head.num_classes, )
    assert 0 <= result['pred_label'] < model.head.num_classes
    # by name, straight away
    result = inference_model(DEMO, img)
    assert result['pred_scores'].shape == (model.head.num_classes, )
    # from the config's path or Config: the same record, so the same answer
    path = f'{ROOT}/configs/demo/{DEMO}.py'
    for config in (path, Config.fromfile(path)):
        model = get_model(config)
        assert model._metainfo.name == DEMO
        result = inference_model(model, img)
        assert result['pred_scores'].shape == (model.head.num_classes, )
    # the shared names: mmpretrain's model, and mmlape's under the prefix
    ours = get_model('mmlape::deit-tiny_4xb256_in1k')
    assert type(ours.backbone).__name__ == 'LaPEViT'
    theirs = get_model('deit-tiny_4xb256_in1k')
    assert type(theirs.backbone).__name__ == 'VisionTransformer'
    # through mmpretrain's public API alone: its private registration of its
    # own index is mmpretrain's as it was
    from mmpretrain.apis.model import ModelHub
    own = ModelHub.__dict__['_register_mmpretrain_models'].__func__
    assert own.__module__ == 'mmpretrain.apis.model', own.__module__


ORDER = textwrap.dedent('''
    import sys
    first = sys.argv[1]
    if first == 'mmlape':
        import mmlape, mmlape.hosts
        mmlape.hosts.apply()
        assert 'mmpretrain' not in sys.modules, 'mmlape imported mmpretrain'
        import mmpretrain
    else:
        import mmpretrain
        # mmpretrain's own index read before mmlape is imported
        assert 'resnet50_8xb32_in1k' in mmpretrain.list_models('resnet50')
        import mmlape, mmlape.hosts
        mmlape.hosts.apply()
    from mmpretrain import get_model, list_models
    names = list_models('deit-tiny')
    assert 'deit-tiny-lape_4xb256_in1k' in names, names
    assert 'resnet50_8xb32_in1k' in list_models('resnet50')
    model = get_model('deit-demo-mpvg_pos-shapes')
    assert model.backbone.pe_join.name == 'MPVG'
    # a config path: the entry's record is attached (inference_model's task)
    model = mmpretrain.get_model('configs/demo/deit-demo-mpvg_pos-shapes.py')
    assert [r.task for r in model._metainfo.results] == [
        'Image Classification']
    print('ok', first)
''')


@pytest.mark.slow
@pytest.mark.parametrize('first', ['mmlape', 'mmpretrain'])
def test_either_import_order(first):
    out = run([sys.executable, '-c', ORDER, first], threads=2)
    assert out.stdout.strip().endswith(f'ok {first}'), out.stdout[-2000:]


def test_the_hub_module_imports_no_host_library():
    """Installing only arranges the registration (the subprocess tests
    above check ``sys.modules``); the module's own imports are mmlape's and
    the standard library's."""
    src = open(hub.__file__).read()
    top = [
        line for line in src.splitlines()
        if line.startswith(('import ', 'from '))
    ]
    assert top == [
        'import copy', 'import functools', 'import os',
        'import os.path as osp', 'import sys', 'import tempfile',
        'from typing import Any, Dict, List, Optional',
        'from .imports import after_import'
    ]
