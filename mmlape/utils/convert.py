"""The import path of mmlape's checkpoint conversion before it moved.

References:
    :mod:`mmlape.utils.checkpoint`, which holds the layout detection,
    conversion and fit checks; this module re-exports its conversion API so
    that ``from mmlape.utils.convert import ...`` keeps working.
"""
# yapf: disable
from .checkpoint import (FAMILY_FORMATS, FORMATS, SWIN_FORMATS,
                         convert_backbone, convert_checkpoint,
                         convert_mmpretrain_swin, convert_mmpretrain_vit,
                         convert_mmseg_vit, convert_official_swin,
                         convert_swin_backbone, convert_swin_checkpoint,
                         convert_timm_vit, convert_vit_family,
                         convert_vit_family_checkpoint, detect_format,
                         detect_swin_format, detect_vit_family_format,
                         unwrap_state_dict)

# yapf: enable

__all__ = [
    'FORMATS', 'detect_format', 'convert_backbone', 'convert_timm_vit',
    'convert_mmpretrain_vit', 'convert_mmseg_vit', 'convert_checkpoint',
    'unwrap_state_dict', 'FAMILY_FORMATS', 'detect_vit_family_format',
    'convert_vit_family', 'convert_vit_family_checkpoint', 'SWIN_FORMATS',
    'detect_swin_format', 'convert_official_swin', 'convert_mmpretrain_swin',
    'convert_swin_backbone', 'convert_swin_checkpoint'
]
