"""mmlape: layer-adaptive position embeddings for Vision Transformers.

Importing mmlape (``custom_imports=dict(imports=['mmlape'])`` in a config)
registers its models in the ``mmlape`` scope and in mmengine's root
registry, so mmpretrain, mmdet and mmseg configs can name them, and makes
mmengine load local checkpoints safely under torch >= 2.6
(:mod:`mmlape.utils.safe_load`).
"""
from .utils.safe_load import install_safe_loading
from .version import __version__, version_info

install_safe_loading()

from . import engine, models  # noqa: E402,F401  (registers them)

__all__ = ['__version__', 'version_info']
