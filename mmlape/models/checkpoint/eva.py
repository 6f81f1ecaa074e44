"""timm's EVA-style ViT layout, as the RoPE-ViT models use it.

The ViT's path (:mod:`.vit`) detects the layout (:func:`is_eva`), calls
:func:`convert_eva` for the keys and adds the missing class-token PE row.

References:
    timm (>= 1.0.17) ``timm/models/eva.py`` (``Eva`` with
    ``attn_type='rope'``); Heo et al., ECCV 2024.
"""
import re
from collections import OrderedDict
from typing import Dict, List, Mapping

from torch import Tensor

__all__ = ['EVA_KEY', 'is_eva', 'convert_eva']

#: Keys only timm's ``Eva`` has (its layer scale, RoPE-Mixed's
#: frequencies).
EVA_KEY = re.compile(r'^(rope\.freqs|blocks\.\d+\.gamma_[12])$')
#: Keys of ``Eva`` options mmlape's ViT does not compute (EVA's own
#: attention biases and inner norms, SwiGLU, register tokens, q/k norms).
_UNSUPPORTED = re.compile(r'(^reg_token$|\.[qkv]_bias$|\.attn\.norm\.|'
                          r'\.mlp\.norm\.|\.[qk]_norm\.|\.fc1_[gx]\.|'
                          r'\.q_proj\.|\.attn\.gate\.)')
_RULES = [(re.compile(r'^blocks\.(\d+)\.gamma_([12])$'), r'blocks.\1.gamma\2')]


def is_eva(state_dict: Mapping) -> bool:
    """Whether backbone keys (no prefix) are those of timm's ``Eva``."""
    return any(EVA_KEY.match(k) for k in state_dict)


def convert_eva(state_dict: Mapping, notes: List[str]) -> Dict[str, Tensor]:
    """timm ``Eva`` keys in mmlape's names: ``gamma_1``/``gamma_2`` as
    ``gamma1``/``gamma2`` and RoPE-Mixed's ``rope.freqs`` split into each
    layer's ``blocks.{i}.attn.rope_freqs`` ``(2, heads, head_dims / 2)``.

    Raises:
        ValueError: A key of an option mmlape's ViT does not compute.
    """
    out = OrderedDict()
    for key, value in state_dict.items():
        if _UNSUPPORTED.search(key):
            raise ValueError(
                f'Cannot convert key "{key}" of a timm Eva checkpoint: '
                f'mmlape\'s ViT computes the RoPE-ViT models (fused qkv '
                f'with bias, plain MLP, layer scale, rotary PE), not this '
                f'option')
        if key == 'rope.freqs':
            if value.dim() != 4 or value.shape[0] != 2:
                raise ValueError(f'rope.freqs has shape {tuple(value.shape)}'
                                 f'; RoPE-Mixed\'s is (2, depth, heads, '
                                 f'head_dims / 2)')
            for i in range(value.shape[1]):
                out[f'blocks.{i}.attn.rope_freqs'] = value[:, i].clone()
            notes.append(f'rope.freqs: split into blocks.{{i}}.attn.'
                         f'rope_freqs, one per layer ({value.shape[1]})')
            continue
        for pattern, repl in _RULES:
            if pattern.match(key):
                key = pattern.sub(repl, key)
                break
        out[key] = value
    return out
