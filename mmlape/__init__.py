"""mmlape: layer-adaptive position embeddings for Vision Transformers.

Importing mmlape registers its models so mmpretrain, mmdet and mmseg
configs can name them (:mod:`mmlape.registry`), and does nothing else: it
adjusts no host library (:mod:`mmlape.hosts`) and imports no host task
library.
"""
from . import hosts, models  # noqa: F401  (registers them)
from .version import __version__, version_info

__all__ = ['__version__', 'version_info']
