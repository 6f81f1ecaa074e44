"""Checkpoint layouts users hold, converted to mmlape's and fitted to a
backbone: pure functions beside the models, one path per backbone family
(:class:`~.common.CheckpointFamily`: :data:`VIT`, :data:`VIT_FAMILY`,
:data:`SWIN`, :data:`T2T_CHECKPOINTS`)."""
from .common import (BACKBONE_PREFIX, CheckpointFamily, Converted, Layout,
                     unwrap_state_dict)
from .swin import SWIN, SwinSpec
from .t2t import T2T_CHECKPOINTS
from .vit import VIT, ViTSpec
from .vit_family import VIT_FAMILY

__all__ = [
    'BACKBONE_PREFIX', 'CheckpointFamily', 'Converted', 'Layout',
    'unwrap_state_dict', 'VIT', 'ViTSpec', 'VIT_FAMILY', 'SWIN', 'SwinSpec',
    'T2T_CHECKPOINTS'
]
