"""mmpretrain stays importable beside transformers 5
(:mod:`mmlape.hosts.imports`, applied as the tools apply it:
:func:`mmlape.hosts.apply`), on an environment that holds a stand-in
transformers of a given version: its top level hands out any class name
(``AutoConfig``, ``PreTrainedModel``), and it has none of the submodule
names that mmpretrain's multimodal models import, as transformers 5 lacks
some of them."""
import os
import subprocess
import sys

import pytest
from conftest import ROOT, run_python

BUILD_VIT = ('from mmpretrain.registry import MODELS; '
             "m = MODELS.build(dict(type='VisionTransformer', "
             "arch='deit-tiny', img_size=32, patch_size=16)); "
             'print("built", type(m).__name__)')

#: Modules of the stand-in that hand out any name, as far as mmpretrain asks.
OPEN_MODULES = ('', 'activations', 'modeling_outputs', 'models', 'models.auto',
                'models.auto.auto_factory', 'models.bert',
                'models.bert.configuration_bert', 'utils')
BASE = ('class PreTrainedModel:\n    from_pretrained = None\n'
        '    class config_class:\n        from_pretrained = None\n')
ANY_NAME = ('def __getattr__(name):\n    from transformers import '
            'PreTrainedModel\n    return type(name, (PreTrainedModel,), {})\n')


def fake_transformers(root, version: str) -> str:
    """A folder holding a stand-in ``transformers`` distribution whose
    ``modeling_utils`` has ``PreTrainedModel`` but not the helpers that
    transformers 5 dropped from it (``apply_chunking_to_forward``...)."""
    for name in OPEN_MODULES:
        pkg = root.joinpath('transformers', *filter(None, name.split('.')))
        pkg.mkdir(parents=True, exist_ok=True)
        head = (f'__version__ = {version!r}\n' + BASE) if not name else ''
        (pkg / '__init__.py').write_text(head + ANY_NAME)
    (root / 'transformers' / 'modeling_utils.py'
     ).write_text('from transformers import PreTrainedModel\n')
    info = root / f'transformers-{version}.dist-info'
    info.mkdir()
    (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: transformers'
                                   f'\nVersion: {version}\n')
    return str(root)


def python_with(path: str, code: str):
    env = dict(
        PYTHONPATH=os.pathsep.join(
            [path] + [p for p in [os.environ.get('PYTHONPATH')] if p]))
    return run_python(['-c', code], env=env, check=False)


@pytest.fixture(scope='module')
def transformers5(tmp_path_factory) -> str:
    return fake_transformers(tmp_path_factory.mktemp('tf5'), '5.0.0')


def test_mmpretrain_fails_beside_transformers5_without_mmlape(transformers5):
    """The failure the patch is for, reproduced: without mmlape,
    mmpretrain's models do not import."""
    out = python_with(transformers5, 'import mmpretrain.models')
    assert 'NoneType takes no arguments' in out, out[-2000:]


@pytest.mark.parametrize('order', ['mmlape first', 'mmpretrain first'])
def test_mmlape_keeps_mmpretrain_importable(transformers5, order):
    first = ('import mmlape, mmlape.hosts; mmlape.hosts.apply(); '
             'import mmpretrain.utils.dependency as d' if order
             == 'mmlape first' else 'import mmpretrain.utils.dependency as d; '
             'import mmlape, mmlape.hosts; mmlape.hosts.apply()')
    out = python_with(
        transformers5, f'{first}; print("flag", d.WITH_MULTIMODAL); '
        f'{BUILD_VIT}; from mmpretrain.registry import MODELS\n'
        'try:\n    MODELS.build(dict(type="BlipCaption"))\n'
        'except ImportError as e:\n    print("placeholder:", e)')
    assert 'flag False' in out, out[-2000:]
    assert 'built VisionTransformer' in out, out[-2000:]
    assert 'requires extra multi-modal dependencies' in out, out[-2000:]


def test_mmdet_models_import_beside_transformers5(transformers5):
    out = python_with(
        transformers5, 'import mmlape, mmlape.hosts; mmlape.hosts.apply(); '
        'import mmdet.models; print("mmdet ok")')
    assert 'mmdet ok' in out, out[-2000:]


def test_transformers4_is_left_alone(tmp_path):
    from mmlape.hosts import imports as host_compat
    path = fake_transformers(tmp_path, '4.40.2')
    out = python_with(
        path, 'import mmlape, mmlape.hosts, sys; '
        'mmlape.hosts.keep_mmpretrain_importable(); '
        'from mmlape.hosts.imports import mmpretrain_needs_patch as f; '
        'print("needs", f(), any(type(x).__name__ == "_PatchOnImport" '
        'for x in sys.meta_path)); import mmpretrain.utils.dependency as d; '
        'print("flag", d.WITH_MULTIMODAL)')
    assert 'needs False False' in out and 'flag True' in out, out[-2000:]
    # and in this process (no transformers installed): nothing to do
    assert host_compat.keep_mmpretrain_importable() is False


def test_train_path_bench_builds_models_beside_transformers5(
        transformers5, tmp_path):
    """A benchmark that builds the config's model in its own process
    adjusts the hosts as the tools do (it failed on a GPU machine with
    transformers 5: ``NoneType takes no arguments``)."""
    paths = [transformers5, os.environ.get('PYTHONPATH', '')]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, paths)))
    bench = os.path.join(ROOT, 'benchmarks', 'bench_host_loop.py')
    cmd = [sys.executable, bench, '--section', 'train', '--tiny']
    cmd += ['--threads', '1']
    cmd += ['--families', 'deit', '--parts', 'model']
    cmd += ['--work-root', str(tmp_path)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'failed' not in out.stdout, out.stdout + out.stderr[-2000:]
    row = [r for r in out.stdout.splitlines() if r.startswith('| deit')]
    assert len(row) == 1 and row[0].split('|')[5].strip() != '-', out.stdout
