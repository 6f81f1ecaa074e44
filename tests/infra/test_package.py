"""The package as others build on it: import side effects, safe loading on
and off, the mmlape scope, things defined once, docs/methods.md. (The
architecture: tests/infra/test_architecture.py.)"""
import glob
import importlib
import os.path as osp
import re
import sys
import textwrap
from typing import get_args

import pytest
import torch
from conftest import ROOT, run

from mmlape.models.layers import pe_join_names

HOSTS = ('mmpretrain', 'mmdet', 'mmseg')


@pytest.mark.slow
def test_import_mmlape_imports_no_host_library():
    """``import mmlape`` registers everything but imports no host task
    library; the lazily registered optimizer constructor, data
    preprocessor and accuracy metric import mmpretrain only when they are
    built."""
    code = textwrap.dedent(f'''
        import sys
        import mmlape
        hosts = {HOSTS!r}
        loaded = [m for m in hosts if m in sys.modules]
        assert not loaded, f'import mmlape imported {{loaded}}'
        from mmengine.registry import MODELS, OPTIM_WRAPPER_CONSTRUCTORS
        assert MODELS.get('LaPEViT') is not None
        assert MODELS.get('LaPEViTAdapter') is not None
        name = 'LaPELayerDecayOptimWrapperConstructor'
        assert name in OPTIM_WRAPPER_CONSTRUCTORS.module_dict
        assert 'mmpretrain' not in sys.modules
        constructor = OPTIM_WRAPPER_CONSTRUCTORS.build(dict(
            type=name,
            optim_wrapper_cfg=dict(optimizer=dict(type='AdamW', lr=1e-3)),
            paramwise_cfg=dict(layer_decay_rate=0.9)))
        assert type(constructor).__name__ == name
        assert 'mmpretrain' in sys.modules
        assert 'LaPEClsDataPreprocessor' in MODELS.module_dict
        prep = MODELS.build(dict(type='LaPEClsDataPreprocessor'))
        assert type(prep).__name__ == 'LaPEClsDataPreprocessor'
        from mmengine.registry import METRICS
        metric = METRICS.build(dict(type='LaPEAccuracy', topk=(1, 5)))
        assert type(metric).__name__ == 'LaPEAccuracy'
        assert metric.topk == (1, 5)
        import torch
        ema = MODELS.build(dict(type='LaPEExponentialMovingAverage',
                                model=torch.nn.Linear(2, 2), momentum=0.1))
        assert type(ema).__name__ == 'LaPEExponentialMovingAverage'
        assert ema.momentum == 0.1
        print('ok')
        ''')
    out = run([sys.executable, '-c', code])
    assert out.stdout.strip().endswith('ok')


#: What the host libraries look like, as a fresh process sees it: mmcv's
#: Functions, mmengine's checkpoint loaders and config packages, torch's
#: safe globals, the import system, mmpretrain's hub, warnings and logging.
HOST_STATE = textwrap.dedent('''
    import importlib, logging, sys, warnings

    def state():
        import torch
        from mmengine.config.utils import MODULE2PACKAGE
        from mmengine.runner.checkpoint import CheckpointLoader
        import mmpretrain.apis.model as hub
        import mmpretrain
        out = {}
        for module, name in [('mmcv.ops.multi_scale_deform_attn',
                              'MultiScaleDeformableAttnFunction'),
                             ('mmcv.ops.roi_align', 'RoIAlignFunction'),
                             ('mmcv.ops.nms', 'NMSop')]:
            cls = getattr(importlib.import_module(module), name)
            for fn in ('forward', 'backward'):
                out[f'{name}.{fn}'] = getattr(cls, fn)
        out['schemes'] = dict(CheckpointLoader._schemes)
        out['packages'] = dict(MODULE2PACKAGE)
        out['safe globals'] = list(torch.serialization.get_safe_globals())
        out['meta_path'] = list(sys.meta_path)
        out['hub'] = (hub.ModelHub.__dict__['_register_mmpretrain_models'],
                      hub.ModelHub.__dict__['get'], hub.get_model,
                      mmpretrain.get_model, hub.list_models,
                      mmpretrain.list_models, sorted(vars(hub.ModelHub)))
        out['warnings'] = list(warnings.filters)
        loggers = [logging.getLogger()] + [
            logging.getLogger(name)
            for name in sorted(logging.root.manager.loggerDict)]
        out['logging'] = [(lg.name, list(lg.handlers), list(lg.filters))
                          for lg in loggers
                          if isinstance(lg, logging.Logger)]
        return out

    def hosts():
        import mmengine.runner, mmcv.ops, mmdet.models, mmpretrain.models
        import mmseg.models

    def own(value):
        """Whether mmlape made ``value`` (a function, wrapper or not, a
        finder, a handler or filter, a classmethod)."""
        value = getattr(value, '__func__', value)
        code = getattr(value, '__code__', None)
        if code is not None:
            return '/mmlape/' in code.co_filename.replace('\\\\', '/')
        kind = value if isinstance(value, type) else type(value)
        return str(kind.__module__).startswith('mmlape')
''')


@pytest.mark.slow
def test_import_mmlape_changes_no_host_library():
    """``import mmlape`` registers and does nothing else: imported after
    the host libraries, it leaves every adjustable part of them as it was
    (but the documented ``mmlape`` entry in mmengine's table of config
    packages); imported before them, nothing of mmlape's is in them or
    waits for them. ``mmlape.hosts.apply()`` then does change them."""
    code = HOST_STATE + textwrap.dedent('''
        if sys.argv[1] == 'hosts first':
            hosts()
            before = state()
            import mmlape
            import mmlape.models, mmlape.hosts
            hosts()
            after = state()
            assert after['packages'] == dict(before['packages'],
                                             mmlape='mmlape')
            for key in before:
                if key != 'packages':
                    assert after[key] == before[key], key
        else:
            import mmlape
            assert not any(own(f) for f in sys.meta_path), sys.meta_path
            hosts()
            after = state()
            for key, value in after.items():
                values = value if isinstance(value, (list, tuple)) else [
                    value]
                if isinstance(value, dict):
                    values = list(value.values())
                if key == 'logging':
                    values = [x for _, hs, fs in value for x in hs + fs]
                for item in values:
                    assert not own(item), (key, item)
            allowed = [g[0] if isinstance(g, tuple) else g
                       for g in after['safe globals']]
            from mmengine.logging import HistoryBuffer
            import argparse
            assert HistoryBuffer not in allowed, allowed
            assert argparse.Namespace not in allowed, allowed
            assert not any(own(g) for g in allowed), allowed
        import mmlape.hosts
        mmlape.hosts.apply()
        applied = state()
        assert own(applied['schemes']['']), applied['schemes']
        assert applied['safe globals'] and applied['hub'] != after['hub']
        print('unchanged', sys.argv[1])
        ''')
    for order in ('hosts first', 'mmlape first'):
        out = run([sys.executable, '-c', code, order], threads=2)
        assert out.stdout.strip().endswith(f'unchanged {order}'), \
            out.stdout[-2000:] + out.stderr[-2000:]


def test_layer_decay_constructor_class_is_importable():
    from mmlape.hosts import LaPELayerDecayOptimWrapperConstructor
    from mmlape.hosts.optim import \
        LaPELayerDecayOptimWrapperConstructor as direct
    assert LaPELayerDecayOptimWrapperConstructor is direct
    from mmlape.hosts import LaPEClsDataPreprocessor
    from mmlape.hosts.cls_preprocessor import \
        LaPEClsDataPreprocessor as direct_prep
    assert LaPEClsDataPreprocessor is direct_prep
    from mmlape.hosts import LaPEAccuracy, LaPEExponentialMovingAverage
    from mmlape.hosts.cls_metric import LaPEAccuracy as direct_metric
    from mmlape.hosts.ema import LaPEExponentialMovingAverage as direct_ema
    assert LaPEAccuracy is direct_metric
    assert LaPEExponentialMovingAverage is direct_ema
    import mmlape.hosts
    with pytest.raises(AttributeError, match='no attribute'):
        mmlape.hosts.Nope


@pytest.mark.slow
def test_safe_loading_off_then_on_and_idempotent(tmp_path):
    """mmengine alone (off) refuses its own training checkpoints under
    torch's weights_only default; after ``import mmlape`` and the tools'
    ``install_safe_loading`` (on) they load, arbitrary objects are still
    refused, and installing again changes nothing."""
    code = textwrap.dedent('''
        import pickle, sys
        import torch
        from mmengine.logging import HistoryBuffer
        from mmengine.runner.checkpoint import CheckpointLoader

        path, evil = sys.argv[1], sys.argv[2]
        buf = HistoryBuffer()
        buf.update(0.5)
        torch.save({'state_dict': {'w': torch.ones(2)},
                    'message_hub': {'log_scalars': {'loss': buf}}}, path)

        class Payload:
            def __reduce__(self):
                return (print, ('ran',))

        torch.save({'x': Payload()}, evil)
        try:
            CheckpointLoader.load_checkpoint(path)
            print('off: loaded')
        except pickle.UnpicklingError:
            print('off: refused')

        import mmlape
        from mmlape.hosts import install_safe_loading
        from mmlape.utils import UnsafeCheckpointError
        install_safe_loading()
        loader = CheckpointLoader._schemes['']
        n_globals = len(torch.serialization.get_safe_globals())
        ckpt = CheckpointLoader.load_checkpoint(path)
        print('on:', type(ckpt['message_hub']['log_scalars']['loss']).__name__)
        try:
            CheckpointLoader.load_checkpoint(evil)
            print('on: evil loaded')
        except UnsafeCheckpointError:
            print('on: evil refused')
        install_safe_loading()
        install_safe_loading()
        same = CheckpointLoader._schemes[''] is loader and len(
            torch.serialization.get_safe_globals()) == n_globals
        print('idempotent:', same)
        ''')
    out = run([
        sys.executable, '-c', code,
        str(tmp_path / 'a.pth'),
        str(tmp_path / 'evil.pth')
    ],
              cwd=str(tmp_path))
    lines = [
        line for line in out.stdout.splitlines()
        if ' - mmengine - ' not in line
    ]
    assert lines == [
        'off: refused', 'on: HistoryBuffer', 'on: evil refused',
        'idempotent: True'
    ], out.stdout + out.stderr
    assert (tmp_path / 'evil.pth').is_file()


@pytest.mark.parametrize('host,kind,name,module', [
    ('mmdet', 'TRANSFORMS', 'PackDetInputs', 'mmdet.'),
    ('mmseg', 'TRANSFORMS', 'LoadAnnotations', 'mmseg.'),
    ('mmpretrain', 'METRICS', 'Accuracy', 'mmpretrain.'),
    ('mmpretrain', 'PARAM_SCHEDULERS', 'LinearLR', 'mmengine.'),
])
def test_mmlape_scope_resolves_host_types(host, kind, name, module):
    """A dict stamped ``_scope_='mmlape'`` (what mmengine does to dicts of
    an ``mmlape::`` base) builds the host's class, not a root one."""
    import mmengine.registry as registries
    importlib.import_module(f'{host}.utils').register_all_modules(False)
    registry = getattr(registries, kind)
    with registry.switch_scope_and_registry(host) as host_registry:
        want = host_registry.get(name)
        with registry.switch_scope_and_registry('mmlape') as scoped:
            assert scoped.scope == 'mmlape'
            got = scoped.get(name)
    assert got is want and got.__module__.startswith(module)


def test_mmlape_scope_builds_a_whole_host_model():
    from mmengine.registry import MODELS, DefaultScope
    from mmpretrain.models import ImageClassifier
    from mmpretrain.utils import register_all_modules

    from mmlape.models import LaPEViT
    register_all_modules(False)
    cfg = dict(
        _scope_='mmlape',
        type='ImageClassifier',
        backbone=dict(
            type='LaPEViT', arch='test-tiny', img_size=32, patch_size=8),
        head=dict(
            type='LinearClsHead',
            num_classes=3,
            in_channels=64,
            loss=dict(type='CrossEntropyLoss')))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg)
    assert type(model) is ImageClassifier
    assert isinstance(model.backbone, LaPEViT)
    with DefaultScope.overwrite_default_scope('mmlape'):
        assert MODELS.build(
            dict(type='LaPEViT', arch='test-tiny', img_size=32,
                 patch_size=8)).pe_join.name == 'Default'


def test_pe_types_defined_once():
    from mmlape.models import LaPEViT
    from mmlape.models.layers import pe_join
    from mmlape.models.layers.pos_embed import (ABSOLUTE_PE_TYPES, PE_TYPES,
                                                ROTARY_PE_TYPES, PEType)
    assert PE_TYPES == get_args(PEType) == ('learnable', 'sincos1d',
                                            'sincos2d', 'relative',
                                            'rope_axial', 'rope_mixed')
    assert ABSOLUTE_PE_TYPES == ('learnable', 'sincos1d', 'sincos2d')
    assert ROTARY_PE_TYPES == ('rope_axial', 'rope_mixed')
    for cls in (pe_join.DefaultJoin, pe_join.ShareJoin, pe_join.UnshareJoin,
                pe_join.LaPEJoin, pe_join.PVGJoin, pe_join.MPVGJoin):
        assert set(cls.pe_types) <= set(PE_TYPES), cls
    with pytest.raises(ValueError, match="pe_type='rope'.*'relative'"):
        LaPEViT('test-tiny', img_size=32, patch_size=8, pe_type='rope')
    # Nowhere else in the package is the list spelled out.
    pattern = re.compile(r"'learnable',\s*'sincos1d'")
    for path in glob.glob(
            osp.join(ROOT, 'mmlape', '**', '*.py'), recursive=True):
        if path.endswith(osp.join('layers', 'pos_embed.py')):
            continue
        with open(path, encoding='utf-8') as f:
            assert not pattern.search(f.read()), path


def test_resize_pos_embed_takes_mmpretrain_arguments():
    from mmpretrain.models.utils import resize_pos_embed as mmpretrain_resize

    from mmlape.models import resize_pos_embed
    pe = torch.randn(1, 1 + 4 * 4, 8)
    for args in [((4, 4), (6, 3)), ((4, 4), (6, 3), 'bilinear'),
                 ((4, 4), (2, 8), 'bicubic', 1)]:
        torch.testing.assert_close(
            resize_pos_embed(pe, *args), mmpretrain_resize(pe, *args))
    flat = pe[:, 1:]
    torch.testing.assert_close(
        resize_pos_embed(flat, (4, 4), (8, 8), num_extra_tokens=0),
        mmpretrain_resize(flat, (4, 4), (8, 8), num_extra_tokens=0))
    # A caller still passing (num_extra_tokens, mode) in the old order gets
    # a clear error, not a silent misuse.
    with pytest.raises(ValueError, match='mode must be one of .* got 1'):
        resize_pos_embed(pe, (4, 4), (8, 8), 1, 'bicubic')
    with pytest.raises(ValueError, match='17 rows'):
        resize_pos_embed(pe, (4, 4), (8, 8), num_extra_tokens=0)


def _check_env():
    sys.path.insert(0, osp.join(ROOT, 'scripts'))
    try:
        return importlib.import_module('check_env')
    finally:
        sys.path.pop(0)


def test_version_pins_come_from_the_requirements_files():
    check_env = _check_env()
    reqs = check_env.read_requirements('openmmlab.txt')
    assert reqs['mmcv'][0][0] == '=='
    assert check_env.pin('mmcv') == 'mmcv==' + reqs['mmcv'][0][1]
    setuptools = check_env.read_requirements('build.txt')['setuptools']
    assert check_env.pin('setuptools') == 'setuptools' + ','.join(
        op + v for op, v in setuptools)
    assert check_env.satisfies('80.9.0', setuptools)
    assert not check_env.satisfies('81.0.0', setuptools)
    assert check_env.satisfies('2.13.0+cpu', [('==', '2.13.0')])
    with pytest.raises(KeyError, match='no requirements'):
        check_env.pin('nope')
    # The scripts spell no version; the install page's table (moved there
    # from the README) agrees with the requirements files.
    version = re.compile(r'\w==\s*\d|\b\d+\.\d+\.\d+\b')
    for script in ('scripts/check_env.py', 'scripts/install.sh'):
        with open(osp.join(ROOT, script), encoding='utf-8') as f:
            assert not version.search(f.read()), script
    with open(osp.join(ROOT, 'docs', 'install.md'), encoding='utf-8') as f:
        readme = f.read()
    pins = {}
    for file in ('openmmlab.txt', 'torch.txt'):
        for name, clauses in check_env.read_requirements(file).items():
            pins[name] = clauses[0][1]
    rows = [line for line in readme.splitlines() if line.startswith('| ')]
    for names, versions in [('torch, torchvision', 'torch torchvision'),
                            ('mmengine', 'mmengine'), ('mmcv', 'mmcv'),
                            ('mmdet, mmsegmentation, mmpretrain',
                             'mmdet mmsegmentation mmpretrain')]:
        row = next(r for r in rows if r.split('|')[1].strip() == names)
        want = ', '.join(pins[n] for n in versions.split())
        assert row.split('|')[2].strip().startswith(want), row


def test_citation_license_and_changelog_describe_this_release():
    """CITATION.cff is valid CFF 1.2.0 (its required keys, each reference's
    too) of this version and license; LICENSE is that license; the
    changelog has an entry for this version."""
    import yaml

    from mmlape import __version__
    with open(osp.join(ROOT, 'CITATION.cff'), encoding='utf-8') as f:
        cff = yaml.safe_load(f)
    assert cff['cff-version'] == '1.2.0'
    for key in ('cff-version', 'message', 'title', 'authors'):
        assert cff.get(key), key
    assert str(cff['version']) == __version__
    assert cff['type'] == 'software'
    for author in cff['authors']:
        assert author.get('name') or author.get('family-names'), author
    assert cff['references']
    for ref in cff['references']:
        for key in ('type', 'title', 'authors'):
            assert ref.get(key), (ref.get('title'), key)
    assert cff['license'] == 'Apache-2.0'
    with open(osp.join(ROOT, 'LICENSE'), encoding='utf-8') as f:
        assert ' '.join(f.read(200).split()).startswith(
            'Apache License Version 2.0, January 2004')
    with open(osp.join(ROOT, 'setup.py'), encoding='utf-8') as f:
        assert "license='Apache-2.0'" in f.read()
    with open(osp.join(ROOT, 'CHANGELOG.md'), encoding='utf-8') as f:
        changelog = f.read()
    assert re.search(rf'^## \[{re.escape(__version__)}\]', changelog, re.M)


def test_install_modes_name_their_requirements():
    """``make install`` installs the runtime, ``make install-dev`` (what
    ``make test`` runs) the test tools too; check_env checks what each
    mode installs, setup.py declares the same files, and what mmlape
    imports at run time is a runtime requirement."""
    check_env = _check_env()
    runtime = {
        name
        for file in check_env.RUNTIME_FILES
        for name in check_env.read_requirements(file)
    }
    tests = set(check_env.read_requirements('tests.txt'))
    assert {'safetensors', 'filelock'} <= runtime
    assert {'pytest', 'pytest-xdist', 'timm', 'build', 'tensorboard'} <= tests
    assert not runtime & tests
    assert 'tests' not in check_env.parts_of('all')
    assert list(check_env.parts_of('all', tests=True))[-1] == 'tests'
    assert list(check_env.parts_of('tests')) == ['tests']
    out = run(['make', '--no-print-directory', '-n', 'install', 'test'])
    lines = out.stdout.splitlines()
    assert lines[0] == 'bash scripts/install.sh'
    assert lines[1] == 'bash scripts/install.sh --tests'
    with open(osp.join(ROOT, 'setup.py'), encoding='utf-8') as f:
        setup_py = f.read()
    assert "read_requirements('openmmlab.txt') +\n        " \
        "read_requirements('runtime.txt')" in setup_py
    assert "tests=read_requirements('tests.txt')" in setup_py
    assert "python_requires='>=3.10'" in setup_py
    # timm is a test requirement only: nothing that ships imports it
    for folder in ('mmlape', 'tools'):
        for path in glob.glob(
                osp.join(ROOT, folder, '**', '*.py'), recursive=True):
            with open(path, encoding='utf-8') as f:
                assert not re.search(r'^\s*(import|from) timm\b', f.read(),
                                     re.M), path


def test_methods_doc_is_the_reference():
    with open(osp.join(ROOT, 'docs', 'methods.md'), encoding='utf-8') as f:
        doc = f.read()
    headings = re.findall(r'^## (.+)$', doc, flags=re.M)
    for heading in ('Notation', 'Baselines', 'LaPE', 'PVG and MPVG',
                    'PE types and resizing'):
        assert heading in headings
    for name in pe_join_names():  # every join is documented
        assert f'`{name}`' in doc or f'**{name}**' in doc or \
            f'## {name}' in doc, name
    # Code and tests cite the doc in the repository, nothing outside it.
    cited = []
    paths = [osp.join(ROOT, 'setup.py')]
    for folder in ('mmlape', 'tests', 'tools', 'benchmarks', 'scripts'):
        paths += glob.glob(
            osp.join(ROOT, folder, '**', '*.py'), recursive=True)
    for path in paths:
        with open(path, encoding='utf-8') as f:
            text = f.read()
        assert 'SPEC' '.md' not in text, path
        if 'docs/methods.md' in text:
            cited.append(osp.relpath(path, ROOT))
    assert 'tests/reference.py' in cited
    assert 'mmlape/models/layers/pe_join.py' in cited


def test_ci_runs_the_docstring_examples():
    """``make test`` (what CI runs) runs the suite (in parallel processes),
    then the doctests of mmlape, then the quick suite on the second torch
    (``make test-compat``, in its own virtual environment)."""
    # Under a parent make (CI may run one) make prints 'Entering/Leaving
    # directory' lines; they are not commands.
    out = run(['make', '--no-print-directory', '-n', 'test'])
    lines = [
        line for line in out.stdout.strip().splitlines()
        if not line.startswith('make')
    ]
    doctest = [
        i for i, line in enumerate(lines)
        if '-m pytest --doctest-modules mmlape' in line
    ]
    assert len(doctest) == 1, lines
    i = doctest[0]
    assert '-m pytest' in lines[i - 1] and '--doctest' not in lines[i - 1]
    # the suite in parallel processes (pytest-xdist), work stealing
    assert '--numprocesses=auto' in lines[i - 1], lines[i - 1]
    assert '--dist=worksteal' in lines[i - 1], lines[i - 1]
    compat = lines[i + 1:]
    assert any('TORCH_PAIR=cu12' in line and 'scripts/install.sh' in line
               for line in compat), compat
    # the compat environment's own interpreter (COMPAT_VENV may be set)
    assert '/bin/python -m pytest -m "not slow"' in compat[-1], compat


def test_test_modules_do_not_redefine_the_shared_helpers():
    """The helpers and fixtures of tests/conftest.py are defined there
    only: no test module defines a function of the same name."""
    import ast

    def top_level_functions(path):
        with open(path, encoding='utf-8') as f:
            tree = ast.parse(f.read())
        return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}

    shared = top_level_functions(osp.join(ROOT, 'tests', 'conftest.py'))
    assert {'run', 'run_python', 'demo_options', 'pos_shapes_data'} <= shared
    paths = sorted(
        glob.glob(osp.join(ROOT, 'tests', '**', 'test_*.py'), recursive=True))
    assert len(paths) > 30, paths  # the package folders' modules too
    for path in paths:
        again = top_level_functions(path) & shared
        assert not again, (osp.relpath(path, ROOT), again)


def test_ci_runs_the_infrastructure_tests(request):
    """The whole-suite run of ``make test`` (what CI runs) selects the tests
    marked ``infra`` and the slow ones, the compat run the quick tests of
    the Makefile's ``COMPAT_TESTS``, and every test under
    tests/infra/ carries the marker, registered in setup.cfg; ``make
    test-fast`` leaves them out."""
    import configparser
    import shlex

    from _pytest.mark.expression import Expression

    assert request.node.get_closest_marker('infra') is not None
    cfg = configparser.ConfigParser()
    cfg.read(osp.join(ROOT, 'setup.cfg'))
    markers = cfg['tool:pytest']['markers'].split('\n')
    assert any(m.strip().startswith('infra:') for m in markers), markers

    def selections(target):
        out = run(['make', '--no-print-directory', '-n', target])
        found = []
        for line in out.stdout.splitlines():
            if '-m pytest' not in line or '--doctest-modules' in line:
                continue
            args = shlex.split(line)
            args = args[args.index('pytest') + 1:]
            paths = [
                a for i, a in enumerate(args)
                if not a.startswith('-') and args[i - 1] not in ('-m', '-p')
            ]
            expr = args[args.index('-m') + 1] if '-m' in args else ''

            def select(marks, expr=expr):
                return not expr or Expression.compile(expr).evaluate(
                    lambda name, **kw: name in marks)

            found.append((paths, select))
        return found

    # the suite, then the compat run on the second torch
    (paths, suite), (compat_paths, compat) = selections('test')
    # no path narrows the suite below setup.cfg's testpaths
    assert not paths
    assert suite({'infra'}) and suite({'infra', 'slow'})
    # the compat run takes the quick tests of what torch's version can
    # change (the Makefile's COMPAT_TESTS), every one of them a real path
    assert compat(set()) and not compat({'slow'})
    assert 'tests/models' in compat_paths, compat_paths
    for path in compat_paths:
        assert osp.exists(osp.join(ROOT, path)), path
    (paths, fast), = selections('test-fast')
    assert not paths
    assert not fast({'infra'}) and fast(set())
