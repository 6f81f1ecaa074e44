"""The provided configs under the host libraries' own tools: every config's
``custom_imports`` names ``mmlape.hosts.applied``, so that mmpretrain's
``tools/train.py`` and ``tools/test.py`` run the demo config and load its
checkpoints safely with nothing added (docs/training.md, "The host
libraries' own tools")."""
import ast
import glob
import os.path as osp
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import DEMO, ROOT, demo_options, run

#: What every provided config imports (through its own ``custom_imports``
#: or a base's).
IMPORTS = ['mmlape', 'mmlape.hosts.applied']


def _top_level(path: str) -> dict:
    """``{name: value node}`` of a config file's top-level assignments."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read())
    return {
        target.id: node.value
        for node in tree.body if isinstance(node, ast.Assign)
        for target in node.targets if isinstance(target, ast.Name)
    }


def _custom_imports(node) -> list:
    """The ``imports`` of ``custom_imports = dict(imports=[...], ...)``."""
    assert isinstance(node, ast.Call), ast.dump(node)
    found = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    assert found.get('allow_failed_imports') is False, found
    return found['imports']


def _bases(path: str, assigned: dict) -> list:
    """The config's own ``_base_`` files (the host libraries' aside)."""
    node = assigned.get('_base_')
    if node is None:
        return []
    value = ast.literal_eval(node)
    names = [value] if isinstance(value, str) else list(value)
    return [
        osp.normpath(osp.join(osp.dirname(path), name)) for name in names
        if '::' not in name
    ]


def test_every_config_imports_the_host_adjustments():
    """Read statically (parsing every config would take half a minute):
    each ``custom_imports`` under configs/ names mmlape and
    ``mmlape.hosts.applied``, and each config sets one, inherits one from
    its bases or is a part only merged into configs that do."""
    paths = sorted(
        glob.glob(osp.join(ROOT, 'configs', '**', '*.py'), recursive=True))
    assert len(paths) > 50
    files = {path: _top_level(path) for path in paths}
    setting = []
    for path, assigned in files.items():
        if 'custom_imports' in assigned:
            assert _custom_imports(assigned['custom_imports']) == IMPORTS, \
                path
            setting.append(path)

    def imports(path, seen=()):
        assigned = files.get(path) or _top_level(path)
        if 'custom_imports' in assigned:
            return True
        return any(
            imports(base, seen + (path, )) for base in _bases(path, assigned)
            if base not in seen)

    # a fragment base (configs/_base_/models/vit-adapter-small.py) only
    # holds names other configs take with {{_base_.name}}: it is merged
    # into a config that imports, and runs nothing itself
    sources = {}
    for path in paths:
        with open(path, encoding='utf-8') as f:
            sources[path] = f.read()

    def fragment(path):
        names = set(files[path]) - {'_base_'}
        return names and all(
            any(f'{{{{_base_.{n}}}}}' in src
                for p, src in sources.items() if p != path) for n in names)

    # a part base (configs/_base_/datasets/cifar100_bs16.py) sits next to
    # the runtime base in its configs' ``_base_`` lists (mmengine refuses
    # a key set in two sibling bases): it passes when it is inherited and
    # every config inheriting it imports
    inheritors = {}
    for path in paths:
        for base in _bases(path, files[path]):
            inheritors.setdefault(base, []).append(path)

    def part(path, seen=()):
        return bool(inheritors.get(path)) and all(
            imports(child) or
            (child not in seen and part(child, seen + (path, )))
            for child in inheritors[path])

    missing = [
        osp.relpath(p, ROOT) for p in paths
        if not imports(p) and not fragment(p) and not part(p)
    ]
    assert not missing, missing
    # the demo takes its imports from the runtime base
    assert imports(osp.join(ROOT, DEMO))
    assert osp.join(ROOT, 'configs', '_base_', 'default_runtime.py') in setting


class _Payload:
    """Unpickling it creates the file ``path`` (what an attacker's code
    would do instead)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, 'w'))


@pytest.mark.slow
def test_mmpretrain_tools_run_the_demo_config_safely(pos_shapes_data,
                                                     tmp_path):
    """mmpretrain's own tools/train.py trains the demo config for two
    iterations and its tools/test.py tests the checkpoint (mmengine's
    checkpoint, which torch's weights-only default alone refuses); a
    checkpoint whose unpickling would create a file is refused by both, as
    ``load_from`` and as the checkpoint to test, and the file never
    appears, with torch's weights-only default turned off
    (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``): the refusal is mmlape's,
    from the config's custom_imports. Run outside the checkout."""
    import mmpretrain
    tools = osp.join(osp.dirname(mmpretrain.__file__), '.mim', 'tools')
    config = osp.join(ROOT, DEMO)
    options = demo_options(pos_shapes_data, 2, interval=2, batch_size=4)
    test_options = [
        '--cfg-options', f'test_dataloader.dataset.data_root={pos_shapes_data}'
    ]

    def tool(name, *args, env=None, check=True):
        return run(
            [sys.executable,
             osp.join(tools, f'{name}.py'), config, *args],
            cwd=str(tmp_path),
            threads=2,
            check=check,
            env=env)

    work = tmp_path / 'work'
    tool('train', '--work-dir', str(work), '--no-persistent-workers', *options)
    ckpt = work / 'iter_2.pth'
    assert ckpt.is_file()
    marker = tmp_path / 'MARKER'
    evil = tmp_path / 'evil.pth'
    torch.save({'state_dict': {}, 'meta': _Payload(str(marker))}, evil)
    unsafe = dict(TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD='1')
    with ThreadPoolExecutor(3) as pool:
        tested = pool.submit(tool, 'test', str(ckpt), '--work-dir',
                             str(tmp_path / 'test'), *test_options)
        loaded = pool.submit(
            tool,
            'train',
            '--work-dir',
            str(tmp_path / 'evil_train'),
            '--no-persistent-workers',
            *options,
            f'load_from={evil}',
            env=unsafe,
            check=False)
        evil_test = pool.submit(
            tool,
            'test',
            str(evil),
            '--work-dir',
            str(tmp_path / 'evil_test'),
            *test_options,
            env=unsafe,
            check=False)
    out = tested.result()
    assert 'accuracy/top1' in out.stdout + out.stderr
    for result in (loaded.result(), evil_test.result()):
        log = result.stdout + result.stderr
        assert result.returncode != 0, log[-3000:]
        assert f'Refusing to load checkpoint "{evil}"' in log, log[-3000:]
    assert not marker.exists()
    assert not glob.glob(str(tmp_path / 'evil_train' / '*.pth'))
