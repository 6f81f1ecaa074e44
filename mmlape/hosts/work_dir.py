"""The work dir: checked writable before a run, held by one live run at a
time (:func:`lock_work_dir`), and an OS error on one of its files turned
into one :class:`~mmlape.utils.errors.WorkDirError` line naming the file,
the cause and the intact checkpoint.

References:
    The ``filelock`` package: an OS lock on the lock file (``flock`` on
    POSIX, ``msvcrt`` on Windows), which the OS drops when its process
    ends; ``import mmlape`` needs no ``fcntl``.
"""
import errno
import functools
import json
import logging
import os
import os.path as osp
import socket
import sys
import tempfile
import time
from typing import Any, Dict, Optional, Tuple

from filelock import FileLock, SoftFileLock, Timeout

from mmlape.utils.errors import (CheckpointPermissionError,
                                 CheckpointSaveError, UsageError, WorkDirError,
                                 WorkDirInUseError)

__all__ = [
    'LOCK_NAME', 'WRITE_ERRNOS', 'LogWriteGuard', 'WorkDirLock',
    'check_work_dir', 'intact_checkpoint', 'lock_work_dir',
    'release_work_dir_locks', 'work_dir_error', 'write_error'
]

#: The lock file in a work dir.
LOCK_NAME = '.mmlape-run.lock'
#: Beside it, what the holding run is (for the next run's message).
HOLDER_NAME = '.mmlape-run.json'
#: OS errors of a write that the user can act on (no space, quota, file
#: too large, no permission, read-only file system).
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES,
                errno.EPERM, errno.EROFS)
#: Those that mean "no room".
_NO_ROOM = WRITE_ERRNOS[:3]


def intact_checkpoint(work_dir: str) -> str:
    """What is intact in ``work_dir``: the checkpoint ``last_checkpoint``
    names, when it exists, else that there is none.

    Example:
        >>> import tempfile
        >>> intact_checkpoint(tempfile.mkdtemp())
        'no earlier checkpoint exists'
    """
    last = osp.join(work_dir, 'last_checkpoint')
    intact = None
    try:
        with open(last, encoding='utf-8') as f:
            intact = f.read().strip() or None
    except OSError:
        pass
    if intact and osp.isfile(intact):
        return f'"{intact}" is intact (--resume continues from it)'
    return 'no earlier checkpoint exists'


def _inside(path: str, folder: str) -> bool:
    path, folder = osp.abspath(path), osp.abspath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def write_error(err: OSError,
                work_dir: str,
                path: Optional[str] = None,
                checkpoint: bool = False) -> WorkDirError:
    """The one-line error for ``err``, an OS error writing ``path`` in a
    run whose work dir is ``work_dir``.

    Args:
        err (OSError): The error.
        work_dir (str): The run's work dir (where ``last_checkpoint`` is).
        path (str, optional): The file being written. Defaults to
            ``err.filename``.
        checkpoint (bool): The file is a checkpoint
            (:class:`~mmlape.utils.errors.CheckpointSaveError`). Defaults to
            False.

    Returns:
        WorkDirError: Names the file, the cause and what is intact
        (:func:`intact_checkpoint`); its ``errno`` is ``err``'s.

    Example:
        >>> import errno, tempfile
        >>> work = tempfile.mkdtemp()
        >>> err = OSError(errno.ENOSPC, 'No space left on device')
        >>> str(write_error(err, work, path=f'{work}/a.log')).endswith(
        ...     'a.log": No space left on device; no earlier checkpoint '
        ...     'exists')
        True
    """
    path = path or err.filename
    where = f'"{path}"' if path else f'a file in the work dir "{work_dir}"'
    cause = err.strerror or os.strerror(err.errno or 0)
    cls = WorkDirError
    if checkpoint:
        cls = CheckpointPermissionError if isinstance(
            err, PermissionError) else CheckpointSaveError
    found = cls(f'could not write {where}: {cause}; '
                f'{intact_checkpoint(work_dir)}')
    found.errno = err.errno
    return found


def work_dir_error(err: OSError, work_dir: str) -> Optional[WorkDirError]:
    """:func:`write_error` for an OS error on a file of ``work_dir``; None
    for another (a file elsewhere, or an error without a file name that no
    write explains: not one of :data:`WRITE_ERRNOS`)."""
    if err.errno is None:
        return None
    if err.filename is not None and not _inside(str(err.filename), work_dir):
        return None
    if err.filename is None and err.errno not in WRITE_ERRNOS:
        return None
    return write_error(err, work_dir)


# ----------------------------------------------------------------------
# one run per work dir


class WorkDirLock:
    """The lock of a work dir, held by this process until
    :meth:`release` or its end.

    Args:
        path (str): The lock file.
        lock (filelock.FileLock, optional): The held lock; None where the
            file system does not lock (the lock is then not enforced).
    """

    def __init__(self, path: str, lock: Optional[Any]) -> None:
        self.path = path
        self.lock = lock
        self.pid = os.getpid()

    @property
    def enforced(self) -> bool:
        return self.lock is not None

    def release(self) -> None:
        """Release the lock; the files stay."""
        if self.lock is not None:
            self.lock.release(force=True)
            self.lock = None
        _HELD.pop(osp.dirname(self.path), None)


#: Locks this process holds, by the work dir's real path.
_HELD: Dict[str, WorkDirLock] = {}


def check_work_dir(work_dir: str) -> None:
    """Create the work dir and write (and fsync) 64 KiB in it, so that a
    full disk or quota shows before the run starts.

    Raises:
        UsageError: The work dir cannot be created or written.
    """
    path = parent = osp.abspath(work_dir)
    while not osp.exists(parent) and osp.dirname(parent) != parent:
        parent = osp.dirname(parent)
    if not osp.isdir(parent):
        raise UsageError(f'work dir "{work_dir}" cannot be created: '
                         f'"{parent}" is a file')
    for action in ('created', 'written'):
        try:
            if action == 'created':
                os.makedirs(path, exist_ok=True)
            else:
                with tempfile.TemporaryFile(dir=path) as f:
                    f.write(bytes(1 << 16))
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as err:
            intact = ''
            if err.errno in _NO_ROOM:
                intact = f'; {intact_checkpoint(path)}'
            raise UsageError(f'work dir "{work_dir}" cannot be {action}: '
                             f'{err.strerror}{intact}') from None


def _alive(record: Dict[str, Any]) -> bool:
    """Whether the process a holder record names may still run (one of
    another host is taken as alive)."""
    if record.get('host') != socket.gethostname():
        return True
    try:
        os.kill(int(record['pid']), 0)
    except (OSError, ValueError, TypeError):
        return False
    return True


def _holder(path: str) -> Dict[str, str]:
    """What the holding run wrote beside the lock (it may be writing it
    still, over a dead run's record: read again for up to a second)."""
    for _ in range(10):
        try:
            with open(path, encoding='utf-8') as f:
                found = json.load(f)
            if isinstance(found, dict) and found.get('pid') and \
                    _alive(found):
                return found
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    return {}


def _not_enforced(work_dir: str, path: str, why: str) -> WorkDirLock:
    logging.getLogger(__name__).warning(
        'work dir "%s": the file system does not lock files (%s); nothing '
        'keeps another run out of it', work_dir, why)
    return WorkDirLock(path, None)


def lock_work_dir(work_dir: str, command: Optional[str] = None) -> WorkDirLock:
    """Hold ``work_dir`` for this run; refuse it when another live process
    holds it (an OS lock on ``.mmlape-run.lock`` through ``filelock``,
    dropped by the OS however the holder ends; the holder's process, host,
    start and command in ``.mmlape-run.json``). Asking again returns the
    held lock.

    Args:
        work_dir (str): The work dir (it exists).
        command (str, optional): What the run is, for the next run's
            message. Defaults to ``sys.argv[:2]``.

    Returns:
        WorkDirLock: The lock, not enforced (and logged as such) where the
        file system supports no locks.

    Raises:
        WorkDirInUseError: Another live process holds the work dir; the
            message names its process, host, start and command.
    """
    key = osp.realpath(work_dir)
    held = _HELD.get(key)
    if held is not None and held.pid == os.getpid() and held.enforced:
        return held
    path = osp.join(key, LOCK_NAME)
    if FileLock is SoftFileLock:  # no OS lock here (neither fcntl nor msvcrt)
        return _not_enforced(work_dir, path, 'no OS file lock')
    # no soft (file-exists) fall-back: a killed run would leave it held
    lock = FileLock(
        path,
        timeout=0,
        thread_local=False,
        fallback_to_soft=False,
        preserve_lock_file=True)
    try:
        lock.acquire()
    except Timeout:
        holder = _holder(osp.join(key, HOLDER_NAME))
        who = (f'pid {holder.get("pid", "?")} on host '
               f'{holder.get("host", "?")}')
        since = holder.get('started')
        what = holder.get('command')
        detail = ', '.join(
            x for x in (f'since {since}' if since else '', what or '') if x)
        raise WorkDirInUseError(
            f'work dir "{work_dir}" is in use by another run: {who}'
            f'{f" ({detail})" if detail else ""}; wait for it to end, or '
            f'pass another --work-dir') from None
    except (OSError, NotImplementedError) as err:
        return _not_enforced(work_dir, path,
                             getattr(err, 'strerror', None) or str(err))
    record = dict(
        pid=os.getpid(),
        host=socket.gethostname(),
        started=time.strftime('%Y-%m-%d %H:%M:%S'),
        command=command or ' '.join(sys.argv[:2]))
    holder = osp.join(key, HOLDER_NAME)
    with open(holder + '.tmp', 'w', encoding='utf-8') as f:
        json.dump(record, f)
    os.replace(holder + '.tmp', holder)
    held = WorkDirLock(path, lock)
    _HELD[key] = held
    return held


def release_work_dir_locks() -> None:
    """Release every work dir lock this process holds (at the end of a run
    that does not end the process)."""
    for lock in list(_HELD.values()):
        if lock.pid == os.getpid():
            lock.release()


# ----------------------------------------------------------------------
# log files that cannot be written


class LogWriteGuard:
    """Stop each watched log file at its first failed write and keep that
    failure for :meth:`check` (``logging`` would print a traceback per
    record, e.g. per line on a full disk).

    Example:
        >>> guard = LogWriteGuard()
        >>> guard.watch(logging.getLogger('some.run'))
        >>> guard.failure is None
        True
    """

    def __init__(self) -> None:
        self.failure: Optional[Tuple[str, OSError]] = None

    def watch(self, logger: logging.Logger) -> None:
        """Watch the file handlers of ``logger``."""
        for handler in logger.handlers:
            if isinstance(handler, logging.FileHandler):
                handler.handleError = functools.partial(  # type: ignore
                    self._failed, handler)

    def _failed(self, handler: logging.FileHandler,
                record: logging.LogRecord) -> None:
        err = sys.exc_info()[1]
        if not isinstance(err, OSError):
            logging.Handler.handleError(handler, record)
            return
        if self.failure is None:
            self.failure = (handler.baseFilename, err)
        handler.setLevel(logging.CRITICAL + 1)  # takes no further record
        stream, handler.stream = handler.stream, None
        try:  # closes the file even where its last flush fails
            if stream is not None:
                stream.close()
        except OSError:
            pass

    def check(self, work_dir: str) -> None:
        """Raise the first failure as one line, if there was one.

        Raises:
            WorkDirError: Names the log file, the cause and what is intact.
        """
        if self.failure is None:
            return
        path, err = self.failure
        raise write_error(err, work_dir, path=path)
