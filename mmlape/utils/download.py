"""Checkpoints named by URL or by an mmengine file backend, brought to a
local file that :mod:`.safe_load` then reads with weights only.

An ``http(s)://`` URL is downloaded once to the torch hub cache
(``torch.hub.get_dir()/checkpoints``, the folder ``torch.hub`` and
mmengine use; a file already there is used as it is), through a temporary
file renamed into place when complete: an interrupted or cut-short
download never leaves a file there. Another scheme that mmengine's file
backends read (``s3://``, ``petrel://``, ...) is read into a temporary
file for each load, as mmengine's own loader reads it into memory.

References:
    ``torch.hub.load_state_dict_from_url`` (the cache folder and names),
    mmengine's ``CheckpointLoader`` schemes.
"""
import contextlib
import os
import os.path as osp
import re
import socket
import tempfile
import urllib.error
import urllib.request
from typing import Iterator, Optional
from urllib.parse import urlparse

from .errors import CheckpointError

__all__ = [
    'CheckpointDownloadError', 'cache_path', 'is_remote', 'local_copy',
    'remove_cached', 'url_cache_dir'
]

#: Seconds a download may wait for the server before it counts as failed.
TIMEOUT = 60
_CHUNK = 1 << 20
#: ``https://huggingface.co/<org>/<repo>/resolve/<revision>/<file>``: the
#: file name alone (``model.safetensors``) names no model.
_HF_RESOLVE = re.compile(r'^/([^/]+)/([^/]+)/resolve/[^/]+/(.+)$')


class CheckpointDownloadError(CheckpointError):
    """A checkpoint URL that could not be downloaded (the message names the
    URL and the cause)."""


def is_remote(source: str) -> bool:
    """Whether ``source`` names a checkpoint by a scheme (``https://``,
    ``s3://``, ``open-mmlab://``, ...) rather than a local path."""
    return '://' in str(source)


def url_cache_dir() -> str:
    """Where downloaded checkpoints are kept: ``torch.hub``'s folder
    (``$TORCH_HOME/hub/checkpoints``)."""
    import torch
    return osp.join(torch.hub.get_dir(), 'checkpoints')


def cache_path(url: str) -> str:
    """The file in :func:`url_cache_dir` that holds ``url``.

    The URL's file name, as ``torch.hub`` names it; for a Hugging Face hub
    file, whose name alone (``model.safetensors``) names no model,
    ``<org>--<repo>--<file>``.

    Example:
        >>> osp.basename(cache_path('https://x.org/deit_tiny-a1311bcf.pth'))
        'deit_tiny-a1311bcf.pth'
        >>> osp.basename(cache_path('https://huggingface.co/timm/vit_s/'
        ...                         'resolve/main/model.safetensors'))
        'timm--vit_s--model.safetensors'
    """
    parts = urlparse(url)
    found = _HF_RESOLVE.match(parts.path)
    if parts.netloc.endswith('huggingface.co') and found:
        name = '--'.join(found.groups()).replace('/', '--')
    else:
        name = osp.basename(parts.path)
    if not name or name in ('.', '..'):
        raise CheckpointDownloadError(
            f'checkpoint "{url}" names no file (the URL\'s path ends in '
            f'"/"); give the URL of the checkpoint file')
    return osp.join(url_cache_dir(), name)


def _download(url: str, dst: str) -> None:
    """Download ``url`` to ``dst`` through a temporary file beside it.

    Raises:
        CheckpointDownloadError: The server answered with an error, could
            not be reached, stalled, or sent fewer bytes than it announced.
    """
    from mmengine.logging import print_log
    folder = osp.dirname(dst)
    os.makedirs(folder, exist_ok=True)
    print_log(f'Downloading "{url}" to "{dst}"', logger='current')
    fd, tmp = tempfile.mkstemp(
        prefix=f'.{osp.basename(dst)}.', suffix='.partial', dir=folder)
    try:
        request = urllib.request.Request(url, headers={'User-Agent': 'mmlape'})
        with os.fdopen(fd, 'wb') as out, urllib.request.urlopen(
                request, timeout=TIMEOUT) as response:
            expected = response.headers.get('Content-Length')
            received = 0
            while True:
                chunk = response.read(_CHUNK)
                if not chunk:
                    break
                out.write(chunk)
                received += len(chunk)
        if expected is not None and expected.isdigit() and \
                received != int(expected):
            raise CheckpointDownloadError(
                f'checkpoint "{url}" cannot be downloaded: the download was '
                f'cut short ({received} of {int(expected)} bytes)')
        os.replace(tmp, dst)
    except urllib.error.HTTPError as err:
        raise CheckpointDownloadError(
            f'checkpoint "{url}" cannot be downloaded: the server answered '
            f'HTTP {err.code} {err.reason}') from None
    except urllib.error.URLError as err:
        reason = err.reason
        reason = getattr(reason, 'strerror', None) or str(reason)
        raise CheckpointDownloadError(
            f'checkpoint "{url}" cannot be downloaded: {reason}') from None
    except (socket.timeout, TimeoutError):
        raise CheckpointDownloadError(
            f'checkpoint "{url}" cannot be downloaded: the server sent '
            f'nothing for {TIMEOUT} s') from None
    except (ConnectionError, OSError) as err:
        if isinstance(err, CheckpointError):
            raise
        if isinstance(err, ConnectionError) or err.filename is None:
            reason = err.strerror or str(err) or type(err).__name__
            raise CheckpointDownloadError(
                f'checkpoint "{url}" cannot be downloaded: {reason}') from None
        raise CheckpointDownloadError(
            f'checkpoint "{url}" cannot be kept in "{folder}": '
            f'{err.strerror}') from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


def _download_once(url: str) -> str:
    """The cached copy of ``url``, downloaded first where there is none
    (one process at a time: the processes of a job wait for the first)."""
    from filelock import FileLock
    dst = cache_path(url)
    if osp.isfile(dst):
        return dst
    os.makedirs(osp.dirname(dst), exist_ok=True)
    with FileLock(dst + '.lock'):
        if not osp.isfile(dst):
            _download(url, dst)
    return dst


@contextlib.contextmanager
def _backend_copy(source: str) -> Iterator[str]:
    """A temporary file holding what mmengine's file backend reads for
    ``source`` (removed afterwards)."""
    from mmengine.fileio import get_file_backend
    try:
        data = get_file_backend(source).get(source)
    except Exception as err:  # the backends raise their own errors
        raise CheckpointDownloadError(
            f'checkpoint "{source}" cannot be read: {type(err).__name__}: '
            f'{err}') from None
    fd, tmp = tempfile.mkstemp(suffix=osp.splitext(source)[1] or '.pth')
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
        yield tmp
    finally:
        os.remove(tmp)


@contextlib.contextmanager
def local_copy(source: str, cached: Optional[list] = None) -> Iterator[str]:
    """A local file holding the checkpoint ``source``.

    Args:
        source (str): A local path (``~`` expanded), an ``http(s)://`` URL
            (downloaded once to :func:`url_cache_dir`) or a path of another
            scheme mmengine's file backends read.
        cached (list, optional): Receives the path of the cached download
            of a URL (so that a caller can remove a copy it refuses).

    Yields:
        str: The local file; a backend's temporary copy lives as long as
        the context.

    Raises:
        CheckpointDownloadError: A URL that cannot be downloaded, or a path
            the file backend cannot read.
    """
    source = str(source)
    if not is_remote(source):
        yield osp.expanduser(source)
    elif source.startswith(('http://', 'https://')):
        path = _download_once(source)
        if cached is not None:
            cached.append(path)
        yield path
    else:
        with _backend_copy(source) as path:
            yield path


def remove_cached(path: str) -> None:
    """Remove a cached download that cannot be loaded (the next load
    downloads it again instead of refusing the same copy)."""
    with contextlib.suppress(OSError):
        os.remove(path)
