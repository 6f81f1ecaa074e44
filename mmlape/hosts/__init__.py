"""The run wing: every part that changes how mmengine or a host library
(torch, mmcv, mmpretrain, mmdet, mmseg) runs, one module per part.
:mod:`mmlape.models` never imports it (``.importlinter``).

Registered into the host registries when ``import mmlape`` runs (the
parts built from mmpretrain's or mmdet's classes as factories, so that
importing mmlape imports no host task library until a config builds
them):

- :mod:`.hooks`: :class:`AtomicCheckpointHook` (a checkpoint written
  whole or not at all), :class:`WorkDirGuardHook`;
- :mod:`.compile`: :class:`CompileHook` (``--compile``);
- :mod:`.lazy_log`: :class:`LazyRuntimeInfoHook` (opt-in, :mod:`.speedups`);
- :mod:`.param_groups`, :mod:`.optim`: the optimizer constructors (PE
  parameters without weight decay; layer decay);
- :mod:`.schedulers`: :class:`LaPEDeiTCosineLR` (DeiT's per-epoch cosine);
- :mod:`.strategies`: :class:`LaPEFSDPStrategy` and the strategies mmlape's
  checkpoints serve;
- :mod:`.cls_preprocessor`, :mod:`.cls_metric`: mmpretrain's data
  preprocessor and accuracy, a batch handled in one go;
- :mod:`.ema`: mmengine's moving average, one multi-tensor update;
- :mod:`.tta`: mmdet's test-time augmentation with instance masks.

Used by the tools to set a run up: :mod:`.runner_setup`,
:mod:`.batch_recipe`, :mod:`.loader_workers`, :mod:`.speedups`,
:mod:`.work_dir` (one run per work dir, write errors in one line).

Process-wide adjustments, applied by the tools (:func:`apply`, and
:class:`Float32MmcvOpsHook` added to mmdet runs), never by ``import
mmlape``; a config run by a host library's tools names
:mod:`mmlape.hosts.applied` in ``custom_imports``:

- :mod:`.checkpoints`: mmengine loads local checkpoints with weights only,
  and torch allow-lists OpenMMLab's training state;
- :mod:`.imports`: mmpretrain 1.2.0 imports beside transformers >= 5;
- :mod:`.hub`: mmpretrain's ``list_models``, ``get_model`` and
  ``inference_model`` know mmlape's configs by name;
- :mod:`.mmcv_ops`: mmcv's RoIAlign, NMS and deformable attention run in
  float32 under autocast, during a model's steps;
- :mod:`.dist`: mmengine's launchers on machines without CUDA, and their
  variables;
- :mod:`.quiet`: the host libraries' harmless notices kept out of a run's
  output.
"""
from mmengine.registry import METRICS, MODELS, OPTIM_WRAPPER_CONSTRUCTORS

from .checkpoints import install_safe_loading, provide_checkpoint
from .compile import CompileHook
from .dist import check_launcher_env, setup_cpu_distributed, slurm_to_torch_env
from .hooks import AtomicCheckpointHook, WorkDirGuardHook
from .hub import install_mmpretrain_hub
from .imports import after_import, keep_mmpretrain_importable
from .lazy_log import LazyRuntimeInfoHook, log_clip_lazily, log_scalar
from .mmcv_ops import (Float32MmcvOpsHook, float32_mmcv_ops,
                       install_float32_mmcv_ops, use_float32_mmcv_ops)
from .param_groups import LaPEOptimWrapperConstructor
from .quiet import quiet_host_notices, quiet_logger
from .schedulers import LaPEDeiTCosineLR, deit_epoch_lr
from .strategies import LaPEFSDPStrategy

__all__ = [
    'AtomicCheckpointHook', 'CompileHook', 'Float32MmcvOpsHook',
    'InstanceSegTTAModel', 'LaPEAccuracy', 'LaPEClsDataPreprocessor',
    'LaPEDeiTCosineLR', 'LaPEExponentialMovingAverage', 'LaPEFSDPStrategy',
    'LaPELayerDecayOptimWrapperConstructor', 'LaPEOptimWrapperConstructor',
    'LazyRuntimeInfoHook', 'WorkDirGuardHook', 'after_import', 'apply',
    'check_launcher_env', 'deit_epoch_lr', 'float32_mmcv_ops',
    'install_float32_mmcv_ops', 'install_mmpretrain_hub',
    'install_safe_loading', 'keep_mmpretrain_importable', 'log_clip_lazily',
    'log_scalar', 'provide_checkpoint', 'quiet_host_notices', 'quiet_logger',
    'setup_cpu_distributed', 'slurm_to_torch_env', 'use_float32_mmcv_ops'
]


def apply() -> None:
    """Safe checkpoint loading, mmpretrain importable and mmpretrain's hub
    knowing mmlape's models, for the whole process. Idempotent."""
    install_safe_loading()
    keep_mmpretrain_importable()
    install_mmpretrain_hub()


@OPTIM_WRAPPER_CONSTRUCTORS.register_module(
    name='LaPELayerDecayOptimWrapperConstructor')
def _build_layer_decay_constructor(**kwargs):
    """Build :class:`LaPELayerDecayOptimWrapperConstructor` from a config."""
    from .optim import LaPELayerDecayOptimWrapperConstructor
    return LaPELayerDecayOptimWrapperConstructor(**kwargs)


@MODELS.register_module(name='LaPEClsDataPreprocessor')
def _build_cls_data_preprocessor(**kwargs):
    """Build :class:`LaPEClsDataPreprocessor` (mmpretrain's, with a
    batch's labels handled in one go) from a config."""
    from .cls_preprocessor import LaPEClsDataPreprocessor
    return LaPEClsDataPreprocessor(**kwargs)


@METRICS.register_module(name='LaPEAccuracy')
def _build_accuracy(**kwargs):
    """Build :class:`LaPEAccuracy` (mmpretrain's, with a batch's results
    copied to the host in one go and gathered as stacks) from a config."""
    from .cls_metric import LaPEAccuracy
    return LaPEAccuracy(**kwargs)


@MODELS.register_module(name='LaPEExponentialMovingAverage')
def _build_ema(**kwargs):
    """Build :class:`LaPEExponentialMovingAverage` (mmengine's, updated
    with one multi-tensor operation) from a config."""
    from .ema import LaPEExponentialMovingAverage
    return LaPEExponentialMovingAverage(**kwargs)


@MODELS.register_module(name='InstanceSegTTAModel')
def _build_instance_seg_tta(**kwargs):
    """Build :class:`InstanceSegTTAModel` (mmdet's test-time augmentation
    with instance masks) from a config."""
    from .tta import InstanceSegTTAModel
    return InstanceSegTTAModel(**kwargs)


def __getattr__(name: str):
    if name == 'LaPELayerDecayOptimWrapperConstructor':
        from .optim import LaPELayerDecayOptimWrapperConstructor
        return LaPELayerDecayOptimWrapperConstructor
    if name == 'LaPEClsDataPreprocessor':
        from .cls_preprocessor import LaPEClsDataPreprocessor
        return LaPEClsDataPreprocessor
    if name == 'LaPEAccuracy':
        from .cls_metric import LaPEAccuracy
        return LaPEAccuracy
    if name == 'LaPEExponentialMovingAverage':
        from .ema import LaPEExponentialMovingAverage
        return LaPEExponentialMovingAverage
    if name == 'InstanceSegTTAModel':
        from .tta import InstanceSegTTAModel
        return InstanceSegTTAModel
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
