"""Training parts, registered into mmengine's root registries.

The layer-decay constructor, the classification data preprocessor and
accuracy metric (on mmpretrain's), the moving average of a model (on
mmengine's) and the TTA model (on mmdet's) are registered as factories,
so that ``import mmlape`` imports no host task library until a config
builds them.
"""
from mmengine.registry import METRICS, MODELS, OPTIM_WRAPPER_CONSTRUCTORS

from .compile import CompileHook
from .hooks import AtomicCheckpointHook, WorkDirGuardHook
from .lazy_log import LazyRuntimeInfoHook, log_clip_lazily, log_scalar
from .param_groups import LaPEOptimWrapperConstructor
from .schedulers import LaPEDeiTCosineLR, deit_epoch_lr
from .strategies import LaPEFSDPStrategy

__all__ = [
    'AtomicCheckpointHook', 'CompileHook', 'InstanceSegTTAModel',
    'LaPEAccuracy', 'LaPEClsDataPreprocessor', 'LaPEExponentialMovingAverage',
    'LaPEFSDPStrategy', 'LaPELayerDecayOptimWrapperConstructor',
    'LaPEDeiTCosineLR', 'LaPEOptimWrapperConstructor', 'LazyRuntimeInfoHook',
    'WorkDirGuardHook', 'deit_epoch_lr', 'log_clip_lazily', 'log_scalar'
]


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
