"""Checkpoints that a kill at any moment cannot take away.

References:
    mmengine's ``CheckpointHook`` and file backends; the POSIX atomic
    replace (write a temporary file in the same directory, ``fsync``,
    ``rename``, ``fsync`` the directory).

mmengine's hook removes the oldest checkpoint before writing the new one
and writes in place, so a kill can leave a partial file and a
``last_checkpoint`` naming a deleted one. :class:`AtomicCheckpointHook`
keeps mmengine's options and names but writes each file atomically,
replaces ``last_checkpoint`` the same way, and only then removes the
checkpoints it outdates (a resumed run finishes removals a kill
interrupted). A file under a checkpoint's name is always complete.
"""
import contextlib
import errno
import os
import os.path as osp
import tempfile
from typing import Any, Callable, Iterator, List, Optional, Union

from mmengine.dist import is_main_process
from mmengine.fileio import LocalBackend, register_backend
from mmengine.hooks import CheckpointHook
from mmengine.logging import print_log
from mmengine.registry import HOOKS as MMENGINE_HOOKS

from mmlape.registry import HOOKS
from mmlape.utils.errors import CheckpointSaveError

__all__ = [
    'AtomicCheckpointHook', 'AtomicLocalBackend', 'atomic_write',
    'PARTIAL_PREFIX'
]

#: Temporary files start with this (hidden, and never a checkpoint's name).
PARTIAL_PREFIX = '.mmlape-partial-'
PARTIAL_SUFFIX = '.tmp'
#: The name of the file backend that :class:`AtomicCheckpointHook` uses.
BACKEND_NAME = 'mmlape_atomic_local'
#: Write errors that mean "no room": the run cannot go on, and the user can
#: act on them (free space, another work dir); the message says so.
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


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


def atomic_write(path: str, data: Union[bytes, memoryview]) -> None:
    """Write ``data`` to ``path`` so that ``path`` is never partial.

    The bytes go to a hidden temporary file in the same directory, which is
    flushed to disk and then renamed to ``path`` (atomic on POSIX); the
    directory is flushed too. A kill at any moment leaves either the old
    ``path`` or the new one, and at worst a temporary file whose name starts
    with :data:`PARTIAL_PREFIX`.

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
    fd, tmp = tempfile.mkstemp(
        prefix=PARTIAL_PREFIX, suffix=PARTIAL_SUFFIX, dir=dirname)
    try:
        # mkstemp makes the file private; give it the usual permissions.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
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

    Takes the arguments of mmengine's ``CheckpointHook``. When ``out_dir``
    is a local directory (the default: the work dir) and no
    ``backend_args`` / ``file_client_args`` are given, every checkpoint
    (periodic, last, best) is written through :class:`AtomicLocalBackend`.
    For a remote ``out_dir`` the storage's own writes are used and a warning
    is logged.

    Temporary files of a save that was killed are removed at the start of
    the next run.

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
        # A resumed checkpoint may name checkpoints it outdated whose removal
        # a kill prevented. mmengine would remove them here at once, while
        # last_checkpoint may still name one of them; point last_checkpoint
        # at the resumed checkpoint first.
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

    @contextlib.contextmanager
    def _room_for(self, runner, path: str) -> Iterator[None]:
        """Turn a save that fails for lack of space or quota into one
        :class:`~mmlape.utils.errors.CheckpointSaveError` naming the file,
        the cause and the checkpoint that is intact (nothing is removed
        before a save has succeeded)."""
        try:
            yield
        except OSError as err:
            if err.errno not in NO_ROOM:
                raise
            last = osp.join(runner.work_dir, 'last_checkpoint')
            intact = None
            if osp.isfile(last):
                with open(last, encoding='utf-8') as f:
                    intact = f.read().strip() or None
            kept = (f'"{intact}" is intact (--resume continues from it)'
                    if intact and osp.isfile(intact) else
                    'no earlier checkpoint exists')
            raise CheckpointSaveError(
                f'could not write "{path}": '
                f'{err.strerror or os.strerror(err.errno)}; {kept}') from err

    def _save_checkpoint_with_step(self, runner, step: int,
                                   meta: dict) -> None:
        filename = self.filename_tmpl.format(step)
        outdated_ids: List[int] = []
        if self.max_keep_ckpts > 0 and not (self.keep_ckpt_ids and
                                            self.keep_ckpt_ids[-1] == step):
            while len(self.keep_ckpt_ids) >= self.max_keep_ckpts:
                outdated_ids.append(self.keep_ckpt_ids.popleft())
            self.keep_ckpt_ids.append(step)
            # The checkpoint records the ids before they are trimmed: a run
            # resumed from it after a kill that came before the removals
            # makes them (before_train).
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


HOOKS.register_module(module=AtomicCheckpointHook)
MMENGINE_HOOKS.register_module(module=AtomicCheckpointHook)
