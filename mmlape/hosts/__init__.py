"""Every adjustment mmlape makes to a host library (torch, mmengine, mmcv,
mmpretrain), in one place.

``import mmlape`` applies none of these. The tools call :func:`apply` (and
add :class:`Float32MmcvOpsHook` to mmdet runs); a config run by a host
library's tools names :mod:`mmlape.hosts.applied` in ``custom_imports``.

- :func:`install_safe_loading`: mmengine loads local checkpoints with
  weights only, and torch allow-lists OpenMMLab's training state.
- :func:`keep_mmpretrain_importable`: mmpretrain 1.2.0 imports beside
  transformers >= 5.
- :func:`install_mmpretrain_hub`: mmpretrain's ``list_models``,
  ``get_model`` and ``inference_model`` know mmlape's configs by name.
- :func:`float32_mmcv_ops`, :class:`Float32MmcvOpsHook`: mmcv's RoIAlign,
  NMS and deformable attention run in float32 under autocast, during a
  model's steps.
- :func:`setup_cpu_distributed`, :func:`check_launcher_env`: mmengine's
  launchers on machines without CUDA, and their variables.
- :func:`quiet_host_notices`, :func:`quiet_logger`: the host libraries'
  harmless notices kept out of a run's output.
"""
from .checkpoints import install_safe_loading, provide_checkpoint
from .dist import check_launcher_env, setup_cpu_distributed, slurm_to_torch_env
from .hub import install_mmpretrain_hub
from .imports import after_import, keep_mmpretrain_importable
from .mmcv_ops import (Float32MmcvOpsHook, float32_mmcv_ops,
                       install_float32_mmcv_ops, use_float32_mmcv_ops)
from .quiet import quiet_host_notices, quiet_logger

__all__ = [
    'Float32MmcvOpsHook', 'after_import', 'apply', 'check_launcher_env',
    'float32_mmcv_ops', 'install_float32_mmcv_ops', 'install_mmpretrain_hub',
    'install_safe_loading', 'keep_mmpretrain_importable', 'provide_checkpoint',
    'quiet_host_notices', 'quiet_logger', 'setup_cpu_distributed',
    'slurm_to_torch_env', 'use_float32_mmcv_ops'
]


def apply() -> None:
    """Safe checkpoint loading, mmpretrain importable and mmpretrain's hub
    knowing mmlape's models, for the whole process. Idempotent."""
    install_safe_loading()
    keep_mmpretrain_importable()
    install_mmpretrain_hub()
