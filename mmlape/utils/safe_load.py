"""Safe loading of checkpoints, local or by URL, on torch >= 2.6.

:func:`load_checkpoint` reads any checkpoint source: a local file, an
``http(s)://`` URL (downloaded once to the torch hub cache,
:mod:`.download`) or a path of mmengine's other file backends, in the
PyTorch format or as ``.safetensors`` (:mod:`.safetensors_file`).
:func:`safe_torch_load` keeps ``weights_only=True`` and allow-lists exactly
the few non-tensor objects an mmengine checkpoint carries (torch >= 2.6
would refuse them). Anything else is refused with
:class:`UnsafeCheckpointError`; a file that is no checkpoint (empty,
truncated, damaged, a plain Python pickle) with
:class:`~mmlape.utils.errors.CheckpointError`, before torch reads it.
"""
import argparse
import os.path as osp
import pickle
import re
import struct
import zipfile
from typing import Any, List, Mapping, Optional

import numpy as np
import torch

from .download import is_remote, local_copy, remove_cached
from .errors import CheckpointError, CheckpointNotFoundError
from .safetensors_file import is_safetensors, load_safetensors

__all__ = [
    'UnsafeCheckpointError', 'check_checkpoint_file', 'load_checkpoint',
    'openmmlab_safe_globals', 'safe_torch_load'
]

#: How ``torch.save``'s legacy (pre-1.6, non-zip) format begins: its magic
#: number pickled as a 10-byte long (after the protocol's header).
_LEGACY_MAGIC = b'\x8a\x0a' + (0x1950a86a20f9469cfc6c).to_bytes(10, 'little')


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
    """A checkpoint holds pickled objects that mmlape will not unpickle."""


def _numpy_globals() -> List[Any]:
    """numpy objects that appear in pickled arrays, dtypes and scalars."""
    try:  # numpy >= 2
        from numpy._core import multiarray
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core import multiarray
    found = [multiarray._reconstruct, multiarray.scalar, np.ndarray, np.dtype]
    # numpy >= 1.25 pickles a dtype through its class, e.g. Float64DType.
    dtypes = getattr(np, 'dtypes', None)
    if dtypes is not None:
        for name in dir(dtypes):
            obj = getattr(dtypes, name)
            if isinstance(obj, type) and issubclass(obj, np.dtype):
                found.append(obj)
    return found


def history_buffer_method(owner: Any, name: str) -> Any:
    """A narrow stand-in for ``builtins.getattr`` while unpickling.

    A pickled ``HistoryBuffer`` refers to its methods as
    ``getattr(HistoryBuffer, 'mean')``; the real ``getattr`` would expose
    every attribute, this resolves ``HistoryBuffer``'s public methods only.

    Raises:
        pickle.UnpicklingError: For any other object or attribute.
    """
    from mmengine.logging.history_buffer import HistoryBuffer
    if (owner is HistoryBuffer and isinstance(name, str)
            and not name.startswith('_')
            and callable(getattr(HistoryBuffer, name, None))):
        return getattr(HistoryBuffer, name)
    raise pickle.UnpicklingError(
        f'getattr({owner!r}, {name!r}) is not allowed in a checkpoint')


def openmmlab_safe_globals() -> List[Any]:
    """The globals that mmengine/OpenMMLab training checkpoints contain.

    ``HistoryBuffer`` with a narrow ``getattr``, the numpy reconstructors
    it needs, and ``argparse.Namespace`` (the official DeiT/LaPE ``args``);
    everything else in a checkpoint is tensors and plain containers.

    Returns:
        list: Entries for ``torch.serialization.add_safe_globals``.
    """
    from mmengine.logging.history_buffer import HistoryBuffer
    return [
        argparse.Namespace, HistoryBuffer,
        (history_buffer_method, 'builtins.getattr')
    ] + _numpy_globals()


def _unsafe_globals(filename: str) -> List[str]:
    getter = getattr(torch.serialization, 'get_unsafe_globals_in_checkpoint',
                     None)
    if getter is None:  # pragma: no cover - torch < 2.5
        return []
    try:
        return list(getter(filename))
    except Exception:  # pragma: no cover - not a zip checkpoint
        return []


def check_checkpoint_file(filename: str, name: Optional[str] = None) -> str:
    """Refuse a file that cannot be a checkpoint, before anything reads it.

    A checkpoint is a zip archive (``torch.save``), a legacy ``torch.save``
    pickle (before torch 1.6) or a safetensors file; an interrupted write
    leaves a zip without its directory, which is written last.

    Args:
        filename (str): Path of the checkpoint file.
        name (str, optional): How messages name it (its URL). Defaults to
            ``filename``.

    Returns:
        str: ``'zip'``, ``'legacy'`` or ``'safetensors'``.

    Raises:
        CheckpointNotFoundError: The file does not exist.
        CheckpointError: The file is empty, truncated, a plain Python
            pickle, or no checkpoint at all; the message names the file and
            the reason.
    """
    name = filename if name is None else name
    if not osp.isfile(filename):
        raise CheckpointNotFoundError(f'checkpoint "{name}" does not exist')
    try:
        with open(filename, 'rb') as f:
            head = f.read(32)
    except OSError as err:
        raise CheckpointError(f'checkpoint "{name}" cannot be read: '
                              f'{err.strerror}') from None
    if not head:
        raise CheckpointError(
            f'checkpoint "{name}" cannot be read: the file is empty')
    if zipfile.is_zipfile(filename):
        return 'zip'
    if head.startswith(b'PK'):
        raise CheckpointError(
            f'checkpoint "{name}" cannot be read: it is truncated or '
            f'damaged (a zip archive without its end record, as an '
            f'interrupted save or copy leaves it)')
    if head[:1] == b'\x80' and _LEGACY_MAGIC in head:
        return 'legacy'
    if is_safetensors(filename):
        return 'safetensors'
    if head[0] == 0x80 and 2 <= head[1] <= 5:
        objects = _pickle_globals(filename)
        if objects:
            raise UnsafeCheckpointError(
                f'Refusing to load checkpoint "{name}": it is a plain Python '
                f'pickle (pickle.dump), not a PyTorch checkpoint, and holds '
                f'pickled objects ({", ".join(objects)}). mmlape never '
                f'unpickles arbitrary objects; save the tensors with '
                f'torch.save (or safetensors) instead.')
        raise CheckpointError(
            f'checkpoint "{name}" cannot be read: it is a plain Python '
            f'pickle (pickle.dump), not a PyTorch checkpoint; save the '
            f'tensors with torch.save (or safetensors) instead')
    raise CheckpointError(
        f'checkpoint "{name}" cannot be read: it is not a PyTorch '
        f'checkpoint (neither a torch.save file nor safetensors)')


def _pickle_globals(filename: str) -> List[str]:
    """The classes and functions a pickle names, read from its opcodes
    (:mod:`pickletools` parses, it never unpickles); those before a damage
    that stops the parse."""
    import pickletools
    found: List[str] = []
    strings: List[str] = []
    try:
        with open(filename, 'rb') as f:
            for op, arg, _ in pickletools.genops(f):
                if op.name == 'GLOBAL':
                    found.append(arg.replace(' ', '.'))
                elif op.name == 'STACK_GLOBAL' and len(strings) >= 2:
                    found.append('.'.join(strings[-2:]))
                elif isinstance(arg, str) and 'UNICODE' in op.name:
                    strings.append(arg)
    except Exception:  # a damaged pickle: what was read so far
        pass
    return list(dict.fromkeys(found))


def _weights_only_reason(err: Exception) -> str:
    """torch's specific reason, without its advice on how to load anyway."""
    text = str(err).split('WeightsUnpickler error:')[-1]
    for part in re.split(r'\n\s*\n', text):
        part = ' '.join(part.split())
        advice = ('Check the documentation', 'Weights only load failed')
        if part and 'weights_only' not in part and not part.startswith(advice):
            return part.rstrip('.')
    return 'the data is not a valid checkpoint'


def safe_torch_load(filename: str,
                    map_location: Optional[Any] = None,
                    mmap: bool = False,
                    name: Optional[str] = None) -> Any:
    """``torch.load`` with ``weights_only=True`` and a clear refusal; a
    safetensors file read as its state dict.

    Args:
        filename (str): Path of the checkpoint file.
        map_location (optional): As for ``torch.load``. Defaults to None.
        mmap (bool): Map the tensors' storage instead of reading it (zip
            checkpoints only), to look at ``meta`` cheaply. Defaults to
            False.
        name (str, optional): How messages name the checkpoint (the URL it
            was downloaded from). Defaults to ``filename``.

    Returns:
        The loaded object (usually a dict).

    Raises:
        CheckpointNotFoundError: The file does not exist.
        UnsafeCheckpointError: The file holds pickled objects outside the
            allow-list of :func:`openmmlab_safe_globals`.
        CheckpointError: The file is not a readable checkpoint (empty,
            truncated, random bytes, a plain pickle, damaged).
    """
    filename = str(filename)
    name = filename if name is None else str(name)
    kind = check_checkpoint_file(filename, name)
    if kind == 'safetensors':
        return load_safetensors(filename, map_location, name)
    allowed = set(torch.serialization.get_safe_globals())
    # torch's context removes its globals on exit: give it only the ones
    # the process does not allow already
    missing = [g for g in openmmlab_safe_globals() if g not in allowed]
    with torch.serialization.safe_globals(missing):
        return _load(filename, map_location, mmap and kind == 'zip', name)


def load_checkpoint(source: str,
                    map_location: Optional[Any] = None,
                    mmap: bool = False) -> Any:
    """Read a checkpoint from anywhere, always with :func:`safe_torch_load`.

    Args:
        source (str): A local path, an ``http(s)://`` URL (downloaded once
            to the torch hub cache; a copy that cannot be loaded is removed
            from it) or a path of another scheme that mmengine's file
            backends read (``s3://``, ...).
        map_location (optional): As for ``torch.load``. Defaults to None.
        mmap (bool): As for :func:`safe_torch_load`. Defaults to False.

    Returns:
        Mapping: The loaded checkpoint.

    Raises:
        CheckpointError: The source cannot be found, downloaded or read,
            holds pickled objects mmlape does not unpickle, or is no dict
            (a bare tensor, a list); one line that names ``source`` and the
            cause.
    """
    source = str(source)
    cached: List[str] = []
    with local_copy(source, cached) as path:
        name = source if is_remote(source) else path
        try:
            loaded = safe_torch_load(path, map_location, mmap=mmap, name=name)
        except CheckpointError:
            for copy in cached:
                remove_cached(copy)
            raise
    if not isinstance(loaded, Mapping):
        kind = type(loaded).__name__
        if isinstance(loaded, torch.Tensor):
            kind = f'single tensor of shape {tuple(loaded.shape)}'
        raise CheckpointError(
            f'checkpoint "{name}" holds a {kind}, not a checkpoint (a dict '
            f'of tensors, or one with a "state_dict"); save the model\'s '
            f'state_dict() instead')
    return loaded


def _load(filename: str, map_location: Optional[Any], mmap: bool,
          name: str) -> Any:
    try:
        return torch.load(
            filename, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        offending = _unsafe_globals(filename)
        if not offending:
            found = re.search(r'GLOBAL ([\w.]+)', str(err))
            offending = [found.group(1)] if found else []
        if not offending:
            raise CheckpointError(f'checkpoint "{name}" cannot be read: '
                                  f'{_weights_only_reason(err)}') from None
        raise UnsafeCheckpointError(
            f'Refusing to load checkpoint "{name}": it contains pickled '
            f'objects that are neither tensors nor OpenMMLab training state '
            f'({", ".join(offending)}). mmlape never unpickles arbitrary '
            f'objects; if you trust the file, convert it to a plain state '
            f'dict of tensors first.') from None
    except (RuntimeError, EOFError, OSError, ValueError, IndexError, KeyError,
            struct.error) as err:
        # What torch's readers raise on a damaged archive or a cut pickle.
        reason = str(err).strip().splitlines()[0] if str(err).strip() \
            else type(err).__name__
        raise CheckpointError(f'checkpoint "{name}" cannot be read: it '
                              f'is damaged ({reason})') from None
