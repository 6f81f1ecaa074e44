"""Nothing saved is lost: atomic checkpoints in every config, resume from the
newest complete checkpoint, SIGKILL during saves, and checkpoints of another
model refused by resume and test."""
import errno
import glob
import importlib
import json
import os
import os.path as osp
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT, ToyData, ToyModel
from mmengine.config import Config
from mmengine.evaluator import BaseMetric
from mmengine.runner import Runner

sys.path.insert(0, ROOT)  # tools.common

import mmlape  # noqa: F401
from mmlape.apis import find_resume_checkpoint, is_complete_checkpoint
from mmlape.datasets import generate_pos_shapes
from mmlape.hosts.hooks import (PARTIAL_PREFIX, AtomicCheckpointHook,
                                AtomicLocalBackend)
from mmlape.models.checkpoint.recorded import model_differences, recorded_model
from mmlape.utils.errors import CheckpointError
from mmlape.utils.safe_load import safe_torch_load

DEMO = 'configs/demo/deit-demo_pos-shapes.py'
#: Runners resume in this process: the tools' safe loading.
pytestmark = pytest.mark.usefixtures('hosts_applied')


def test_every_config_saves_with_the_atomic_hook():
    configs = sorted(glob.glob(osp.join(ROOT, 'configs', '**', '*.py')))
    assert len(configs) >= 20
    for path in configs:
        cfg = Config.fromfile(path)
        hook = dict(cfg.default_hooks.checkpoint)
        hooks = importlib.import_module(f'{cfg.default_scope}.registry').HOOKS
        assert hooks.get(hook['type']) is AtomicCheckpointHook, path
        built = hooks.build(hook)
        assert isinstance(built, AtomicCheckpointHook) and built.atomic, path


# ----------------------------------------------------------------------
# the hook, in process, on a toy model


class Rising(BaseMetric):
    """A metric that improves at every evaluation."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def process(self, data_batch, data_samples):
        self.results.append(0)

    def compute_metrics(self, results):
        self.calls += 1
        return dict(acc=float(self.calls))


def toy_runner(work_dir, max_iters, resume=False, load_from=None, **hook):
    loader = dict(
        dataset=ToyData(),
        sampler=dict(type='DefaultSampler', shuffle=False),
        batch_size=2,
        num_workers=0,
        collate_fn=dict(type='default_collate'))
    with_val = 'save_best' in hook
    return Runner(
        model=ToyModel(),
        work_dir=str(work_dir),
        train_dataloader=loader,
        val_dataloader=loader if with_val else None,
        val_evaluator=[Rising()] if with_val else None,
        val_cfg=dict() if with_val else None,
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)),
        train_cfg=dict(by_epoch=False, max_iters=max_iters, val_interval=1),
        default_hooks=dict(
            checkpoint=dict(
                type='AtomicCheckpointHook',
                interval=1,
                by_epoch=False,
                **hook)),
        experiment_name=f'toy{time.monotonic_ns()}',
        resume=resume,
        load_from=load_from,
        default_scope='mmengine')


@pytest.fixture
def fs_events(monkeypatch):
    """Record renames onto and removals of files, in order."""
    events = []
    replace, remove = os.replace, os.remove

    def on_replace(src, dst):
        replace(src, dst)
        events.append(('write', osp.basename(dst)))

    def on_remove(path):
        remove(path)
        events.append(('remove', osp.basename(path)))

    monkeypatch.setattr(os, 'replace', on_replace)
    monkeypatch.setattr(os, 'remove', on_remove)
    return events


def test_old_checkpoint_removed_only_after_new_one_and_last_checkpoint(
        tmp_path, fs_events):
    toy_runner(tmp_path, 3, max_keep_ckpts=1).train()
    assert fs_events == [
        ('write', 'iter_1.pth'),
        ('write', 'last_checkpoint'),
        ('write', 'iter_2.pth'),
        ('write', 'last_checkpoint'),
        ('remove', 'iter_1.pth'),
        ('write', 'iter_3.pth'),
        ('write', 'last_checkpoint'),
        ('remove', 'iter_2.pth'),
    ]
    files = [n for n in os.listdir(tmp_path) if not n.endswith('.py')]
    files = [n for n in files if osp.isfile(tmp_path / n)]
    assert sorted(files) == ['iter_3.pth', 'last_checkpoint']
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path /
                                                             'iter_3.pth')
    # Written through a temporary file, yet readable as torch.save makes it.
    assert (tmp_path / 'iter_3.pth').stat().st_mode & 0o044 == 0o044


def test_previous_best_removed_only_after_new_best(tmp_path, fs_events):
    toy_runner(tmp_path, 2, max_keep_ckpts=1, save_best='acc').train()
    best = [e for e in fs_events if 'best' in e[1]]
    assert best == [('write', 'best_acc_iter_1.pth'),
                    ('write', 'best_acc_iter_2.pth'),
                    ('remove', 'best_acc_iter_1.pth')]


def test_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    runner = toy_runner(tmp_path, 3, max_keep_ckpts=1)
    calls = []
    fsync = os.fsync

    def failing_fsync(fd):
        calls.append(fd)
        # Two per save (file, folder), two per last_checkpoint: the 9th is
        # the third checkpoint's file.
        if len(calls) == 9:
            raise OSError(28, 'No space left on device')
        fsync(fd)

    monkeypatch.setattr(os, 'fsync', failing_fsync)
    with pytest.raises(OSError, match='No space left'):
        runner.train()
    names = sorted(n for n in os.listdir(tmp_path) if n.endswith('.pth'))
    assert names == ['iter_2.pth']
    assert not [n for n in os.listdir(tmp_path) if n.startswith('.')]
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path /
                                                             'iter_2.pth')
    assert safe_torch_load(str(tmp_path / 'iter_2.pth'))['meta']['iter'] == 2


@pytest.mark.parametrize('code', [errno.ENOSPC, errno.EDQUOT])
def test_no_room_is_one_line_naming_file_cause_and_intact_checkpoint(
        tmp_path, monkeypatch, capsys, code):
    """A full disk or quota ends the run with one line and status 2 (not a
    traceback); the checkpoint it names is intact and loadable."""
    from tools.common import fail
    runner = toy_runner(tmp_path, 3, max_keep_ckpts=1)
    put = AtomicLocalBackend.put

    def put_until_full(self, obj, filepath):
        if str(filepath).endswith('iter_3.pth'):
            raise OSError(code, os.strerror(code))
        put(self, obj, filepath)

    monkeypatch.setattr(AtomicLocalBackend, 'put', put_until_full)
    with pytest.raises(SystemExit) as exit_info, fail(running=True):
        runner.train()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    intact = str(tmp_path / 'iter_2.pth')
    assert err == [
        f'error: could not write "{tmp_path / "iter_3.pth"}": '
        f'{os.strerror(code)}; "{intact}" is intact (--resume continues '
        f'from it)'
    ]
    assert safe_torch_load(intact)['meta']['iter'] == 2
    assert (tmp_path / 'last_checkpoint').read_text() == intact


def test_other_write_errors_keep_their_traceback(tmp_path, monkeypatch):
    runner = toy_runner(tmp_path, 1)

    def denied(self, obj, filepath):
        raise PermissionError(errno.EACCES, 'Permission denied')

    monkeypatch.setattr(AtomicLocalBackend, 'put', denied)
    with pytest.raises(PermissionError):
        runner.train()


def _kept_ids(path):
    info = safe_torch_load(str(path))['message_hub']['runtime_info']
    return info['keep_ckpt_ids']


def test_resume_after_a_kill_before_the_removal_removes_it(
        tmp_path, monkeypatch):

    class Killed(BaseException):
        pass

    def killed(self, path):
        raise Killed(path)

    with monkeypatch.context() as patch:
        patch.setattr(AtomicCheckpointHook, '_remove', killed)
        with pytest.raises(Killed, match='iter_1.pth'):
            toy_runner(tmp_path, 3, max_keep_ckpts=1).train()
    names = sorted(n for n in os.listdir(tmp_path) if n.endswith('.pth'))
    assert names == ['iter_1.pth', 'iter_2.pth']
    assert _kept_ids(tmp_path / 'iter_2.pth') == [1, 2]
    toy_runner(tmp_path, 3, resume=True, max_keep_ckpts=1).train()
    names = sorted(n for n in os.listdir(tmp_path) if n.endswith('.pth'))
    assert names == ['iter_3.pth']
    assert _kept_ids(tmp_path / 'iter_3.pth') == [2, 3]


def test_resume_after_a_kill_before_last_checkpoint_keeps_it_valid(
        tmp_path, monkeypatch):
    # Killed after iter_2.pth was written, before last_checkpoint named it:
    # resuming from iter_2 removes iter_1, which last_checkpoint still named.
    class Killed(BaseException):
        pass

    write = AtomicCheckpointHook._write_last_checkpoint
    calls = []

    def write_then_die(self, runner, path):
        calls.append(path)
        if len(calls) == 2:
            raise Killed(path)
        write(self, runner, path)

    with monkeypatch.context() as patch:
        patch.setattr(AtomicCheckpointHook, '_write_last_checkpoint',
                      write_then_die)
        with pytest.raises(Killed, match='iter_2.pth'):
            toy_runner(tmp_path, 3, max_keep_ckpts=1).train()
    last = tmp_path / 'last_checkpoint'
    assert last.read_text() == str(tmp_path / 'iter_1.pth')
    assert _kept_ids(tmp_path / 'iter_2.pth') == [1, 2]

    def save_then_die(self, *args, **kwargs):
        raise Killed('the first save of the resumed run')

    with monkeypatch.context() as patch:
        patch.setattr(AtomicCheckpointHook, '_save_checkpoint_with_step',
                      save_then_die)
        with pytest.raises(Killed):
            toy_runner(
                tmp_path,
                3,
                resume=True,
                load_from=str(tmp_path / 'iter_2.pth'),
                max_keep_ckpts=1).train()
    names = sorted(n for n in os.listdir(tmp_path) if n.endswith('.pth'))
    assert names == ['iter_2.pth']
    assert last.read_text() == str(tmp_path / 'iter_2.pth')


# ----------------------------------------------------------------------
# --resume without a path


def _cfg(work_dir):
    return Config(
        dict(
            work_dir=str(work_dir),
            default_hooks=dict(
                checkpoint=dict(type='AtomicCheckpointHook', by_epoch=False))))


def test_resume_picks_newest_complete_checkpoint(tmp_path):
    for step in (1, 3, 4):
        torch.save({'meta': {'iter': step}}, tmp_path / f'iter_{step}.pth')
    data = (tmp_path / 'iter_4.pth').read_bytes()
    (tmp_path / 'iter_4.pth').write_bytes(data[:len(data) // 2])
    (tmp_path / f'{PARTIAL_PREFIX}abc.tmp').write_bytes(data)
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_2.pth'))
    assert not is_complete_checkpoint(str(tmp_path / 'iter_4.pth'))
    assert find_resume_checkpoint(_cfg(tmp_path)) == str(tmp_path /
                                                         'iter_3.pth')
    # last_checkpoint is stale (it names iter_1) and iter_3 is newer.
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_1.pth'))
    assert find_resume_checkpoint(_cfg(tmp_path)) == str(tmp_path /
                                                         'iter_3.pth')


def test_resume_with_nothing_complete(tmp_path):
    assert find_resume_checkpoint(_cfg(tmp_path)) is None
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_9.pth'))
    with pytest.raises(CheckpointError) as info:
        find_resume_checkpoint(_cfg(tmp_path))
    assert 'iter_9.pth", which does not exist' in str(info.value)
    assert 'no other complete checkpoint' in str(info.value)


# ----------------------------------------------------------------------
# SIGKILL during saves, many times, then resume


class TrainServer:
    """tests/fork_train.py: forks real training runs of tools/train.py."""

    def __init__(self):
        env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONWARNINGS='ignore')
        self.proc = subprocess.Popen(
            [sys.executable,
             osp.join(ROOT, 'tests', 'fork_train.py')],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env)
        assert json.loads(self.proc.stdout.readline())['ready']

    def start(self, argv, log):
        self.proc.stdin.write(json.dumps(dict(argv=argv, log=log)) + '\n')
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())['pid']

    def wait(self):
        return json.loads(self.proc.stdout.readline())['status']

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _train_argv(data, work_dir, iters, resume):
    argv = [DEMO, '--work-dir', work_dir] + (['--resume'] if resume else [])
    return argv + ['--cfg-options'] + [
        f'{s}_dataloader.dataset.data_root={data}'
        for s in ('train', 'val', 'test')
    ] + [
        f'train_cfg.max_iters={iters}', f'train_cfg.val_interval={iters}',
        'default_hooks.checkpoint.interval=1',
        'default_hooks.checkpoint.max_keep_ckpts=1',
        'train_dataloader.batch_size=8', 'param_scheduler.0.end=2',
        'param_scheduler.1.begin=2', f'param_scheduler.1.end={iters}',
        'default_hooks.logger.interval=1',
        f'experiment_name=run{time.monotonic_ns()}'
    ]


def _check_work_dir(work_dir):
    """Every file under a checkpoint's name is complete; last_checkpoint
    names one that exists."""
    names = [n for n in os.listdir(work_dir) if n.startswith('iter_')]
    for name in names:
        state = safe_torch_load(osp.join(work_dir, name))
        assert state['meta']['iter'] == int(name[5:-4])
    record = osp.join(work_dir, 'last_checkpoint')
    if osp.exists(record):
        with open(record) as f:
            assert is_complete_checkpoint(f.read().strip())
    return names


@pytest.mark.slow
def test_sigkill_during_saves_then_resume_is_exact(tmp_path):
    data = str(tmp_path / 'data')
    generate_pos_shapes(data, num_train=64, num_val=8, seed=1)
    iters, kills = 14, 8
    rng = random.Random(11)
    server = TrainServer()
    try:
        ref = str(tmp_path / 'ref')
        server.start(_train_argv(data, ref, iters, False), ref + '.log')
        assert server.wait() == 0, open(ref + '.log').read()[-3000:]

        work = str(tmp_path / 'killed')
        log = work + '.log'
        during_save = after_save = 0
        saved = False
        for round_ in range(kills):
            pid = server.start(_train_argv(data, work, iters, True), log)
            mode = 'save' if round_ % 2 == 0 else 'random'
            deadline = time.monotonic() + 120
            killed = False
            while time.monotonic() < deadline and not killed:
                names = os.listdir(work) if osp.isdir(work) else []
                saving = any(n.startswith(PARTIAL_PREFIX) for n in names)
                if mode == 'save' and saving:
                    time.sleep(rng.uniform(0, 0.004))
                    killed = True
                elif mode == 'random' and any(
                        n.startswith('iter_') for n in names):
                    time.sleep(rng.uniform(0, 0.3))
                    killed = True
                else:
                    time.sleep(0.0005)
                if killed:
                    os.kill(pid, signal.SIGKILL)
            status = server.wait()
            if status == 0:  # the run finished before a kill landed
                break
            assert status == -signal.SIGKILL, open(log).read()[-3000:]
            left = os.listdir(work)
            if any(n.startswith(PARTIAL_PREFIX) for n in left):
                during_save += 1
            else:
                after_save += 1
            names = _check_work_dir(work)
            # Once a checkpoint has been saved, one is always there.
            assert names or not saved, f'round {round_} left none'
            saved = saved or bool(names)
        assert during_save >= 2, (during_save, after_save)

        server.start(_train_argv(data, work, iters, True), log)
        assert server.wait() == 0, open(log).read()[-3000:]
    finally:
        server.close()
    assert not [n for n in os.listdir(work) if n.startswith(PARTIAL_PREFIX)]
    assert _check_work_dir(work) == [f'iter_{iters}.pth']
    a = safe_torch_load(osp.join(ref, f'iter_{iters}.pth'))
    b = safe_torch_load(osp.join(work, f'iter_{iters}.pth'))
    for key, value in a['state_dict'].items():
        assert torch.equal(b['state_dict'][key], value), key
    state_a, state_b = a['optimizer']['state'], b['optimizer']['state']
    assert state_a.keys() == state_b.keys()
    for idx in state_a:
        for name in ('exp_avg', 'exp_avg_sq', 'step'):
            assert torch.equal(state_b[idx][name], state_a[idx][name])
    assert 'resumed' in open(log).read()


# ----------------------------------------------------------------------
# the model a checkpoint records


def test_recorded_model_is_read_without_running_it(tmp_path):
    text = Config.fromfile(osp.join(ROOT, DEMO)).pretty_text
    model = recorded_model(text)
    assert model['backbone']['pe_join'] == {'type': 'Default'}
    assert model['backbone']['img_size'] == 32
    assert model['backbone']['arch']['embed_dims'] == 96
    marker = tmp_path / 'ran'
    evil = f"model = dict(backbone=open({str(marker)!r}, 'w'))"
    parsed = recorded_model(evil)
    assert repr(parsed['backbone']).startswith('open(')
    assert not marker.exists()
    assert recorded_model('model = dict(') is None
    assert recorded_model(None) is None


@pytest.mark.parametrize('field, recorded, current', [
    ('pe_join', dict(pe_join=dict(type='Default')), dict(pe_join='Share')),
    ('pe_join', dict(pe_join=dict(type='LaPE')),
     dict(pe_join=dict(type='LaPE', hierarchical=False))),
    ('pe_join', dict(pe_join='MPVG'),
     dict(pe_join=dict(type='MPVG', last_pe_source=3))),
    ('pe_type', dict(), dict(pe_type='sincos2d')),
    ('type', dict(arch='deit-small'), dict(
        type='LaPEViTAdapter', arch='small')),
])
def test_backbone_differences_name_the_field(field, recorded, current):
    a = dict(dict(type='LaPEViT'), **recorded)
    b = dict(dict(type='LaPEViT'), **current)
    diffs = model_differences(a, b)
    assert [d[0] for d in diffs] == [field]
    assert diffs[0][1] != diffs[0][2]


@pytest.mark.parametrize('recorded, current', [
    (dict(with_cls_token=True), dict(with_cls_token=False)),
    (dict(arch='deit-tiny'), dict(arch='deit-small')),
    (dict(img_size=224), dict(img_size=(224, 384))),
])
def test_what_the_weights_show_is_left_to_the_strict_load(recorded, current):
    """The class token, the arch and a learnable PE's size change the keys
    or shapes (tests/apis/test_recorded_model.py: refused by the strict
    load)."""
    assert model_differences(
        dict(type='LaPEViT', **recorded), dict(type='LaPEViT',
                                               **current)) == []


def test_backbone_differences_fill_in_defaults():
    same = [
        (dict(pe_join=dict(type='LaPE')),
         dict(pe_join=dict(type='lape', hierarchical=True))),
        (dict(), dict(pe_join=None, pe_type='learnable')),
        (dict(arch='deit-tiny'),
         dict(
             arch=dict(
                 embed_dims=192,
                 num_layers=12,
                 num_heads=3,
                 feedforward_channels=768))),
        (dict(img_size=224), dict(img_size=[224, 224])),
    ]
    for a, b in same:
        assert model_differences(
            dict(type='LaPEViT', **a), dict(type='mmlape.LaPEViT', **b)) == []


def test_init_cfg_from_another_join_is_a_note(tmp_path, monkeypatch):
    from mmlape.analysis import build_from_config
    from mmlape.apis import model_check as launch
    mpvg = osp.join(ROOT, 'configs/demo/deit-demo-mpvg_pos-shapes.py')
    model, cfg = build_from_config(mpvg)
    ckpt = str(tmp_path / 'mpvg.pth')
    torch.save(
        {
            'state_dict': model.state_dict(),
            'meta': dict(cfg=cfg.pretty_text)
        }, ckpt)
    notes = []
    monkeypatch.setattr(launch, 'print_log',
                        lambda msg, **kwargs: notes.append(msg))
    cfg.model.backbone.pe_join = dict(type='PVG')
    cfg.model.backbone.init_cfg = dict(
        type='Pretrained', checkpoint=ckpt, prefix='backbone.')
    launch.note_finetune_sources(cfg)
    assert len(notes) == 1
    assert notes[0].startswith(f'model.backbone.init_cfg: "{ckpt}" was saved '
                               f'from another backbone (pe_join ')
    assert "dict(type='MPVG'" in notes[0] and "dict(type='PVG'" in notes[0]
    # The same join: nothing to note.
    notes.clear()
    cfg.model.backbone.pe_join = dict(type='MPVG')
    launch.note_finetune_sources(cfg)
    assert notes == []
