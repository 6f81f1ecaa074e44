from .hooks import AtomicCheckpointHook
from .optim import LaPELayerDecayOptimWrapperConstructor

__all__ = ['AtomicCheckpointHook', 'LaPELayerDecayOptimWrapperConstructor']
