"""Checkpoint layouts users hold, their conversion to mmlape, and the fit:
pure functions beside the models, one path (:mod:`.common`) that every
backbone family fills in (:mod:`.vit` with :mod:`.vit_family`,
:mod:`.swin`; :mod:`.t2t` for mmpretrain's T2T-ViT)."""
from .common import (BACKBONE_PREFIX, CheckpointFamily, Converted, Layout,
                     select_backbone, strip_prefix, unwrap_state_dict)
from .official_lape import (OFFICIAL_JOINS, OFFICIAL_PES, OfficialRun,
                            check_fixed_pe, read_official_run)
from .swin import (SWIN, SWIN_FORMATS, SwinSpec, convert_mmpretrain_swin,
                   convert_official_swin, convert_swin_backbone,
                   convert_swin_checkpoint, detect_swin_format)
from .t2t import T2T_CHECKPOINTS, T2T_FORMATS
from .vit import (FORMATS, VIT, ViTSpec, convert_backbone, convert_checkpoint,
                  convert_layout, convert_mmpretrain_vit, convert_mmseg_vit,
                  detect_format, detect_layout, fit_pos_embed)
from .vit_family import (FAMILY_FORMATS, VIT_FAMILY, convert_vit_family,
                         convert_vit_family_checkpoint,
                         detect_vit_family_format)

__all__ = [
    'BACKBONE_PREFIX', 'CheckpointFamily', 'Converted', 'Layout',
    'select_backbone', 'strip_prefix', 'unwrap_state_dict', 'VIT', 'ViTSpec',
    'FORMATS', 'detect_format', 'detect_layout', 'convert_layout',
    'convert_backbone', 'convert_mmpretrain_vit', 'convert_mmseg_vit',
    'convert_checkpoint', 'fit_pos_embed', 'VIT_FAMILY', 'FAMILY_FORMATS',
    'detect_vit_family_format', 'convert_vit_family',
    'convert_vit_family_checkpoint', 'SWIN', 'SWIN_FORMATS', 'SwinSpec',
    'detect_swin_format', 'convert_official_swin', 'convert_mmpretrain_swin',
    'convert_swin_backbone', 'convert_swin_checkpoint', 'T2T_CHECKPOINTS',
    'T2T_FORMATS', 'OFFICIAL_JOINS', 'OFFICIAL_PES', 'OfficialRun',
    'check_fixed_pe', 'read_official_run'
]
