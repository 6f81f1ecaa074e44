"""The architecture as a contract: the import floors of ``.importlinter``
(checked by ``make lint``), what the contract cannot state (which module
reads checkpoint files), and what the backbones write once, in their base.
"""
import inspect
import os.path as osp
import shutil
import sys

import pytest
from conftest import ROOT, run

import mmlape.models.backbones as backbones
from mmlape.models.backbones.base import LaPEBackbone
from mmlape.models.checkpoint import CheckpointFamily

#: ``lint-imports`` through this interpreter (the console script may be
#: another environment's).
LINT_IMPORTS = [
    sys.executable, '-c',
    'import sys; from importlinter.cli import lint_imports_command; '
    'sys.exit(lint_imports_command())', '--no-cache'
]


def lint_imports(cwd):
    # wide enough that no contract's line wraps
    return run(
        LINT_IMPORTS,
        check=False,
        cwd=cwd,
        timeout=300,
        env=dict(COLUMNS='300'))


def test_the_import_contract_holds():
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert ' kept, 0 broken.' in out.stdout


# A function-local import added to a copy of the package, and what must
# catch it: an upward import (utils -> models: half of the cycle utils ->
# models -> utils that the source-grep tests missed), a cycle (registry ->
# models -> registry), a checkpoint module that knows a backbone, a
# backbone that reads files itself, a layer that imports a host task
# library, a tool imported by the package.
VIOLATIONS = [
    ('mmlape/utils/errors.py', 'mmlape.models.layers.pe_join', [
        'The package\'s floors: nothing imports upward BROKEN',
        'mmlape.utils.errors -> mmlape.models.layers.pe_join'
    ]),
    ('mmlape/registry.py', 'mmlape.models.layers.pe_join', [
        'The package\'s floors: nothing imports upward BROKEN',
        'No import cycle between sibling modules, at any depth BROKEN'
    ]),
    ('mmlape/models/checkpoint/common.py', 'mmlape.models.backbones.vit',
     ['Models: layers < checkpoint (pure functions) < backbones BROKEN']),
    ('mmlape/models/backbones/swin.py', 'mmlape.utils.safe_load', [
        'Backbones leave reading checkpoint files to models.checkpoint '
        'BROKEN'
    ]),
    ('mmlape/models/layers/block.py', 'mmdet.models',
     ['Models, registry and utils import no host task library BROKEN']),
    ('mmlape/hosts/hooks.py', 'tools.common',
     ['The tools sit on the package, never under it BROKEN']),
    ('mmlape/models/layers/pe_add.py', 'mmlape.hosts.speedups',
     ['The method wing never imports the run wing BROKEN']),
]


@pytest.mark.slow
@pytest.mark.parametrize('path,target,broken', VIOLATIONS)
def test_the_contract_catches_function_local_imports(path, target, broken,
                                                     tmp_path):
    for name in ('mmlape', 'tools'):
        shutil.copytree(
            osp.join(ROOT, name),
            str(tmp_path / name),
            ignore=shutil.ignore_patterns('__pycache__', '.mim'))
    shutil.copy(osp.join(ROOT, '.importlinter'), str(tmp_path))
    with open(tmp_path / path, 'a', encoding='utf-8') as f:
        f.write(f'\n\ndef _violation():\n    import {target}  # noqa\n')
    out = lint_imports(str(tmp_path))
    assert out.returncode != 0
    for line in broken:
        assert line in out.stdout, (line, out.stdout[-3000:])


def test_the_run_wing_is_one_package_its_tests_mirror_it():
    """Every part that changes how mmengine or a host runs lives in
    mmlape/hosts (no engine package beside it, the work-dir lock and the
    strategies in it), and each test file of tests/hosts is named after a
    module of the wing."""
    import glob
    wing = osp.join(ROOT, 'mmlape', 'hosts')
    assert not osp.exists(osp.join(ROOT, 'mmlape', 'engine'))
    for name in ('hooks', 'strategies', 'work_dir', 'speedups', 'hub'):
        assert osp.isfile(osp.join(wing, f'{name}.py')), name
    assert not glob.glob(osp.join(ROOT, 'mmlape', 'utils', 'work_dir.py'))
    tests = glob.glob(osp.join(ROOT, 'tests', 'hosts', 'test_*.py'))
    assert len(tests) >= 10
    for path in tests:
        module = osp.basename(path)[len('test_'):]
        assert osp.isfile(osp.join(wing, module)), path


#: Every backbone class mmlape exports, the base aside.
BACKBONES = sorted(
    name for name in backbones.__all__
    if isinstance(getattr(backbones, name), type) and issubclass(
        getattr(backbones, name), LaPEBackbone) and name != 'LaPEBackbone')


@pytest.mark.parametrize('name', BACKBONES)
def test_backbones_leave_checkpoints_to_the_checkpoint_module(name):
    """The backbones describe themselves (``checkpoint_spec``); reading,
    converting, checking and fitting a checkpoint happen in
    ``mmlape.models.checkpoint``, whose family the base's hooks call."""
    cls = getattr(backbones, name)
    for module in (inspect.getmodule(cls), inspect.getmodule(LaPEBackbone)):
        source = inspect.getsource(module)
        for word in ('CheckpointLoader', 'torch.load', 'unwrap_state_dict',
                     'state_dict.items()', 'relative_position_bias_table\''):
            assert word not in source, (name, module.__name__, word)
    for method in ('_fit_state_dict', 'load_pretrained',
                   'check_join_compatible'):
        # a docstring and a call
        body = inspect.getsource(getattr(cls, method))
        assert len(body.splitlines()) <= 25, (name, method)


@pytest.mark.parametrize('name', BACKBONES)
def test_the_base_writes_the_shared_parts_once(name):
    """The plan cache, the checkpoint hooks, pretrained loading and the
    generic initialisation are the base's; no backbone writes its own."""
    cls = getattr(backbones, name)
    assert issubclass(cls, LaPEBackbone)
    for method in ('pe_plan', '_fit_state_dict', 'load_pretrained',
                   'check_join_compatible', '_init_default_weights'):
        owners = [k.__name__ for k in cls.__mro__ if method in vars(k)]
        assert owners == ['LaPEBackbone'], (name, method, owners)
    assert isinstance(cls.checkpoint_family, CheckpointFamily)
