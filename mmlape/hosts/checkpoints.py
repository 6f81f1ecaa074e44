"""mmengine and torch load OpenMMLab checkpoints safely.

:func:`install_safe_loading` makes mmengine's ``CheckpointLoader`` read
local files with :func:`~mmlape.utils.safe_load.safe_torch_load` and
allow-lists the same objects for every other ``torch.load`` of the process.
"""
import os.path as osp
from typing import Any, Optional

import torch

from mmlape.utils.safe_load import openmmlab_safe_globals, safe_torch_load

__all__ = ['install_safe_loading']


def _load_from_local(filename: str, map_location: Optional[Any] = None) -> Any:
    return safe_torch_load(osp.expanduser(filename), map_location=map_location)


def install_safe_loading() -> None:
    """Allow-list OpenMMLab's globals in torch and make mmengine load local
    files safely; calling it again changes nothing. ``weights_only`` stays
    on for every ``torch.load`` of the process."""
    from mmengine.runner.checkpoint import CheckpointLoader
    if CheckpointLoader._schemes.get('') is _load_from_local:
        return
    torch.serialization.add_safe_globals(openmmlab_safe_globals())
    CheckpointLoader.register_scheme(
        prefixes='', loader=_load_from_local, force=True)
