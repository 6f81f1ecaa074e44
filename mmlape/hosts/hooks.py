"""Hooks that keep a run's work dir sound.

:class:`AtomicCheckpointHook` is mmengine's ``CheckpointHook`` writing each
checkpoint and ``last_checkpoint`` atomically and removing outdated ones
only afterwards (mmengine removes first and writes in place, so a kill
could leave a partial file or a ``last_checkpoint`` naming a deleted one).
:class:`WorkDirGuardHook` ends a run whose log file can no longer be
written with one line.

References:
    The POSIX atomic replace (temporary file, ``fsync``, ``rename``,
    ``fsync`` the directory).
"""
import contextlib
import os
import os.path as osp
import tempfile
from typing import Any, Callable, Iterator, List, Optional, Union

from mmengine.dist import is_main_process
from mmengine.fileio import LocalBackend, register_backend
from mmengine.hooks import CheckpointHook, Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS as MMENGINE_HOOKS

from mmlape.registry import HOOKS
from mmlape.utils.errors import ConfigError, InputError
from .strategies import strategy_refusal
from .work_dir import LogWriteGuard, write_error

__all__ = [
    'AtomicCheckpointHook', 'AtomicLocalBackend', 'WorkDirGuardHook',
    'atomic_write', 'PARTIAL_PREFIX'
]

#: Temporary files start with this (hidden, and never a checkpoint's name).
PARTIAL_PREFIX = '.mmlape-partial-'
PARTIAL_SUFFIX = '.tmp'
#: The name of the file backend that :class:`AtomicCheckpointHook` uses.
BACKEND_NAME = 'mmlape_atomic_local'


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(dirname: str) -> None:
    try:
        fd = os.open(dirname or '.', os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - file systems that refuse it
        pass
    finally:
        os.close(fd)


def _partial_file(dirname: str):
    """A new temporary file in ``dirname`` (its descriptor and path), with
    the permissions a new file gets (``mkstemp`` makes it private)."""
    fd, tmp = tempfile.mkstemp(
        prefix=PARTIAL_PREFIX, suffix=PARTIAL_SUFFIX, dir=dirname)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    return fd, tmp


def atomic_write(path: str, data: Union[bytes, memoryview]) -> None:
    """Write ``data`` to ``path`` so that ``path`` is never partial (via a
    hidden :data:`PARTIAL_PREFIX` file in the same directory, renamed).

    Args:
        path (str): The file to write.
        data (bytes): Its new content.

    Example:
        >>> import tempfile, os.path as osp
        >>> d = tempfile.mkdtemp()
        >>> atomic_write(osp.join(d, 'last_checkpoint'), b'iter_2.pth')
        >>> open(osp.join(d, 'last_checkpoint')).read()
        'iter_2.pth'
    """
    path = str(path)
    dirname = osp.dirname(osp.abspath(path))
    os.makedirs(dirname, exist_ok=True)
    fd, tmp = _partial_file(dirname)
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if osp.exists(tmp):
            os.remove(tmp)
        raise
    _fsync_dir(dirname)


class AtomicLocalBackend(LocalBackend):
    """mmengine's local file backend, with :func:`atomic_write` for
    ``put`` and ``put_text``."""

    def put(self, obj: bytes, filepath: Union[str, os.PathLike]) -> None:
        atomic_write(str(filepath), obj)

    def put_text(self,
                 obj: str,
                 filepath: Union[str, os.PathLike],
                 encoding: str = 'utf-8') -> None:
        atomic_write(str(filepath), obj.encode(encoding))


register_backend(BACKEND_NAME, AtomicLocalBackend, force=True)


class _RemovalRecorder:
    """Stands in for a file backend and records removals instead of making
    them; everything else goes to the real backend."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.removed: List[str] = []

    def remove(self, path: str) -> None:
        self.removed.append(path)

    def rmtree(self, path: str) -> None:
        self.removed.append(path)

    def __getattr__(self, name: str) -> Callable:
        return getattr(self._backend, name)


class AtomicCheckpointHook(CheckpointHook):
    """mmengine's ``CheckpointHook`` with atomic saves, removing old
    checkpoints only after the new one is in place.

    Takes mmengine's ``CheckpointHook`` arguments. With a local
    ``out_dir`` and no ``backend_args``/``file_client_args`` every
    checkpoint goes through :class:`AtomicLocalBackend`; a remote one uses
    its storage's writes (with a warning). Under ``FlexibleRunner`` the
    strategy writes to a temporary name that is renamed when complete; a
    strategy saving a folder is refused. A failed save is one
    :class:`~mmlape.utils.errors.CheckpointSaveError`.

    Example:
        >>> default_hooks = dict(
        ...     checkpoint=dict(
        ...         type='AtomicCheckpointHook', interval=1, by_epoch=False,
        ...         max_keep_ckpts=1))
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.atomic = (
            self.backend_args is None and self.file_client_args is None
            and (self.out_dir is None or '://' not in str(self.out_dir)))
        if self.atomic:
            self.backend_args = dict(backend=BACKEND_NAME)

    def before_train(self, runner) -> None:
        strategy = getattr(runner, 'strategy', None)  # FlexibleRunner
        if strategy is not None:
            kind = getattr(strategy, 'state_dict_type', None)
            why = strategy_refusal(type(strategy), getattr(kind, 'name', kind))
            if why:
                raise ConfigError(f'AtomicCheckpointHook: {why}')
        # Removals a kill prevented: point last_checkpoint at the resumed
        # checkpoint before removing them (mmengine would remove at once).
        hub = runner.message_hub
        recorded = list(hub.runtime_info.get('keep_ckpt_ids') or [])
        stale: List[int] = []
        if 0 < self.max_keep_ckpts < len(recorded):
            kept = recorded[-self.max_keep_ckpts:]
            stale = [
                i for i in recorded[:-self.max_keep_ckpts] if i not in kept
            ]
            hub.update_info('keep_ckpt_ids', kept)
        super().before_train(runner)
        if stale and is_main_process():
            paths = [
                self.file_backend.join_path(self.out_dir,
                                            self.filename_tmpl.format(step))
                for step in stale
            ]
            resumed = self.file_backend.join_path(
                self.out_dir,
                self.filename_tmpl.format(self.keep_ckpt_ids[-1]))
            last = osp.join(runner.work_dir, 'last_checkpoint')
            if osp.isfile(last) and self.file_backend.exists(resumed):
                with open(last) as f:
                    if f.read().strip() in map(str, paths):
                        self._write_last_checkpoint(runner, resumed)
            for path in paths:
                self._remove(path)
        if not self.atomic:
            runner.logger.warning(
                f'AtomicCheckpointHook: out_dir={self.out_dir!r} is not a '
                f'local directory; checkpoints are written by its storage '
                f'backend, not atomically')
            return
        if is_main_process() and osp.isdir(self.out_dir):
            for name in os.listdir(self.out_dir):
                if name.startswith(PARTIAL_PREFIX) and name.endswith(
                        PARTIAL_SUFFIX):
                    os.remove(osp.join(self.out_dir, name))
                    print_log(
                        f'Removed {name}, the partial file of a save that '
                        f'was interrupted',
                        logger='current')

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        # FlexibleRunner's DDPStrategy saves the wrapper's state dict.
        state = checkpoint.get('state_dict')
        if (hasattr(runner, 'strategy') and is_model_wrapper(runner.model)
                and isinstance(state, dict) and state
                and all(k.startswith('module.') for k in state)):
            checkpoint['state_dict'] = type(state)(
                (k[len('module.'):], v) for k, v in state.items())

    @contextlib.contextmanager
    def _room_for(self, runner, path: str) -> Iterator[None]:
        """Turn an OS error of a save into one
        :class:`~mmlape.utils.errors.CheckpointSaveError`; under
        ``FlexibleRunner``, save atomically."""
        try:
            with self._atomic_strategy_saves(runner):
                yield
        except InputError:
            raise
        except OSError as err:
            if err.errno is None:
                raise
            raise write_error(
                err, runner.work_dir, path=path, checkpoint=True) from err

    @contextlib.contextmanager
    def _atomic_strategy_saves(self, runner) -> Iterator[None]:
        """While the block runs, ``runner.save_checkpoint`` (a strategy
        writing in place) writes a temporary file, renamed when complete."""
        if not (self.atomic and hasattr(runner, 'strategy')):
            yield
            return
        save = runner.save_checkpoint
        own = 'save_checkpoint' in vars(runner)

        def save_atomically(out_dir, filename, *args, **kwargs):
            if not is_main_process():  # takes part; rank 0 writes
                return save(out_dir, filename, *args, **kwargs)
            os.makedirs(out_dir, exist_ok=True)
            fd, tmp = _partial_file(out_dir)
            os.close(fd)
            try:
                save(out_dir, osp.basename(tmp), *args, **kwargs)
                _fsync_file(tmp)
                os.replace(tmp, osp.join(out_dir, filename))
            except BaseException:
                if osp.isfile(tmp):
                    os.remove(tmp)
                raise
            _fsync_dir(out_dir)

        runner.save_checkpoint = save_atomically
        try:
            yield
        finally:
            if own:
                runner.save_checkpoint = save
            else:
                del runner.save_checkpoint

    def _save_checkpoint_with_step(self, runner, step: int,
                                   meta: dict) -> None:
        filename = self.filename_tmpl.format(step)
        outdated_ids: List[int] = []
        if self.max_keep_ckpts > 0 and not (self.keep_ckpt_ids and
                                            self.keep_ckpt_ids[-1] == step):
            while len(self.keep_ckpt_ids) >= self.max_keep_ckpts:
                outdated_ids.append(self.keep_ckpt_ids.popleft())
            self.keep_ckpt_ids.append(step)
            # Recorded untrimmed: a run resumed after a kill before the
            # removals makes them (before_train).
            runner.message_hub.update_info(
                'keep_ckpt_ids', [i for i in outdated_ids if i != step] +
                list(self.keep_ckpt_ids))
        outdated = [
            self.file_backend.join_path(self.out_dir,
                                        self.filename_tmpl.format(old))
            for old in outdated_ids
        ]
        self.last_ckpt = self.file_backend.join_path(self.out_dir, filename)
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)

        with self._room_for(runner, self.last_ckpt):
            runner.save_checkpoint(
                self.out_dir,
                filename,
                self.file_client_args,
                save_optimizer=self.save_optimizer,
                save_param_scheduler=self.save_param_scheduler,
                meta=meta,
                by_epoch=self.by_epoch,
                backend_args=self.backend_args,
                **self.args)
        if outdated_ids:
            runner.message_hub.update_info('keep_ckpt_ids',
                                           list(self.keep_ckpt_ids))
        if not is_main_process():
            return
        self._write_last_checkpoint(runner, self.last_ckpt)
        for path in outdated:
            if path != self.last_ckpt:
                self._remove(path)

    def _save_best_checkpoint(self, runner, metrics: dict) -> None:
        # mmengine removes the previous best checkpoint before it writes the
        # new one; record those removals and make them after the save.
        backend = self.file_backend
        recorder = _RemovalRecorder(backend)
        self.file_backend = recorder
        try:
            with self._room_for(runner, f'the best checkpoint in '
                                f'{self.out_dir}'):
                super()._save_best_checkpoint(runner, metrics)
        finally:
            self.file_backend = backend
        keep = {
            str(p)
            for p in [getattr(self, 'best_ckpt_path', None), self.last_ckpt] +
            list(getattr(self, 'best_ckpt_path_dict', {}).values()) if p
        }
        for path in recorder.removed:
            if str(path) not in keep:
                self._remove(path)

    def _write_last_checkpoint(self, runner, path: str) -> None:
        last = osp.join(runner.work_dir, 'last_checkpoint')
        with self._room_for(runner, last):
            self._write_text(last, path)

    def _write_text(self, last: str, path: str) -> None:
        if self.atomic:
            atomic_write(last, str(path).encode())
        else:
            with open(last, 'w') as f:
                f.write(str(path))

    def _remove(self, path: Optional[str]) -> None:
        if not is_main_process() or not path:
            return
        if self.file_backend.isfile(path):
            self.file_backend.remove(path)
        elif self.file_backend.isdir(path):  # deepspeed saves directories
            self.file_backend.rmtree(path)


class WorkDirGuardHook(Hook):
    """End a run whose log file can no longer be written with one
    :class:`~mmlape.utils.errors.WorkDirError`, at the end of that
    iteration (the tools register it on every run).

    Args:
        guard (LogWriteGuard, optional): Watches the runner's log files.
            Defaults to a new one.
    """

    priority = 'VERY_HIGH'

    def __init__(self, guard: Optional[LogWriteGuard] = None) -> None:
        self.guard = guard or LogWriteGuard()

    def watch(self, runner) -> None:
        """Watch the log files of ``runner``'s logger."""
        self.guard.watch(runner.logger)

    def before_run(self, runner) -> None:
        self.watch(runner)
        self.guard.check(runner.work_dir)

    def _check(self, runner, *args, **kwargs) -> None:
        self.guard.check(runner.work_dir)

    after_train_iter = after_val_iter = after_test_iter = _check
    after_train_epoch = after_val_epoch = after_test_epoch = _check
    after_run = _check


HOOKS.register_module(module=AtomicCheckpointHook)
MMENGINE_HOOKS.register_module(module=AtomicCheckpointHook)
HOOKS.register_module(module=WorkDirGuardHook)
MMENGINE_HOOKS.register_module(module=WorkDirGuardHook)
