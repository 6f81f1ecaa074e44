"""Adjust a host module right after it is imported (:func:`after_import`),
and with it keep mmpretrain importable beside transformers 5.

mmpretrain <= 1.2.0 imports its multimodal models whenever transformers is
installed, and they import names transformers 5 removed, so ``import
mmpretrain.models`` (and mmdet, which imports it) fails. mmlape uses none
of them: :func:`keep_mmpretrain_importable` sets mmpretrain's
``WITH_MULTIMODAL`` flag to False before it is read, so mmpretrain
registers its placeholders instead. Neither library is imported here.
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
