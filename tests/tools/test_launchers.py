"""Launchers: ``--launcher pytorch`` outside torchrun names the missing
variables and the command that sets them; SIGTERM to tools/dist_train.sh
or tools/slurm_train.sh ends with status 143 once the ranks have stopped,
without a traceback (and an ordinary run's stderr holds no library
warning)."""
import os
import os.path as osp
import signal
import subprocess
import sys
import time

import pytest
from conftest import DEMO, ROOT, demo_options, one_line_error, tool_options
from test_slurm import fake_slurm  # noqa: F401  (a fixture)

import mmlape  # noqa: F401
from mmlape.apis import is_complete_checkpoint

sys.path.insert(0, ROOT)
from tools import test, train  # noqa: E402

TORCHRUN_VARIABLES = ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR',
                      'MASTER_PORT')


@pytest.mark.parametrize('tool', ['train', 'test'])
def test_pytorch_launcher_without_torchrun_names_what_is_missing(
        tool, pos_shapes_data, tmp_path, monkeypatch, capsys):
    for name in TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    main, argv = (train.main, [DEMO]) if tool == 'train' else (
        test.main, [DEMO, str(tmp_path / 'some.pth')])
    line = one_line_error(
        main, argv + ['--launcher', 'pytorch', '--work-dir',
                      str(tmp_path)] + tool_options(pos_shapes_data), capsys)
    # LOCAL_RANK is set from --local-rank (0) by the tools
    assert line == ('error: --launcher pytorch: RANK, WORLD_SIZE, '
                    'MASTER_ADDR, MASTER_PORT not set; start the processes '
                    'with torchrun: tools/dist_train.sh CONFIG GPUS, '
                    'tools/dist_test.sh CONFIG CHECKPOINT GPUS')


def _processes_with(text):
    """Pids of the processes whose command line contains ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _stop_when_saved(args, work, env, tmp_path):
    """Start ``args``, SIGTERM it once ``work`` holds a checkpoint; return
    its status and stderr."""
    err_path = tmp_path / 'stderr'
    with open(tmp_path / 'stdout', 'w') as out, open(err_path, 'w') as err:
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stdout=out,
            stderr=err,
            env=dict(os.environ, OMP_NUM_THREADS='1', **env))
        try:
            deadline = time.monotonic() + 300
            while not (work / 'iter_1.pth').exists():
                assert proc.poll() is None, err_path.read_text()[-3000:]
                assert time.monotonic() < deadline
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return status, err_path.read_text()


@pytest.mark.slow
def test_sigterm_to_dist_train_stops_the_ranks_with_status_143(
        pos_shapes_data, tmp_path):
    work = tmp_path / 'work'
    status, err = _stop_when_saved(
        ['bash', 'tools/dist_train.sh', DEMO, '2', '--work-dir',
         str(work)] + demo_options(pos_shapes_data, 500, 1), work,
        dict(PORT='29671'), tmp_path)
    assert status == 143, err[-3000:]
    assert 'Traceback' not in err and 'Warning' not in err, err[-3000:]
    assert _processes_with(str(work)) == []  # the ranks have stopped
    for name in os.listdir(work):
        if name.startswith('iter_'):
            assert is_complete_checkpoint(osp.join(work, name))


@pytest.mark.slow
def test_sigterm_to_slurm_train_ends_with_status_143(
        fake_slurm,  # noqa: F811
        pos_shapes_data,
        tmp_path):
    env, _ = fake_slurm
    work = tmp_path / 'work'
    status, err = _stop_when_saved([
        'bash', 'tools/slurm_train.sh', 'cpu', 'lape-demo', DEMO,
        str(work), *demo_options(pos_shapes_data, 500, 1)
    ], work, dict(env, GPUS='1', MASTER_PORT='29675'), tmp_path)
    assert status == 143, err[-3000:]
    assert 'Traceback' not in err, err[-3000:]
    assert _processes_with(str(work)) == []
