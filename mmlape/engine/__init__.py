from .optim import LaPELayerDecayOptimWrapperConstructor

__all__ = ['LaPELayerDecayOptimWrapperConstructor']
