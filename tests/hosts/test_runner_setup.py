"""mmengine's FlexibleRunner under the tools: train, --resume and test with
DDPStrategy (one process without a launcher; two gloo processes under
tools/dist_train.sh) and FSDPStrategy (two gloo processes: torch 2.13 runs
FSDP on the CPU); strategies whose checkpoints are folders refused in one
line; the checkpoint checks on the built model; atomic saves and the safe
loader kept."""
import errno
import json
import os
import os.path as osp
import sys
import time

import pytest
import torch
from conftest import (DEMO, ROOT, ToyData, ToyModel, one_line_error, run,
                      tool_options)
from mmengine.runner import FlexibleRunner

import mmlape  # noqa: F401
from mmlape.hosts.hooks import PARTIAL_PREFIX, AtomicLocalBackend
from mmlape.utils.safe_load import safe_torch_load

sys.path.insert(0, ROOT)
from tools import test, train  # noqa: E402

FLEX = 'runner_type=FlexibleRunner'


class Payload:
    """An object whose unpickling would run code."""

    def __reduce__(self):
        return (os.system, ('echo this must never run', ))


def assert_same_training_state(a_path, b_path, exact=True):
    """The weights and AdamW moments of two checkpoints agree."""
    a, b = safe_torch_load(a_path), safe_torch_load(b_path)
    assert a['meta']['iter'] == b['meta']['iter']
    check = torch.equal if exact else (
        lambda x, y: torch.allclose(x, y, rtol=1e-5, atol=1e-6))
    for key, value in a['state_dict'].items():
        assert check(b['state_dict'][key], value), key
    state_a, state_b = a['optimizer']['state'], b['optimizer']['state']
    assert state_a.keys() == state_b.keys() and state_a
    for idx in state_a:
        for name in ('exp_avg', 'exp_avg_sq'):
            assert check(state_b[idx][name], state_a[idx][name]), idx


# ----------------------------------------------------------------------
# one process, in process


def test_ddp_strategy_without_launcher_trains_resumes_and_tests(
        pos_shapes_data, tmp_path, capfd):
    data = pos_shapes_data
    flex = [FLEX, 'strategy.type=DDPStrategy']
    full, resumed = tmp_path / 'full', tmp_path / 'resumed'
    assert train.main([DEMO, '--work-dir', str(full)] +
                      tool_options(data, 4, *flex, interval=2)) == 0
    out = capfd.readouterr()
    log = out.out + out.err
    assert 'DDPStrategy without a launcher: this one process runs ' \
        'SingleDeviceStrategy' in log
    # mmengine's notices of its own deprecated calls are not shown
    assert 'will be deprecated' not in log and 'is the alias of' not in log
    # --resume (the checkpoint is checked on the model FlexibleRunner builds)
    assert train.main([
        DEMO, '--work-dir',
        str(resumed), '--resume',
        str(full / 'iter_2.pth')
    ] + tool_options(data, 4, *flex, interval=2)) == 0
    log = capfd.readouterr().out
    assert 'resumed epoch: 0, iter: 2' in log
    assert_same_training_state(full / 'iter_4.pth', resumed / 'iter_4.pth')
    # tools/test.py
    assert test.main(
        [DEMO,
         str(full / 'iter_4.pth'), '--work-dir',
         str(tmp_path / 'test')] + tool_options(data, 1, *flex)) == 0
    with open(tmp_path / 'test' / 'test_metrics.json') as f:
        assert 0 <= json.load(f)['accuracy/top1'] <= 100


@pytest.fixture(scope='module')
def default_ckpt(pos_shapes_data, tmp_path_factory):
    """A checkpoint of the demo config (mmengine's Runner)."""
    work = tmp_path_factory.mktemp('default')
    assert train.main([DEMO, '--work-dir', str(work)] +
                      tool_options(pos_shapes_data)) == 0
    return str(work / 'iter_1.pth')


def test_checks_run_on_the_model_flexible_runner_builds(
        default_ckpt, pos_shapes_data, tmp_path, capsys):
    # Without a recorded config only the built model's keys tell: LaPE has
    # PE norms the default join's weights lack.
    state = safe_torch_load(default_ckpt)['state_dict']
    bare = tmp_path / 'bare.pth'
    torch.save({'state_dict': state}, bare)
    lape = tool_options(pos_shapes_data, 1, FLEX,
                        'model.backbone.pe_join.type=LaPE')
    line = one_line_error(
        test.main, [DEMO, str(bare), '--work-dir',
                    str(tmp_path / 'a')] + lape, capsys)
    assert 'is a checkpoint of another model: 8 missing' in line
    assert 'pe_norm' in line
    line = one_line_error(
        train.main,
        [DEMO, '--work-dir',
         str(tmp_path / 'b'), '--resume',
         str(bare)] + lape, capsys)
    assert line.startswith(f'error: --resume: "{bare}" is a checkpoint of '
                           f'another model: 8 missing')
    # with a recorded config, the backbones are compared
    share = tool_options(pos_shapes_data, 1, FLEX,
                         'model.backbone.pe_join.type=Share')
    line = one_line_error(
        test.main, [DEMO, default_ckpt, '--work-dir',
                    str(tmp_path / 'c')] + share, capsys)
    assert 'was saved from another model: model.backbone.pe_join is ' \
        "dict(type='Default') there but dict(type='Share')" in line
    # the safe loader refuses pickled code under FlexibleRunner too
    unsafe = tmp_path / 'unsafe.pth'
    torch.save({'state_dict': state, 'x': Payload()}, unsafe)
    line = one_line_error(
        test.main,
        [DEMO, str(unsafe), '--work-dir',
         str(tmp_path / 'd')] + tool_options(pos_shapes_data, 1, FLEX), capsys)
    assert 'Refusing to load checkpoint' in line and 'posix.system' in line


@pytest.mark.parametrize('strategy, expect', [
    (['strategy.type=DeepSpeedStrategy'
      ], 'error: strategy=DeepSpeedStrategy: DeepSpeedStrategy saves each '
     'checkpoint as a folder in its own layout'),
    (['strategy.type=ColossalAIStrategy'
      ], 'error: strategy=ColossalAIStrategy: ColossalAIStrategy saves each '
     'checkpoint as a folder'),
    (['strategy.type=FSDPStrategy', 'strategy.state_dict_cfg=local'],
     "error: strategy=FSDPStrategy: FSDPStrategy with state_dict_cfg='local' "
     'saves each checkpoint as a folder of per-rank shards'),
    (['strategy.type=NoSuchStrategy'
      ], "error: strategy.type='NoSuchStrategy' is not a strategy"),
])
def test_unsupported_strategy_is_refused_at_start(strategy, expect,
                                                  pos_shapes_data, tmp_path,
                                                  capsys):
    work = tmp_path / 'w'
    line = one_line_error(train.main,
                          [DEMO, '--work-dir', str(work)] +
                          tool_options(pos_shapes_data, 1, FLEX, *strategy),
                          capsys)
    assert line.startswith(expect), line
    assert not [n for n in os.listdir(work) if n.endswith('.pth')]


def test_single_device_strategy_in_several_processes_is_refused(monkeypatch):
    from mmengine.config import Config

    from mmlape.hosts.runner_setup import check_flexible_runner
    monkeypatch.setenv('WORLD_SIZE', '2')
    cfg = Config(
        dict(
            runner_type='FlexibleRunner',
            launcher='pytorch',
            strategy=dict(type='SingleDeviceStrategy')))
    with pytest.raises(ValueError, match='in 2 processes: each would train'):
        check_flexible_runner(cfg, on_cpu=True, world_size=2)
    cfg.strategy = dict(
        type='DDPStrategy', model_wrapper=dict(find_unused_parameters=True))
    check_flexible_runner(cfg, on_cpu=True, world_size=2)
    assert cfg.strategy.model_wrapper == dict(
        find_unused_parameters=True,
        type='MMDistributedDataParallel',
        broadcast_buffers=False,
        device_ids=None)


def test_fsdp_on_a_cpu_torch_cannot_shard_is_refused_naming_why(monkeypatch):
    """torch 2.13 runs FSDP on the CPU (the two-process test below); a
    torch that cannot is named, with what works instead."""
    import torch.distributed.fsdp as fsdp
    from mmengine.config import Config

    from mmlape.hosts.runner_setup import check_flexible_runner

    def cannot(*args, **kwargs):
        raise RuntimeError('FSDP needs a non-CPU accelerator device, but no '
                           'accelerator device is detected.')

    monkeypatch.setattr(fsdp, 'FullyShardedDataParallel', cannot)
    cfg = Config(
        dict(
            runner_type='FlexibleRunner',
            launcher='pytorch',
            strategy=dict(type='FSDPStrategy')))
    with pytest.raises(ValueError) as info:
        check_flexible_runner(cfg, on_cpu=True, world_size=2)
    assert str(info.value) == (
        f'strategy=FSDPStrategy on the CPU: torch {torch.__version__} does '
        f'not run FSDP on the CPU (FSDP needs a non-CPU accelerator device, '
        f'but no accelerator device is detected.); use DDPStrategy there, '
        f'or GPUs')


# ----------------------------------------------------------------------
# the atomic checkpoint hook under FlexibleRunner (a toy model)


def toy_flexible_runner(work_dir, max_iters, resume=False, **hook):
    loader = dict(
        dataset=ToyData(),
        sampler=dict(type='DefaultSampler', shuffle=False),
        batch_size=2,
        num_workers=0,
        collate_fn=dict(type='default_collate'))
    return FlexibleRunner(
        model=ToyModel(),
        work_dir=str(work_dir),
        train_dataloader=loader,
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        default_hooks=dict(
            checkpoint=dict(
                type='AtomicCheckpointHook',
                interval=1,
                by_epoch=False,
                **hook)),
        experiment_name=f'flex{time.monotonic_ns()}',
        resume=resume,
        default_scope='mmengine')


def test_strategy_saves_are_atomic_and_old_ones_removed_after(
        tmp_path, monkeypatch):
    events = []
    replace, remove = os.replace, os.remove
    written = []
    put = AtomicLocalBackend.put

    def on_replace(src, dst):
        assert osp.basename(src).startswith(PARTIAL_PREFIX)
        replace(src, dst)
        events.append(('write', osp.basename(dst)))

    def on_remove(path):
        remove(path)
        events.append(('remove', osp.basename(path)))

    def on_put(self, obj, filepath):  # only last_checkpoint goes this way
        written.append(osp.basename(str(filepath)))
        put(self, obj, filepath)

    monkeypatch.setattr(os, 'replace', on_replace)
    monkeypatch.setattr(os, 'remove', on_remove)
    monkeypatch.setattr(AtomicLocalBackend, 'put', on_put)
    toy_flexible_runner(tmp_path, 3, max_keep_ckpts=1).train()
    assert events == [
        ('write', 'iter_1.pth'),
        ('write', 'last_checkpoint'),
        ('write', 'iter_2.pth'),
        ('write', 'last_checkpoint'),
        ('remove', 'iter_1.pth'),
        ('write', 'iter_3.pth'),
        ('write', 'last_checkpoint'),
        ('remove', 'iter_2.pth'),
    ]
    assert not [n for n in os.listdir(tmp_path) if n.startswith('.mmlape-p')]
    assert (tmp_path / 'iter_3.pth').stat().st_mode & 0o044 == 0o044
    assert safe_torch_load(str(tmp_path / 'iter_3.pth'))['meta']['iter'] == 3


@pytest.mark.parametrize('code', [errno.ENOSPC, errno.EACCES, errno.EROFS])
def test_failed_strategy_save_is_one_line_and_keeps_the_last(
        code, tmp_path, monkeypatch, capsys):
    import mmengine.runner.checkpoint as ckpt_io

    from tools.common import fail
    runner = toy_flexible_runner(tmp_path, 3, max_keep_ckpts=1)
    save = ckpt_io.save_checkpoint

    def save_until_broken(checkpoint, filename, *args, **kwargs):
        if checkpoint['meta']['iter'] == 3:
            raise OSError(code, os.strerror(code), filename)
        save(checkpoint, filename, *args, **kwargs)

    monkeypatch.setattr(ckpt_io, 'save_checkpoint', save_until_broken)
    with pytest.raises(SystemExit) as info, fail(running=True):
        runner.train()
    assert info.value.code == 2
    intact = str(tmp_path / 'iter_2.pth')
    assert capsys.readouterr().err.splitlines() == [
        f'error: could not write "{tmp_path / "iter_3.pth"}": '
        f'{os.strerror(code)}; "{intact}" is intact (--resume continues '
        f'from it)'
    ]
    assert sorted(n for n in os.listdir(tmp_path)
                  if n.endswith('.pth')) == ['iter_2.pth']
    assert not [n for n in os.listdir(tmp_path) if n.startswith('.mmlape-p')]
    assert safe_torch_load(intact)['meta']['iter'] == 2


# ----------------------------------------------------------------------
# two gloo processes under tools/dist_train.sh and tools/dist_test.sh


@pytest.mark.slow
@pytest.mark.parametrize('strategy, port', [('DDPStrategy', 29661),
                                            ('FSDPStrategy', 29664)])
def test_two_cpu_processes_train_resume_test(strategy, port, pos_shapes_data,
                                             tmp_path):
    """Each run ends cleanly: no traceback and no library warning on
    stderr."""
    from conftest import demo_options
    opts = demo_options(pos_shapes_data, 4,
                        2) + [FLEX, f'strategy.type={strategy}']
    full, resumed = str(tmp_path / 'full'), str(tmp_path / 'resumed')
    runs = [
        ['bash', 'tools/dist_train.sh', DEMO, '2', '--work-dir', full] + opts,
        [
            'bash', 'tools/dist_train.sh', DEMO, '2', '--work-dir', resumed,
            '--resume',
            osp.join(full, 'iter_2.pth')
        ] + opts,
        [
            'bash', 'tools/dist_test.sh', DEMO,
            osp.join(full, 'iter_4.pth'), '2', '--work-dir',
            str(tmp_path / 'test')
        ] + opts,
    ]
    logs = []
    for i, args in enumerate(runs):
        out = run(args, env=dict(PORT=str(port + i)), timeout=600)
        assert 'Traceback' not in out.stderr and 'Warning' not in \
            out.stderr, out.stderr[-3000:]
        logs.append(out.stdout)
    assert 'resumed epoch: 0, iter: 2' in logs[1]
    if strategy == 'FSDPStrategy':
        assert 'FSDPStrategy on the CPU: the full state dict is gathered ' \
            'without offloading' in logs[0]
    # one checkpoint file with the plain model's keys, equal after resume
    state = safe_torch_load(osp.join(full, 'iter_4.pth'))['state_dict']
    assert 'backbone.pos_embed' in state
    assert_same_training_state(
        osp.join(full, 'iter_4.pth'),
        osp.join(resumed, 'iter_4.pth'),
        exact=strategy == 'FSDPStrategy')
    with open(tmp_path / 'test' / 'test_metrics.json') as f:
        assert 0 <= json.load(f)['accuracy/top1'] <= 100
