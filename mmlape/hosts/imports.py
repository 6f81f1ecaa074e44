"""Adjust a host module right after it is imported (:func:`after_import`),
and keep mmpretrain importable beside transformers 5 with it.

mmpretrain 1.2.0 (its latest release) imports its multimodal models (BLIP,
BLIP-2, OFA, LLaVA, ...) whenever ``transformers >= 4.28`` is installed, and
those modules import names that transformers 5 no longer exports
(``apply_chunking_to_forward`` from ``transformers.modeling_utils``, for
one). With transformers 5 in the environment, ``import mmpretrain.models``
therefore fails (``TypeError: NoneType takes no arguments``), and so does
``import mmdet.models``, which imports mmpretrain: no classification,
detection or segmentation config of mmlape could be built. Seen on a GPU
machine whose image holds transformers 5.

mmlape uses none of those models. Where transformers >= 5 meets
mmpretrain <= 1.2.0, :func:`keep_mmpretrain_importable` tells mmpretrain
that its multimodal dependencies are missing, before mmpretrain reads that
flag; mmpretrain then registers the placeholders it has for that case
(building one raises an ImportError that asks for mmpretrain's multimodal
extras). It imports neither library: it reads their installed versions,
and patches ``mmpretrain.utils.dependency`` when (and if) something
imports it.
"""
import importlib.abc
import importlib.machinery
import importlib.metadata as metadata
import re
import sys
from typing import Callable, Optional, Tuple

#: The module of mmpretrain that computes ``WITH_MULTIMODAL``.
DEPENDENCY_MODULE = 'mmpretrain.utils.dependency'
#: The last mmpretrain release whose multimodal models need transformers 4.
LAST_AFFECTED_MMPRETRAIN = (1, 2, 0)
#: The first transformers major version they cannot import.
FIRST_BREAKING_TRANSFORMERS = 5


def _version(dist: str) -> Optional[Tuple[int, ...]]:
    """The leading numeric release of the installed ``dist``, or None."""
    try:
        text = metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
    found = re.match(r'\d+(\.\d+)*', text or '')
    return tuple(map(int, found.group().split('.'))) if found else None


def mmpretrain_needs_patch() -> bool:
    """Whether the installed mmpretrain's multimodal models cannot be
    imported beside the installed transformers."""
    pretrain, transformers = _version('mmpretrain'), _version('transformers')
    return (pretrain is not None and transformers is not None
            and pretrain[:3] <= LAST_AFFECTED_MMPRETRAIN
            and transformers[0] >= FIRST_BREAKING_TRANSFORMERS)


def _switch_off(module) -> None:
    module.WITH_MULTIMODAL = False


def keep_mmpretrain_importable() -> bool:
    """Switch mmpretrain's multimodal models off where they cannot be
    imported (see the module's docstring). Idempotent; returns whether the
    switch is (or will be) made."""
    if not mmpretrain_needs_patch():
        return False
    after_import(DEPENDENCY_MODULE, _switch_off)
    return True


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds one module as Python would, calls ``callback(module)`` right
    after the module's code has run, and leaves ``sys.meta_path``."""

    def __init__(self, fullname: str, callback: Callable) -> None:
        self.fullname = fullname
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.fullname:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run, callback = spec.loader.exec_module, self.callback

        def exec_module(module):
            run(module)
            callback(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)

        spec.loader.exec_module = exec_module
        return spec


def after_import(fullname: str, callback: Callable) -> None:
    """Call ``callback(module)`` once the module ``fullname`` is imported:
    at once if it already is, else right after its code first runs. Imports
    nothing itself.

    Args:
        fullname (str): A module's dotted name, e.g.
            ``'mmpretrain.apis.model'``.
        callback (callable): Called with the module.
    """
    loaded = sys.modules.get(fullname)
    if loaded is not None:
        callback(loaded)
        return
    for finder in sys.meta_path:
        if (isinstance(finder, _PatchOnImport) and finder.fullname == fullname
                and finder.callback is callback):
            return
    sys.meta_path.insert(0, _PatchOnImport(fullname, callback))
