from .optim import (LaPEDeiTCosineLR, LaPELayerDecayOptimWrapperConstructor,
                    deit_epoch_lr)

__all__ = [
    'LaPELayerDecayOptimWrapperConstructor', 'LaPEDeiTCosineLR',
    'deit_epoch_lr'
]
