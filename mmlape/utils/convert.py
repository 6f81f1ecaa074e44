"""Checkpoint conversion to mmlape's key names: pure functions.

References:
    The official DeiT and LaPE code (timm names: ``blocks.{i}.norm1``,
    ``blocks.{i}.pe_norm``, ``pos_embed{i}`` for the unshared PE),
    mmpretrain's ``VisionTransformer`` (``layers.{i}.ln1``,
    ``ffn.layers.0.0``) and mmseg's ``VisionTransformer``
    (``attn.attn.in_proj_weight``).

mmlape's backbone uses the timm names, so official checkpoints convert
almost one to one. Every function here takes and returns plain dicts of
tensors; nothing touches a model.
"""
import re
from collections import OrderedDict
from typing import Dict, List, Literal, Mapping, Optional, Tuple

import torch
from torch import Tensor

__all__ = [
    'FORMATS', 'detect_format', 'convert_backbone', 'convert_timm_vit',
    'convert_mmpretrain_vit', 'convert_mmseg_vit', 'convert_checkpoint',
    'unwrap_state_dict'
]

Format = Literal['mmlape', 'timm', 'mmpretrain', 'mmseg']
FORMATS = ('mmlape', 'timm', 'mmpretrain', 'mmseg')

# (pattern, replacement) applied to backbone-level keys, first match wins.
_MMPRETRAIN_RULES: List[Tuple[str, str]] = [
    (r'^patch_embed\.projection\.', 'patch_embed.proj.'),
    (r'^layers\.(\d+)\.ln1\.', r'blocks.\1.norm1.'),
    (r'^layers\.(\d+)\.ln2\.', r'blocks.\1.norm2.'),
    (r'^layers\.(\d+)\.attn\.qkv\.', r'blocks.\1.attn.qkv.'),
    (r'^layers\.(\d+)\.attn\.proj\.', r'blocks.\1.attn.proj.'),
    (r'^layers\.(\d+)\.attn\.gamma1\.weight$', r'blocks.\1.gamma1'),
    (r'^layers\.(\d+)\.ffn\.gamma2\.weight$', r'blocks.\1.gamma2'),
    (r'^layers\.(\d+)\.ffn\.layers\.0\.0\.', r'blocks.\1.mlp.fc1.'),
    (r'^layers\.(\d+)\.ffn\.layers\.1\.', r'blocks.\1.mlp.fc2.'),
    (r'^ln1\.', 'norm.'),
    (r'^(cls_token|pos_embed)$', r'\1'),
]
_MMSEG_RULES: List[Tuple[str, str]] = [
    (r'^layers\.(\d+)\.attn\.attn\.in_proj_(weight|bias)$',
     r'blocks.\1.attn.qkv.\2'),
    (r'^layers\.(\d+)\.attn\.attn\.out_proj\.', r'blocks.\1.attn.proj.'),
] + _MMPRETRAIN_RULES


def unwrap_state_dict(checkpoint: Mapping) -> Dict[str, Tensor]:
    """The state dict inside a checkpoint (``state_dict`` or ``model``),
    without a DDP ``module.`` prefix."""
    sd = checkpoint
    for key in ('state_dict', 'model', 'module'):
        if isinstance(sd, Mapping) and key in sd and isinstance(
                sd[key], Mapping):
            sd = sd[key]
            break
    return OrderedDict(
        (k[len('module.'):] if k.startswith('module.') else k, v)
        for k, v in sd.items())


def _backbone_keys(sd: Mapping) -> List[str]:
    keys = [k[len('backbone.'):] for k in sd if k.startswith('backbone.')]
    return keys or list(sd)


def detect_format(state_dict: Mapping) -> Format:
    """Which naming a ViT state dict uses.

    Args:
        state_dict (Mapping): A (possibly ``backbone.``-prefixed) state dict.

    Returns:
        str: ``'mmlape'``, ``'timm'``, ``'mmpretrain'`` or ``'mmseg'``.

    Raises:
        ValueError: If the keys look like no known ViT.
    """
    keys = _backbone_keys(state_dict)
    if any('.attn.attn.in_proj_weight' in k for k in keys):
        return 'mmseg'
    if any(k.startswith('layers.') and '.ln1.' in k for k in keys):
        return 'mmpretrain'
    if any(k.startswith('blocks.') for k in keys):
        prefixed = any(k.startswith('backbone.') for k in state_dict)
        return 'mmlape' if prefixed else 'timm'
    raise ValueError('Not a ViT checkpoint mmlape knows: expected keys like '
                     '"blocks.0.norm1.weight" (timm/mmlape), '
                     '"layers.0.ln1.weight" (mmpretrain/mmseg); got e.g. '
                     f'{list(state_dict)[:5]}')


def _apply_rules(sd: Mapping, rules: List[Tuple[str, str]],
                 fmt: str) -> Dict[str, Tensor]:
    out = OrderedDict()
    for key, value in sd.items():
        for pattern, repl in rules:
            if re.match(pattern, key):
                out[re.sub(pattern, repl, key)] = value
                break
        else:
            raise ValueError(f'Cannot convert key "{key}" of a {fmt} ViT '
                             f'checkpoint: mmlape has no counterpart')
    return out


def convert_timm_vit(state_dict: Mapping) -> Dict[str, Tensor]:
    """Official DeiT / LaPE (timm names) to mmlape backbone keys.

    Backbone keys are kept as they are; the unshared per-layer PEs
    ``pos_embed0..pos_embed{L-1}`` are stacked into one ``(L, N', C)``
    ``pos_embed``; the classifier (``head.*``) and DeiT's distillation
    token/head are left out (see :func:`convert_checkpoint` for the head).
    """
    out = OrderedDict()
    per_layer = {}
    for key, value in state_dict.items():
        m = re.match(r'^pos_embed(\d+)$', key)
        if m:
            per_layer[int(m.group(1))] = value
        elif key.startswith(('head.', 'head_dist.')) or key == 'dist_token':
            continue
        else:
            out[key] = value
    if per_layer:
        if sorted(per_layer) != list(range(len(per_layer))):
            raise ValueError('Unshared PEs pos_embed0..N are not contiguous:'
                             f' {sorted(per_layer)}')
        out['pos_embed'] = torch.cat(
            [per_layer[i] for i in range(len(per_layer))], dim=0)
    return out


def convert_mmpretrain_vit(state_dict: Mapping) -> Dict[str, Tensor]:
    """mmpretrain ``VisionTransformer`` backbone keys to mmlape's."""
    return _apply_rules(state_dict, _MMPRETRAIN_RULES, 'mmpretrain')


def convert_mmseg_vit(state_dict: Mapping) -> Dict[str, Tensor]:
    """mmseg ``VisionTransformer`` backbone keys to mmlape's (the fused
    ``in_proj`` of ``nn.MultiheadAttention`` is mmlape's ``qkv``)."""
    return _apply_rules(state_dict, _MMSEG_RULES, 'mmseg')


_CONVERTERS = {
    'mmlape': lambda sd: OrderedDict(sd),
    'timm': convert_timm_vit,
    'mmpretrain': convert_mmpretrain_vit,
    'mmseg': convert_mmseg_vit,
}


def convert_backbone(state_dict: Mapping,
                     fmt: Optional[str] = None) -> Dict[str, Tensor]:
    """Backbone keys of any known format, as mmlape names them.

    Args:
        state_dict (Mapping): A state dict; a ``backbone.`` prefix selects
            the backbone part of a whole model.
        fmt (str, optional): One of :data:`FORMATS`; detected when None.

    Returns:
        dict: mmlape backbone keys, without prefix.
    """
    fmt = fmt or detect_format(state_dict)
    if fmt not in _CONVERTERS:
        raise ValueError(f'Unknown checkpoint format {fmt!r}; choose one of '
                         f'{list(FORMATS)}')
    if any(k.startswith('backbone.') for k in state_dict):
        state_dict = OrderedDict((k[len('backbone.'):], v)
                                 for k, v in state_dict.items()
                                 if k.startswith('backbone.'))
    return _CONVERTERS[fmt](state_dict)


def convert_checkpoint(checkpoint: Mapping,
                       fmt: Optional[str] = None,
                       head: Literal['vit', 'linear', 'none'] = 'vit') -> Dict:
    """A whole checkpoint to an mmlape (mmengine-style) checkpoint.

    Args:
        checkpoint (Mapping): Loaded checkpoint of any known format.
        fmt (str, optional): Source format; detected when None.
        head (str): Where a timm classifier ``head.*`` goes: ``'vit'``
            (mmpretrain ``VisionTransformerClsHead``: ``head.layers.head``),
            ``'linear'`` (``LinearClsHead``: ``head.fc``) or ``'none'``.
            OpenMMLab heads (mmpretrain/mmseg checkpoints) are kept as they
            are. Defaults to ``'vit'``.

    Returns:
        dict: ``{'state_dict': {'backbone.*': ..., 'head.*': ...},
        'meta': {'converted_from': fmt}}``.
    """
    sd = unwrap_state_dict(checkpoint)
    fmt = fmt or detect_format(sd)
    out = OrderedDict(
        ('backbone.' + k, v) for k, v in convert_backbone(sd, fmt).items())
    if fmt == 'timm':
        target = {'vit': 'head.layers.head.', 'linear': 'head.fc.'}
        if head != 'none' and 'head.weight' in sd:
            for suffix in ('weight', 'bias'):
                if 'head.' + suffix in sd:
                    out[target[head] + suffix] = sd['head.' + suffix]
    else:
        for k, v in sd.items():
            if not k.startswith('backbone.'):
                out[k] = v
    return dict(state_dict=out, meta=dict(converted_from=fmt))
