"""mmengine and torch load checkpoints safely, local or remote.

:func:`install_safe_loading` points every scheme of mmengine's
``CheckpointLoader`` (local paths, ``http(s)://``, ``s3://`` and the other
file backends, ``torchvision://``, ``open-mmlab://``, ``mmcls://``) at
:func:`~mmlape.utils.safe_load.load_checkpoint`, and allow-lists the same
objects for every other ``torch.load`` of the process. mmengine's own
loaders unpickle a downloaded file with ``weights_only=False`` (through
``torch.hub.load_state_dict_from_url``), so a checkpoint named by URL could
run code; here it cannot.
"""
import logging
import os.path as osp
from typing import Any, Callable, Dict, Optional

import torch
from mmengine.logging import print_log

from mmlape.utils.safe_load import load_checkpoint, openmmlab_safe_globals

__all__ = ['install_safe_loading', 'model_url', 'provide_checkpoint']

#: Checkpoints the tools have read (and converted) already, by the source
#: mmengine will load next (:func:`provide_checkpoint`).
_PROVIDED: Dict[str, Any] = {}


def provide_checkpoint(source: str, checkpoint: Any) -> None:
    """Make mmengine's next load of ``source`` return ``checkpoint``
    (read and converted by a tool before the run) instead of reading the
    file again; forgotten once served."""
    _PROVIDED[str(source)] = checkpoint


#: mmengine's schemes that name a model instead of a file: the prefix and
#: the function of ``mmengine.runner.checkpoint`` giving the name -> URL
#: table.
_NAMED = {
    'modelzoo://': 'get_torchvision_models',
    'torchvision://': 'get_torchvision_models',
    'open-mmlab://': 'get_external_models',
    'openmmlab://': 'get_external_models',
    'mmcls://': 'get_mmcls_models',
}


def model_url(filename: str) -> str:
    """The URL (or local path) that a named scheme's ``filename`` stands
    for, as mmengine's loaders look it up; other names unchanged.

    Raises:
        KeyError: The name is in none of mmengine's tables (one line).
    """
    from mmengine.runner import checkpoint as ckpt
    for prefix, table in _NAMED.items():
        if not filename.startswith(prefix):
            continue
        name = filename[len(prefix):]
        if table == 'get_external_models':
            deprecated = ckpt.get_deprecated_model_names()
            if name in deprecated:
                print_log(
                    f'{prefix}{name} is deprecated in favor of '
                    f'{prefix}{deprecated[name]}',
                    logger='current',
                    level=logging.WARNING)
                name = deprecated[name]
        urls = getattr(ckpt, table)()
        if name not in urls:
            raise KeyError(f'checkpoint "{filename}": mmengine knows no model '
                           f'"{name}" under {prefix}')
        url = urls[name]
        if '://' not in url:  # open-mmlab's local entries
            url = osp.join(ckpt._get_mmengine_home(), url)
        return url
    return filename


def _safe_loader(mmcls: bool = False) -> Callable:

    def load_safely(filename: str, map_location: Optional[Any] = None) -> Any:
        if str(filename) in _PROVIDED:
            return _PROVIDED.pop(str(filename))
        checkpoint = load_checkpoint(model_url(filename), map_location)
        if mmcls:
            from mmengine.runner.checkpoint import _process_mmcls_checkpoint
            checkpoint = _process_mmcls_checkpoint(checkpoint)
        return checkpoint

    load_safely._mmlape_safe = True
    return load_safely


def install_safe_loading() -> None:
    """Allow-list OpenMMLab's globals in torch and make every scheme of
    mmengine's ``CheckpointLoader`` load safely; calling it again changes
    nothing. ``weights_only`` stays on for every ``torch.load`` of the
    process."""
    from mmengine.runner.checkpoint import CheckpointLoader
    torch.serialization.add_safe_globals(openmmlab_safe_globals())
    for prefix in list(CheckpointLoader._schemes):
        loader = CheckpointLoader._schemes[prefix]
        if getattr(loader, '_mmlape_safe', False):
            continue
        # mmengine prints "Loads checkpoint by {name[10:]} backend"
        safe = _safe_loader(mmcls=prefix == 'mmcls://')
        safe.__name__ = loader.__name__
        CheckpointLoader.register_scheme(
            prefixes=prefix, loader=safe, force=True)
