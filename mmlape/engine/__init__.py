"""Training parts, registered into mmengine's root registries.

The layer-decay constructor builds on mmpretrain's. So that ``import
mmlape`` imports no host task library, the registry holds a small factory
under the constructor's name, and :mod:`mmlape.engine.optim` (with
mmpretrain) is imported only when a config builds it or code imports the
class from here.
"""
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS

from .compile import CompileHook
from .hooks import AtomicCheckpointHook, WorkDirGuardHook
from .schedulers import LaPEDeiTCosineLR, deit_epoch_lr
from .strategies import LaPEFSDPStrategy

__all__ = [
    'AtomicCheckpointHook', 'CompileHook', 'LaPEFSDPStrategy',
    'LaPELayerDecayOptimWrapperConstructor', 'LaPEDeiTCosineLR',
    'WorkDirGuardHook', 'deit_epoch_lr'
]


@OPTIM_WRAPPER_CONSTRUCTORS.register_module(
    name='LaPELayerDecayOptimWrapperConstructor')
def _build_layer_decay_constructor(**kwargs):
    """Build :class:`LaPELayerDecayOptimWrapperConstructor` from a config."""
    from .optim import LaPELayerDecayOptimWrapperConstructor
    return LaPELayerDecayOptimWrapperConstructor(**kwargs)


def __getattr__(name: str):
    if name == 'LaPELayerDecayOptimWrapperConstructor':
        from .optim import LaPELayerDecayOptimWrapperConstructor
        return LaPELayerDecayOptimWrapperConstructor
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
