"""The opt-in speed parts (``speedups``, :mod:`mmlape.hosts.speedups`):
off by default in every provided config, on through one runtime setting
that ``tools/train.py`` and ``tools/test.py`` apply; bad values end in one
line naming the setting."""
import glob
import os.path as osp

import pytest
import torch
from conftest import DEMO, ROOT
from mmengine.config import Config

from mmlape.hosts.speedups import SPEEDUPS, apply_speedups
from mmlape.models.layers import pe_add
from mmlape.utils.errors import ConfigError


@pytest.fixture(autouse=True)
def triton_off_after():
    yield
    pe_add.use_triton(False)


def test_off_unless_asked():
    cfg = Config(
        dict(default_hooks=dict(runtime_info=dict(type='RuntimeInfoHook'))))
    assert apply_speedups(cfg) == dict(triton_pe_add=False, lazy_log=False)
    assert cfg.default_hooks.runtime_info.type == 'RuntimeInfoHook'
    assert pe_add._USE_TRITON is False


def test_each_part_on():
    cfg = Config(
        dict(
            speedups=dict(lazy_log=True, triton_pe_add=True),
            default_hooks=dict(runtime_info=dict(type='RuntimeInfoHook'))))
    assert apply_speedups(cfg) == dict(triton_pe_add=True, lazy_log=True)
    assert cfg.default_hooks.runtime_info.type == 'LazyRuntimeInfoHook'
    assert pe_add._USE_TRITON is True
    apply_speedups(Config(dict(speedups=dict(triton_pe_add=False))))
    assert pe_add._USE_TRITON is False


def test_the_triton_add_is_not_asked_when_off(monkeypatch):
    """Off, a large add never reaches the kernel's checks (on a CPU the
    kernel's path is stood in for, as tests/models/test_pe_add_kernel.py
    does)."""
    asked = []
    monkeypatch.setattr(pe_add, '_triton_fits',
                        lambda *args: asked.append(1) or True)
    monkeypatch.setattr(pe_add, '_TRITON_CHECKED', {})
    monkeypatch.setattr(pe_add, '_first_launch',
                        lambda h, pe, out, key: asked.append(2) or out)
    h, pe = torch.randn(2, 5, 8), torch.randn(1, 5, 8)
    out = pe_add.add_to_dtype(h, pe, torch.bfloat16)
    assert asked == [] and torch.equal(out, (h + pe).bfloat16())
    pe_add.use_triton(True)
    pe_add.add_to_dtype(h, pe, torch.bfloat16)
    assert asked == [1, 2]


@pytest.mark.parametrize('speedups, says', [
    (dict(fast=True), "unknown part(s) ['fast']"),
    (dict(lazy_log='yes'), "speedups.lazy_log must be True or False"),
    (['lazy_log'], 'speedups must be a dict'),
])
def test_bad_settings_are_named(speedups, says):
    with pytest.raises(ConfigError, match=r'speedups') as err:
        apply_speedups(Config(dict(speedups=speedups)))
    assert says in str(err.value) and '\n' not in str(err.value)


def test_another_runtime_info_hook_is_not_replaced_silently():
    cfg = Config(
        dict(
            speedups=dict(lazy_log=True),
            default_hooks=dict(runtime_info=dict(type='MyInfoHook'))))
    with pytest.raises(ConfigError, match="'MyInfoHook'"):
        apply_speedups(cfg)


def test_no_provided_config_turns_a_part_on():
    paths = glob.glob(osp.join(ROOT, 'configs', '**', '*.py'), recursive=True)
    assert len(paths) > 50
    for path in paths:
        with open(path, encoding='utf-8') as f:
            text = f.read()
        assert 'speedups' not in text and 'LazyRuntimeInfoHook' not in text, \
            path
    assert set(SPEEDUPS) == {'triton_pe_add', 'lazy_log'}


@pytest.mark.parametrize('tool', ['train', 'test'])
def test_the_tools_apply_the_setting(tool, tmp_path):
    """``--cfg-options speedups.lazy_log=True`` reaches the run's hooks
    through the tools' own config loading; without it, mmengine's hook."""
    import importlib
    module = importlib.import_module(f'tools.{tool}')
    args = [osp.join(ROOT, DEMO)]
    if tool == 'test':
        args.append(str(tmp_path / 'none.pth'))
    args += ['--work-dir', str(tmp_path)]
    parsed = module.parse_args(args)
    cfg = (
        module.build_cfg(parsed) if tool == 'train' else module.load_config(
            parsed.config, parsed.cfg_options, parsed.launcher,
            parsed.work_dir))
    # none set: the runner adds mmengine's
    assert 'runtime_info' not in cfg.default_hooks
    parsed = module.parse_args(args +
                               ['--cfg-options', 'speedups.lazy_log=True'])
    cfg = (
        module.build_cfg(parsed) if tool == 'train' else module.load_config(
            parsed.config, parsed.cfg_options, parsed.launcher,
            parsed.work_dir))
    assert cfg.default_hooks.runtime_info.type == 'LazyRuntimeInfoHook'
