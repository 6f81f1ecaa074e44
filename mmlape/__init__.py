"""mmlape: layer-adaptive position embeddings for Vision Transformers.

Importing mmlape (``custom_imports=dict(imports=['mmlape'])`` in a config)
registers its models in the ``mmlape`` scope and in mmengine's root
registry, so mmpretrain, mmdet and mmseg configs can name them; makes
mmengine load local checkpoints safely under torch >= 2.6
(:mod:`mmlape.utils.safe_load`); runs mmcv's deformable attention, RoIAlign
and NMS in float32 under mixed precision, as their CUDA kernels need
(:mod:`mmlape.models.layers.mmcv_amp`); keeps mmpretrain importable
beside transformers >= 5 (:mod:`mmlape.utils.host_compat`); and lets
configs inherit mmlape's own with ``_base_ = 'mmlape::deit/...'``; and
makes mmpretrain's model hub (``list_models``, ``get_model``,
``inference_model``) know mmlape's configs by name
(:mod:`mmlape.apis.hub`). It imports no host task library (mmpretrain,
mmdet, mmseg): the few parts that build on one import it when they are
used.
"""
from mmengine.config.utils import MODULE2PACKAGE

from .utils.host_compat import keep_mmpretrain_importable
from .utils.safe_load import install_safe_loading
from .version import __version__, version_info

install_safe_loading()
# mmpretrain 1.2.0 cannot import its models beside transformers >= 5.
keep_mmpretrain_importable()
# mmengine resolves ``pkg::path`` bases only for the packages it knows;
# mmlape's configs are installed in mmlape/.mim/configs (see setup.py).
MODULE2PACKAGE.setdefault('mmlape', 'mmlape')

from . import engine, models  # noqa: E402,F401  (registers them)
from .models.layers.mmcv_amp import install_float32_mmcv_ops  # noqa: E402

install_float32_mmcv_ops()

from .apis.hub import install_mmpretrain_hub  # noqa: E402

# mmpretrain's list_models/get_model/inference_model know mmlape's configs
# by name once mmpretrain is imported (mmlape.apis.hub).
install_mmpretrain_hub()

__all__ = ['__version__', 'version_info']
