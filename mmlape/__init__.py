"""mmlape: layer-adaptive position embeddings for Vision Transformers.

Importing mmlape (``custom_imports=dict(imports=['mmlape'])`` in a config)
registers its models in the ``mmlape`` scope and in mmengine's root
registry, so mmpretrain, mmdet and mmseg configs can name them, and names
the package for mmengine's ``_base_ = 'mmlape::deit/...'``
(:mod:`mmlape.registry`). It does nothing else: it adjusts no host library
(the entry points that need an adjustment apply it, :mod:`mmlape.hosts`)
and imports no host task library (mmpretrain, mmdet, mmseg).
"""
from . import engine, models  # noqa: F401  (registers them)
from .version import __version__, version_info

__all__ = ['__version__', 'version_info']
