"""Checkpoints in the ``safetensors`` format (the one timm's hub serves):
read as a state dict wherever a ``.pth`` is read, and written by mmlape
with its ``meta`` (the recorded config) kept.

A safetensors file holds tensors and a string-to-string header, nothing
executable. mmlape keeps a checkpoint's ``meta`` there as JSON under
:data:`META_KEY`; a file with it loads as ``{'state_dict': ..., 'meta':
...}``, a file without it (timm's) as its flat state dict.

References:
    https://github.com/huggingface/safetensors (the format, the package).
"""
import json
import struct
from typing import Any, Dict, Mapping, Optional

import torch

from .errors import CheckpointError

__all__ = [
    'META_KEY', 'is_safetensors', 'load_safetensors', 'safetensors_bytes'
]

#: The header entry that holds an mmlape checkpoint's ``meta`` (JSON).
META_KEY = 'mmlape_meta'


def is_safetensors(filename: str) -> bool:
    """Whether ``filename`` starts as a safetensors file does: an 8-byte
    little-endian header length that fits in the file, then a JSON
    object."""
    import os
    try:
        size = os.path.getsize(filename)
        with open(filename, 'rb') as f:
            head = f.read(9)
    except OSError:
        return False
    if len(head) < 9 or head[8:9] != b'{':
        return False
    length = struct.unpack('<Q', head[:8])[0]
    return 2 <= length <= size - 8


def load_safetensors(filename: str,
                     map_location: Optional[Any] = None,
                     name: Optional[str] = None) -> Mapping:
    """Read a safetensors file.

    Args:
        filename (str): The file.
        map_location (optional): A device (``'cpu'``, ``'cuda:0'``,
            ``torch.device``) for the tensors; anything else reads them to
            the CPU. Defaults to None (the CPU).
        name (str, optional): How messages name the checkpoint (its URL).
            Defaults to ``filename``.

    Returns:
        dict: ``{'state_dict': tensors, 'meta': meta}`` for a file mmlape
        wrote with a ``meta``; the tensors otherwise.

    Raises:
        CheckpointError: The file is damaged or its header is not valid.
    """
    from safetensors import safe_open
    name = filename if name is None else name
    device = str(map_location) if isinstance(map_location,
                                             (str, torch.device)) else 'cpu'
    try:
        with safe_open(filename, framework='pt', device=device) as f:
            header = f.metadata() or {}
            tensors = {key: f.get_tensor(key) for key in f.keys()}
    except Exception as err:  # safetensors raises its own error types
        reason = ' '.join(str(err).split()) or type(err).__name__
        raise CheckpointError(f'checkpoint "{name}" cannot be read: it is a '
                              f'damaged safetensors file ({reason})') from None
    if META_KEY not in header:
        return tensors
    try:
        meta = json.loads(header[META_KEY])
    except ValueError:
        raise CheckpointError(
            f'checkpoint "{name}" cannot be read: its "{META_KEY}" header '
            f'entry is not JSON') from None
    return dict(state_dict=tensors, meta=meta)


def safetensors_bytes(checkpoint: Mapping) -> bytes:
    """A checkpoint's state dict (and ``meta``) as a safetensors file.

    Args:
        checkpoint (Mapping): ``{'state_dict': ..., 'meta': ...}``, or a
            flat state dict of tensors.

    Returns:
        bytes: The file's contents; tensors that share memory (tied
        weights) are stored once each.

    Example:
        >>> data = safetensors_bytes({'state_dict': {'w': torch.ones(2)},
        ...                           'meta': {'epoch': 3}})
        >>> data[8:9]
        b'{'
    """
    from safetensors.torch import save
    state = checkpoint.get('state_dict', checkpoint)
    tensors: Dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f'state_dict["{key}"] is a {type(value).__name__}'
                             f', not a tensor: safetensors holds tensors '
                             f'only')
        tensors[key] = value.detach().to('cpu').contiguous().clone()
    header = {'format': 'pt'}
    if 'state_dict' in checkpoint and checkpoint.get('meta') is not None:
        header[META_KEY] = json.dumps(
            checkpoint['meta'], default=str, sort_keys=True)
    return _sorted_header(save(tensors, metadata=header))


def _sorted_header(data: bytes) -> bytes:
    """The same file with its JSON header's keys in sorted order (the
    safetensors package writes its metadata in hash-map order, so the same
    checkpoint would give other bytes, and another sha256, each time)."""
    length = struct.unpack('<Q', data[:8])[0]
    header = json.loads(data[8:8 + length])
    text = json.dumps(header, sort_keys=True, separators=(',', ':'))
    text += ' ' * (-len(text) % 8)  # the format's 8-byte alignment
    return struct.pack('<Q', len(text)) + text.encode() + data[8 + length:]
