"""Layer-wise learning-rate decay for any task that uses an mmlape backbone.

References:
    mmpretrain's ``LearningRateDecayOptimWrapperConstructor`` (the decay
    rule, ``lr * rate ** (max_depth - depth - 1)``) and BEiT's layer decay.

:class:`LaPELayerDecayOptimWrapperConstructor` asks
``model.backbone.get_layer_depth`` (mmpretrain's needs it on the whole
model, which mmseg/mmdet models lack) and gives every parameter outside the
backbone the full learning rate.
"""
from typing import Callable, List, Optional

import torch.nn as nn
from mmengine.optim import OptimWrapper
from mmpretrain.engine.optimizers import \
    LearningRateDecayOptimWrapperConstructor

from mmlape.models.checkpoint import BACKBONE_PREFIX

__all__ = ['LaPELayerDecayOptimWrapperConstructor']


# Registered (lazily, by name) in mmlape/hosts/__init__.py: importing this
# module imports mmpretrain.
class LaPELayerDecayOptimWrapperConstructor(
        LearningRateDecayOptimWrapperConstructor):
    """Layer decay through ``model.backbone.get_layer_depth``.

    Config (``paramwise_cfg`` as mmpretrain's, e.g. ``layer_decay_rate``)::

        optim_wrapper = dict(
            constructor='LaPELayerDecayOptimWrapperConstructor',
            paramwise_cfg=dict(layer_decay_rate=0.95))
    """

    def add_params(self,
                   params: List[dict],
                   module: nn.Module,
                   prefix: str = '',
                   get_layer_depth: Optional[Callable] = None,
                   **kwargs) -> None:
        if get_layer_depth is None and not hasattr(module, 'get_layer_depth'):
            backbone = getattr(module, 'backbone', None)
            if not hasattr(backbone, 'get_layer_depth'):
                raise TypeError(
                    f'{type(self).__name__} needs model.backbone with a '
                    f'get_layer_depth method; {type(module).__name__} has '
                    f'none')

            def get_layer_depth(name: str):
                return backbone.get_layer_depth(name, prefix=BACKBONE_PREFIX)

        super().add_params(params, module, prefix, get_layer_depth, **kwargs)

    def __call__(self, model: nn.Module) -> OptimWrapper:
        wrapper = super().__call__(model)
        return wrapper
