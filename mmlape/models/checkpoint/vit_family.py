"""Official T2T-ViT, CeiT, ViT-Lite and CCT layouts, for the one ViT.

Files are detected and renamed here (:data:`VIT_FAMILY`), then checked,
fitted and loaded by the ViT's path (:mod:`.vit`).

References:
    yitu-opensource/T2T-ViT, mmpretrain's ``T2T_ViT``, coeusguo/ceit,
    SHI-Labs/Compact-Transformers.
"""
import re
from collections import OrderedDict
from typing import Dict, Mapping, Optional, Tuple

import torch
from torch import Tensor

from ..layers.pos_embed import build_1d_sincos
from .common import (CheckpointFamily, Converted, Layout, Rules, rename_keys,
                     select_backbone)

__all__ = [
    'FAMILY_FORMATS', 'VIT_FAMILY', 'detect_vit_family_format',
    'convert_vit_family', 'convert_vit_family_checkpoint'
]

#: Checkpoint layouts of the ViT family that mmlape converts.
FAMILY_FORMATS = ('t2t_vit', 'mmpretrain_t2t', 'ceit', 'compact')

_T2T_RULES: Rules = [
    (r'^tokens_to_token\.attention(\d)\.mlp\.0\.',
     r'patch_embed.attention\1.mlp.fc1.'),
    (r'^tokens_to_token\.attention(\d)\.mlp\.2\.',
     r'patch_embed.attention\1.mlp.fc2.'),
    (r'^tokens_to_token\.', 'patch_embed.'),
    (r'^(blocks\.\d+\.|norm\.|cls_token$)', r'\1'),
]
_MMPRETRAIN_T2T_RULES: Rules = [
    (r'^tokens_to_token\.attention(\d)\.ln([12])\.',
     r'patch_embed.attention\1.norm\2.'),
    (r'^tokens_to_token\.attention(\d)\.attn\.',
     r'patch_embed.attention\1.attn.'),
    (r'^tokens_to_token\.attention(\d)\.ffn\.layers\.0\.0\.',
     r'patch_embed.attention\1.mlp.fc1.'),
    (r'^tokens_to_token\.attention(\d)\.ffn\.layers\.1\.',
     r'patch_embed.attention\1.mlp.fc2.'),
    (r'^tokens_to_token\.project\.', 'patch_embed.project.'),
    (r'^encoder\.(\d+)\.ln([12])\.', r'blocks.\1.norm\2.'),
    (r'^encoder\.(\d+)\.attn\.', r'blocks.\1.attn.'),
    (r'^encoder\.(\d+)\.ffn\.layers\.0\.0\.', r'blocks.\1.mlp.fc1.'),
    (r'^encoder\.(\d+)\.ffn\.layers\.1\.', r'blocks.\1.mlp.fc2.'),
    (r'^(norm\.|cls_token$)', r'\1'),
]
_CEIT_RULES: Rules = [
    (r'^i2t\.backbone\.(conv|bn)\.', r'patch_embed.\1.'),
    (r'^i2t\.proj\.', 'patch_embed.proj.'),
    (r'^blocks\.(\d+)\.leff\.', r'blocks.\1.mlp.'),
    (r'^lca\.feedforward\.', 'pool.mlp.'),
    (r'^lca\.', 'pool.'),
    (r'^pos_layer_embed$', 'pool.pos_layer_embed'),
    (r'^(blocks\.\d+\.|norm\.|cls_token$|pos_embed$)', r'\1'),
]
_COMPACT_RULES: Rules = [
    (r'^classifier\.class_emb$', 'cls_token'),
    (r'^classifier\.positional_emb$', 'pos_embed'),
    (r'^classifier\.attention_pool\.', 'pool.attention_pool.'),
    (r'^classifier\.blocks\.(\d+)\.pre_norm\.', r'blocks.\1.norm1.'),
    (r'^classifier\.blocks\.(\d+)\.self_attn\.', r'blocks.\1.attn.'),
    (r'^classifier\.blocks\.(\d+)\.norm1\.', r'blocks.\1.norm2.'),
    (r'^classifier\.blocks\.(\d+)\.linear1\.', r'blocks.\1.mlp.fc1.'),
    (r'^classifier\.blocks\.(\d+)\.linear2\.', r'blocks.\1.mlp.fc2.'),
    (r'^classifier\.norm\.', 'norm.'),
]
#: Where each layout keeps its classifier.
_FAMILY_HEADS = {
    't2t_vit': 'head.',
    'mmpretrain_t2t': 'head.layers.head.',
    'ceit': 'head.',
    'compact': 'classifier.fc.',
}
_FAMILY_RULES = {
    't2t_vit': _T2T_RULES,
    'mmpretrain_t2t': _MMPRETRAIN_T2T_RULES,
    'ceit': _CEIT_RULES,
    'compact': _COMPACT_RULES,
}
_LAPE_KEYS = r'^(blocks\.\d+\.pe_norm\.|pe_join\.)'


def detect_vit_family_format(state_dict: Mapping) -> Optional[str]:
    """Which official layout of the ViT family a state dict has.

    The layout is told by names only: ``tokens_to_token.`` with
    ``blocks.`` (official T2T-ViT) or ``encoder.`` (mmpretrain), ``i2t.``
    (CeiT), ``tokenizer.conv_layers.`` / ``classifier.`` (ViT-Lite, CCT).

    Returns:
        str | None: One of :data:`FAMILY_FORMATS`, or None.
    """
    keys = list(select_backbone(state_dict))
    if any(k.startswith('tokens_to_token.') for k in keys):
        if any(k.startswith('encoder.') for k in keys):
            return 'mmpretrain_t2t'
        return 't2t_vit'
    if any(k.startswith('i2t.') for k in keys):
        return 'ceit'
    if any(
            k.startswith(('tokenizer.conv_layers.', 'classifier.blocks.'))
            for k in keys):
        return 'compact'
    return None


def _check_fixed_sincos(key: str, value: Tensor) -> None:
    """A stored fixed PE must be the sinusoid mmlape rebuilds."""
    expected = build_1d_sincos(value.shape[-2], value.shape[-1])
    if value.shape != expected.shape or not torch.allclose(
            value.float(), expected, atol=1e-4):
        raise ValueError(
            f'"{key}" of this T2T-ViT checkpoint is not the fixed 1D '
            f'sinusoid (shape {tuple(value.shape)}) that mmlape rebuilds '
            f"for pe_type='sincos1d'; it cannot be dropped safely")


def convert_vit_family(
        state_dict: Mapping,
        fmt: Optional[str] = None
) -> Tuple[Dict[str, Tensor], Dict[str, Tensor]]:
    """An official T2T-ViT / CeiT / ViT-Lite / CCT state dict to mmlape's
    backbone keys, and its classifier.

    Names change, tensors do not; T2T-ViT's stored sinusoid is checked and
    dropped; a Compact-Transformers tokenizer with a conv bias becomes
    ``Patch`` (ViT-Lite), else ``Conv`` (CCT).

    Args:
        state_dict (Mapping): The official state dict (no wrapper).
        fmt (str, optional): One of :data:`FAMILY_FORMATS`; detected when
            None.

    Returns:
        tuple[dict, dict]: Backbone keys (no prefix) and the classifier's
        ``{'weight', 'bias'}`` (empty when there is none).

    Raises:
        ValueError: Unknown layout, or a key with no mmlape counterpart.
    """
    fmt = fmt or detect_vit_family_format(state_dict)
    if fmt not in _FAMILY_RULES:
        raise ValueError(f'Not a T2T-ViT/CeiT/ViT-Lite/CCT checkpoint mmlape '
                         f'knows (format {fmt!r}; expected one of '
                         f'{list(FAMILY_FORMATS)}); got e.g. '
                         f'{list(state_dict)[:5]}')
    head_prefix = _FAMILY_HEADS[fmt]
    patch_tokenizer = 'tokenizer.conv_layers.0.0.bias' in state_dict
    backbone, head, rest = OrderedDict(), OrderedDict(), OrderedDict()
    for key, value in state_dict.items():
        if key.startswith(head_prefix):
            head[key[len(head_prefix):]] = value
            continue
        if re.match(_LAPE_KEYS, key):
            backbone[key] = value
            continue
        if fmt in ('t2t_vit', 'mmpretrain_t2t') and key == 'pos_embed':
            _check_fixed_sincos(key, value)
            continue
        m = re.match(r'^tokenizer\.conv_layers\.(\d+)\.0\.(weight|bias)$', key)
        if fmt == 'compact' and m:
            if patch_tokenizer:
                if m.group(1) != '0':
                    raise ValueError(f'"{key}": a patch tokenizer has one '
                                     f'convolution')
                backbone[f'patch_embed.proj.{m.group(2)}'] = value
            else:
                backbone[f'patch_embed.layers.{m.group(1)}.conv.'
                         f'{m.group(2)}'] = value
            continue
        rest[key] = value
    backbone.update(rename_keys(rest, _FAMILY_RULES[fmt], f'a {fmt}'))
    return backbone, head


class ViTFamilyLayouts(CheckpointFamily):
    """The official T2T-ViT / CeiT / ViT-Lite / CCT layouts: detected and
    renamed here, checked, fitted and loaded by the ViT path."""
    name = 'T2T-ViT/CeiT/ViT-Lite/CCT'
    formats = FAMILY_FORMATS
    heads = {'vit': 'head.layers.head.', 'linear': 'head.fc.', 'none': None}
    default_head = 'vit'

    def detect(self, state_dict: Mapping) -> Optional[str]:
        return detect_vit_family_format(state_dict)

    def read(self,
             checkpoint: Mapping,
             use_ema: bool = True) -> Dict[str, Tensor]:
        """The state dict of the file; with ``use_ema``, the EMA weights
        (``state_dict_ema``) T2T-ViT's timm files carry and report."""
        if (use_ema and isinstance(checkpoint, Mapping)
                and isinstance(checkpoint.get('state_dict_ema'), Mapping)):
            checkpoint = {'state_dict': checkpoint['state_dict_ema']}
        return super().read(checkpoint)

    def convert(self,
                state_dict: Mapping,
                fmt: Optional[str] = None) -> Converted:
        fmt = fmt or detect_vit_family_format(state_dict)
        backbone, head = convert_vit_family(state_dict, fmt)
        return Converted(backbone, Layout(fmt, fmt), head=head)


#: The official ViT-family layouts.
VIT_FAMILY = ViTFamilyLayouts()

#: A whole official checkpoint of the ViT family to an mmlape one
#: (``use_ema=True``, the default, takes T2T-ViT's ``state_dict_ema``).
convert_vit_family_checkpoint = VIT_FAMILY.convert_checkpoint
