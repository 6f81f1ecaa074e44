"""Safe loading of OpenMMLab checkpoints on torch >= 2.6.

References:
    ``torch.serialization.add_safe_globals`` (the ``weights_only`` unpickler);
    mmengine's ``CheckpointLoader`` and the training state it saves
    (``message_hub`` with ``HistoryBuffer`` objects holding numpy arrays).

torch >= 2.6 loads with ``weights_only=True`` by default, and mmengine 0.10.7
calls ``torch.load`` without that argument, so resuming, ``load_from`` and
testing fail on the few non-tensor objects an mmengine checkpoint carries.
mmlape keeps ``weights_only=True`` and allow-lists exactly those objects. A
checkpoint that carries anything else is refused with
:class:`UnsafeCheckpointError`, which names the file and the offending
globals.
"""
import pickle
from typing import Any, Callable, List, Optional

import numpy as np
import torch

__all__ = [
    'UnsafeCheckpointError', 'openmmlab_safe_globals', 'safe_torch_load',
    'install_safe_loading'
]


class UnsafeCheckpointError(pickle.UnpicklingError):
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

    A pickled ``HistoryBuffer`` refers to its statistics methods as
    ``getattr(HistoryBuffer, 'mean')``. Allow-listing the real ``getattr``
    would hand every attribute of every allowed object to a checkpoint;
    this resolves public methods of ``HistoryBuffer`` only.

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

    ``HistoryBuffer`` (the message hub's logged scalars) with a
    ``getattr`` limited to its statistics methods, the numpy array, dtype
    and scalar reconstructors it needs, and nothing else: optimizer and
    scheduler states, ``meta`` and model weights are tensors and plain
    containers, which ``weights_only`` already accepts.

    Returns:
        list: Entries for ``torch.serialization.add_safe_globals``.
    """
    from mmengine.logging.history_buffer import HistoryBuffer
    return [HistoryBuffer,
            (history_buffer_method, 'builtins.getattr')] + _numpy_globals()


def _unsafe_globals(filename: str) -> List[str]:
    getter = getattr(torch.serialization, 'get_unsafe_globals_in_checkpoint',
                     None)
    if getter is None:  # pragma: no cover - torch < 2.5
        return []
    try:
        return list(getter(filename))
    except Exception:  # pragma: no cover - not a zip checkpoint
        return []


def safe_torch_load(filename: str, map_location: Optional[Any] = None) -> Any:
    """``torch.load`` with ``weights_only=True`` and a clear refusal.

    Args:
        filename (str): Path of the checkpoint file.
        map_location (optional): As for ``torch.load``. Defaults to None.

    Returns:
        The loaded object (usually a dict).

    Raises:
        UnsafeCheckpointError: The file holds pickled objects outside the
            allow-list of :func:`openmmlab_safe_globals`.
    """
    try:
        return torch.load(
            filename, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        offending = _unsafe_globals(str(filename))
        names = ', '.join(offending) if offending else 'see below'
        raise UnsafeCheckpointError(
            f'Refusing to load checkpoint "{filename}": it contains pickled '
            f'objects that are neither tensors nor OpenMMLab training state '
            f'({names}). mmlape loads checkpoints with weights_only=True and '
            f'never unpickles arbitrary objects. If you trust the file, '
            f'convert it to a plain state dict first. Original error: '
            f'{str(err).splitlines()[0]}') from None


def _load_from_local(filename: str, map_location: Optional[Any] = None) -> Any:
    import os.path as osp
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'Checkpoint "{filename}" does not exist')
    return safe_torch_load(filename, map_location=map_location)


_INSTALLED = False


def install_safe_loading() -> None:
    """Allow-list OpenMMLab globals and make mmengine load local files safely.

    Called when :mod:`mmlape` is imported; calling it again does nothing.
    ``weights_only`` stays on for every ``torch.load`` in the process.
    """
    global _INSTALLED
    if _INSTALLED:
        return
    torch.serialization.add_safe_globals(openmmlab_safe_globals())
    from mmengine.runner.checkpoint import CheckpointLoader
    loader: Callable = _load_from_local
    CheckpointLoader.register_scheme(prefixes='', loader=loader, force=True)
    _INSTALLED = True
