"""The work dir: one run at a time (a live run's lock stops a second one,
naming it; a dead run's lock does not), and every OS error on it one line
naming the file, the cause and the checkpoint that is intact: a full disk
at the start, a lost permission or a read-only file system during a save,
a log that can no longer be written (without a logging traceback per
line)."""
import errno
import logging
import os
import os.path as osp
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
from conftest import DEMO, ROOT, one_line_error, tool_options

import mmlape  # noqa: F401

sys.path.insert(0, ROOT)
from tools import train  # noqa: E402

# ----------------------------------------------------------------------
# one run per work dir


def _hold_in_child(work_dir):
    """Fork a process that holds ``work_dir`` (as a run does) until it is
    killed; return its pid once it holds it."""
    from mmlape.hosts.work_dir import lock_work_dir
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            lock_work_dir(str(work_dir), command='tools/train.py other.py')
            os.write(write, b'held')
            signal.pause()
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 4) == b'held'
    os.close(read)
    return pid


def test_a_held_work_dir_stops_a_second_run_and_a_dead_holder_does_not(
        tmp_path):
    from mmlape.hosts.work_dir import lock_work_dir
    from mmlape.utils.errors import WorkDirInUseError
    pid = _hold_in_child(tmp_path)
    try:
        with pytest.raises(WorkDirInUseError) as info:
            lock_work_dir(str(tmp_path))
        message = str(info.value)
        assert message.startswith(
            f'work dir "{tmp_path}" is in use by another run: pid {pid} on '
            f'host {socket.gethostname()} (since ')
        assert message.endswith('tools/train.py other.py); wait for it to '
                                'end, or pass another --work-dir')
    finally:
        os.kill(pid, signal.SIGKILL)  # a crash: no chance to clean up
        os.waitpid(pid, 0)
    lock = lock_work_dir(str(tmp_path))
    assert lock.enforced and lock_work_dir(str(tmp_path)) is lock
    lock.release()


def test_import_and_lock_without_fcntl(tmp_path):
    """Where ``fcntl`` does not exist (Windows, where mmengine and mmcv
    run), ``import mmlape`` works and the work dir lock is taken through
    ``filelock`` (here, with no OS lock to use, it says so and goes on)."""
    code = ('import sys\n'
            "sys.modules['fcntl'] = None  # import fcntl now fails\n"
            'import mmlape, mmlape.hosts, mmlape.apis\n'
            'from mmlape.hosts.work_dir import lock_work_dir\n'
            f'lock = lock_work_dir({str(tmp_path)!r})\n'
            "print('locked', lock.enforced)\n"
            'lock.release()\n')
    out = subprocess.run([sys.executable, '-c', code],
                         cwd=ROOT,
                         capture_output=True,
                         text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == 'locked False'
    assert 'does not lock files' in out.stderr


def test_a_dead_runs_record_is_not_named(tmp_path):
    """The record a killed run left beside the lock names nobody: a new
    holder replaces it, and a reader skips a record of a dead process."""
    import json

    from mmlape.hosts.work_dir import HOLDER_NAME, _holder, lock_work_dir
    record = tmp_path / HOLDER_NAME
    record.write_text(
        json.dumps(dict(pid=2**22 + 7, host=socket.gethostname())))
    assert _holder(str(record)) == {}
    lock = lock_work_dir(str(tmp_path), command='tools/train.py mine.py')
    try:
        found = _holder(str(record))
        assert found['pid'] == os.getpid()
        assert found['command'] == 'tools/train.py mine.py'
    finally:
        lock.release()


@pytest.mark.slow
def test_second_training_in_a_work_dir_stops_naming_the_first(
        pos_shapes_data, tmp_path, capsys):
    """Two tools/train.py runs in one work dir: the second stops with one
    line naming the first (its process and host) and removes nothing; once
    the first is killed, --resume continues in that work dir."""
    work = tmp_path / 'work'
    first = subprocess.Popen(
        [sys.executable, 'tools/train.py', DEMO, '--work-dir',
         str(work)] + tool_options(pos_shapes_data, 300, interval=1),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, OMP_NUM_THREADS='1'))
    try:
        deadline = time.monotonic() + 120
        while not (work / 'iter_1.pth').exists():
            assert first.poll() is None, 'the first run ended'
            assert time.monotonic() < deadline
            time.sleep(0.2)
        line = one_line_error(
            train.main,
            [DEMO, '--work-dir', str(work)] + tool_options(pos_shapes_data, 1),
            capsys)
        assert line.startswith(
            f'error: work dir "{work}" is in use by another run: pid '
            f'{first.pid} on host {socket.gethostname()} (since ')
        assert 'tools/train.py' in line
        assert first.poll() is None  # the first run goes on
    finally:
        first.kill()
        first.wait()
    steps = [
        int(n[5:-4]) for n in os.listdir(work)
        if n.startswith('iter_') and n.endswith('.pth')
    ]
    assert steps  # nothing of the first run was removed
    last = max(steps)
    assert train.main(
        [DEMO, '--work-dir', str(work), '--resume'] +
        tool_options(pos_shapes_data, last + 1, interval=1)) == 0
    assert (work / f'iter_{last + 1}.pth').exists()


# ----------------------------------------------------------------------
# a full disk at the start


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_at_the_start_is_one_line(pos_shapes_data, tmp_path,
                                            monkeypatch, capsys):
    from mmengine.config import Config
    work = tmp_path / 'work'
    assert train.main([DEMO, '--work-dir', str(work)] +
                      tool_options(pos_shapes_data, 1)) == 0
    intact = work / 'iter_1.pth'
    # the runner's copy of the config: an empty file fits, its text not
    monkeypatch.setattr(Config, 'dump', _no_space)
    line = one_line_error(train.main,
                          [DEMO, '--work-dir', str(work)] +
                          tool_options(pos_shapes_data, 2), capsys)
    assert line == (f'error: could not write a file in the work dir '
                    f'"{work}": No space left on device; "{intact}" is '
                    f'intact (--resume continues from it)')
    assert osp.isfile(intact)


def test_the_work_dir_check_writes_enough_to_see_a_full_disk(
        tmp_path, monkeypatch):
    from mmlape.apis import UsageError
    from mmlape.hosts.work_dir import check_work_dir
    monkeypatch.setattr(os, 'fsync', _no_space)
    with pytest.raises(UsageError) as info:
        check_work_dir(str(tmp_path / 'w'))
    assert str(info.value) == (
        f'work dir "{tmp_path / "w"}" cannot be written: No space left on '
        f'device; no earlier checkpoint exists')


# ----------------------------------------------------------------------
# a lost permission or a read-only file system during a save


@pytest.mark.parametrize('code', [errno.EACCES, errno.EPERM, errno.EROFS])
def test_write_refused_during_a_save_is_one_line(code, pos_shapes_data,
                                                 tmp_path, monkeypatch,
                                                 capsys):
    work = tmp_path / 'work'
    mkstemp = tempfile.mkstemp

    def refused_once_saved(*args, **kwargs):
        # the temporary files of the saves after iter_2
        last = work / 'last_checkpoint'
        if last.exists() and last.read_text().endswith('iter_2.pth'):
            raise OSError(code, os.strerror(code), kwargs.get('dir'))
        return mkstemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, 'mkstemp', refused_once_saved)
    line = one_line_error(train.main,
                          [DEMO, '--work-dir', str(work)] +
                          tool_options(pos_shapes_data, 3, interval=1), capsys)
    intact = work / 'iter_2.pth'
    assert line == (f'error: could not write "{work / "iter_3.pth"}": '
                    f'{os.strerror(code)}; "{intact}" is intact (--resume '
                    f'continues from it)')
    assert (work / 'last_checkpoint').read_text() == str(intact)
    assert not [n for n in os.listdir(work) if n.startswith('.mmlape-p')]


# ----------------------------------------------------------------------
# a log that can no longer be written


@pytest.mark.parametrize('what', ['log', 'scalars'])
def test_unwritable_log_ends_the_run_with_one_line(what, pos_shapes_data,
                                                   tmp_path, monkeypatch,
                                                   capsys):
    """The disk fills after the checkpoint of iteration 2: the log file
    (its writes now fail as on a full disk, /dev/full) or the scalar log
    of the visualizer. No logging traceback reaches stderr; the run stops
    at once with one line naming the file and the intact checkpoint."""
    from mmengine.logging import MMLogger
    from mmengine.visualization import LocalVisBackend

    from mmlape.hosts.hooks import AtomicCheckpointHook
    save = AtomicCheckpointHook._save_checkpoint_with_step
    full = []

    def save_then_fill(self, runner, step, meta):
        save(self, runner, step, meta)
        if step == 2:
            for handler in MMLogger.get_current_instance().handlers:
                if isinstance(handler, logging.FileHandler):
                    full.append(handler.baseFilename)
                    if what == 'log':
                        handler.stream = open('/dev/full', 'w')

    add_scalars = LocalVisBackend.add_scalars

    def scalars_until_full(self, *args, **kwargs):
        if full and what == 'scalars':
            path = osp.join(self._save_dir, self._scalar_save_file)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        add_scalars(self, *args, **kwargs)

    monkeypatch.setattr(AtomicCheckpointHook, '_save_checkpoint_with_step',
                        save_then_fill)
    monkeypatch.setattr(LocalVisBackend, 'add_scalars', scalars_until_full)
    work = tmp_path / 'work'
    line = one_line_error(train.main,
                          [DEMO, '--work-dir', str(work)] +
                          tool_options(pos_shapes_data, 6, interval=2), capsys)
    failed = full[0] if what == 'log' else osp.join(
        osp.dirname(full[0]), 'vis_data', 'scalars.json')
    intact = work / 'iter_2.pth'
    assert line == (f'error: could not write "{failed}": No space left on '
                    f'device; "{intact}" is intact (--resume continues from '
                    f'it)')
    assert not (work / 'iter_4.pth').exists()  # stopped at once
