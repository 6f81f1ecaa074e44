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


# ---------------------------------------------------------------------------
# Swin Transformer (mmlape.models.backbones.LaPESwin)
#
# mmlape's Swin keeps the official key layout (microsoft/Swin-Transformer:
# ``layers.{s}.blocks.{j}.attn.qkv``, ``layers.{s}.downsample.reduction``,
# the official channel order of patch merging), with ``pos_embed`` for the
# absolute PE and an output norm ``norm{s}`` per output stage (mmpretrain's
# convention; the official final ``norm`` is ``norm{last}``).
# mmpretrain's ``SwinTransformer`` merges patches with ``nn.Unfold``, whose
# channel order differs: its merging norm and reduction are permuted here.

__all__ += [
    'SWIN_FORMATS', 'detect_swin_format', 'convert_official_swin',
    'convert_mmpretrain_swin', 'convert_swin_backbone',
    'convert_swin_checkpoint'
]

SWIN_FORMATS = ('mmlape', 'official', 'mmpretrain')

_SWIN_DROPPED = (r'\.relative_position_index$', r'\.attn_mask$')
_SWIN_OFFICIAL_RULES: List[Tuple[str, str]] = [
    (r'^patch_embed\.(proj|norm)\.', r'patch_embed.\1.'),
    (r'^absolute_pos_embed$', 'pos_embed'),
    (r'^layers\.(\d+)\.blocks\.(\d+)\.(norm1|norm2|attn\.qkv|attn\.proj|'
     r'mlp\.fc1|mlp\.fc2)\.', r'layers.\1.blocks.\2.\3.'),
    (r'^layers\.(\d+)\.blocks\.(\d+)\.attn\.relative_position_bias_table$',
     r'layers.\1.blocks.\2.attn.relative_position_bias_table'),
    (r'^layers\.(\d+)\.downsample\.(norm|reduction)\.',
     r'layers.\1.downsample.\2.'),
]
_SWIN_MMPRETRAIN_RULES: List[Tuple[str, str]] = [
    (r'^patch_embed\.projection\.', 'patch_embed.proj.'),
    (r'^patch_embed\.norm\.', 'patch_embed.norm.'),
    (r'^absolute_pos_embed$', 'pos_embed'),
    (r'^stages\.(\d+)\.blocks\.(\d+)\.(norm1|norm2)\.',
     r'layers.\1.blocks.\2.\3.'),
    (r'^stages\.(\d+)\.blocks\.(\d+)\.attn\.w_msa\.(qkv|proj)\.',
     r'layers.\1.blocks.\2.attn.\3.'),
    (r'^stages\.(\d+)\.blocks\.(\d+)\.attn\.w_msa\.'
     r'relative_position_bias_table$',
     r'layers.\1.blocks.\2.attn.relative_position_bias_table'),
    (r'^stages\.(\d+)\.blocks\.(\d+)\.ffn\.layers\.0\.0\.',
     r'layers.\1.blocks.\2.mlp.fc1.'),
    (r'^stages\.(\d+)\.blocks\.(\d+)\.ffn\.layers\.1\.',
     r'layers.\1.blocks.\2.mlp.fc2.'),
    (r'^stages\.(\d+)\.downsample\.(norm|reduction)\.',
     r'layers.\1.downsample.\2.'),
    (r'^(norm\d+)\.', r'\1.'),
]


def detect_swin_format(state_dict: Mapping) -> str:
    """Which layout a Swin state dict uses.

    Args:
        state_dict (Mapping): A (possibly ``backbone.``-prefixed) state dict.

    Returns:
        str: ``'mmlape'``, ``'official'`` or ``'mmpretrain'``.

    Raises:
        ValueError: If the keys look like no known Swin.
    """
    keys = _backbone_keys(state_dict)
    if any(k.startswith('stages.') and '.attn.w_msa.' in k for k in keys):
        return 'mmpretrain'
    if any(k.startswith('layers.') and '.blocks.' in k for k in keys):
        own = any(
            k == 'pos_embed' or '.pe_norm.' in k or re.match(r'^norm\d+\.', k)
            for k in keys)
        return 'mmlape' if own else 'official'
    raise ValueError('Not a Swin checkpoint mmlape knows: expected keys like '
                     '"layers.0.blocks.0.norm1.weight" (official/mmlape) or '
                     '"stages.0.blocks.0.attn.w_msa.qkv.weight" (mmpretrain);'
                     f' got e.g. {list(state_dict)[:5]}')


def _unfold_to_official(tensor: Tensor) -> Tensor:
    """Permute the ``4C`` last axis from ``nn.Unfold``'s order (channel
    major; neighbours (0,0), (0,1), (1,0), (1,1)) to the official one
    (neighbour major; (0,0), (1,0), (0,1), (1,1))."""
    *lead, four_c = tensor.shape
    grouped = tensor.reshape(*lead, four_c // 4, 4)[..., [0, 2, 1, 3]]
    return grouped.transpose(-1, -2).reshape(*lead, four_c)


def _swin_rules(sd: Mapping, rules: List[Tuple[str, str]],
                fmt: str) -> Dict[str, Tensor]:
    out = OrderedDict()
    for key, value in sd.items():
        if any(re.search(p, key) for p in _SWIN_DROPPED):
            continue  # buffers the model rebuilds
        for pattern, repl in rules:
            if re.match(pattern, key):
                out[re.sub(pattern, repl, key)] = value
                break
        else:
            raise ValueError(f'Cannot convert key "{key}" of an {fmt} Swin '
                             f'checkpoint: mmlape has no counterpart')
    return out


def convert_official_swin(state_dict: Mapping) -> Dict[str, Tensor]:
    """Official Swin backbone keys to mmlape's.

    The index and mask buffers are dropped, ``absolute_pos_embed`` becomes
    ``pos_embed`` and the final ``norm`` becomes ``norm{last stage}``; the
    classifier (``head.*``) is left out (see :func:`convert_swin_checkpoint`).
    """
    sd = OrderedDict(
        (k, v) for k, v in state_dict.items() if not k.startswith('head.'))
    stages = [
        int(m.group(1)) for m in (re.match(r'^layers\.(\d+)\.', k) for k in sd)
        if m
    ]
    last = max(stages, default=0)
    rules = _SWIN_OFFICIAL_RULES + [(r'^norm\.', f'norm{last}.')]
    return _swin_rules(sd, rules, 'official')


def convert_mmpretrain_swin(state_dict: Mapping) -> Dict[str, Tensor]:
    """mmpretrain ``SwinTransformer`` backbone keys to mmlape's, with the
    patch-merging norm and reduction permuted to the official order."""
    out = _swin_rules(state_dict, _SWIN_MMPRETRAIN_RULES, 'mmpretrain')
    for key in out:
        if '.downsample.' in key:
            out[key] = _unfold_to_official(out[key])
    return out


_SWIN_CONVERTERS = {
    'mmlape': lambda sd: OrderedDict(sd),
    'official': convert_official_swin,
    'mmpretrain': convert_mmpretrain_swin,
}


def convert_swin_backbone(state_dict: Mapping,
                          fmt: Optional[str] = None) -> Dict[str, Tensor]:
    """Swin backbone keys of any known layout, as mmlape names them.

    Args:
        state_dict (Mapping): A state dict; a ``backbone.`` prefix selects
            the backbone part of a whole model.
        fmt (str, optional): One of :data:`SWIN_FORMATS`; detected when None.

    Returns:
        dict: mmlape backbone keys, without prefix.
    """
    fmt = fmt or detect_swin_format(state_dict)
    if fmt not in _SWIN_CONVERTERS:
        raise ValueError(f'Unknown Swin checkpoint format {fmt!r}; choose one'
                         f' of {list(SWIN_FORMATS)}')
    if any(k.startswith('backbone.') for k in state_dict):
        state_dict = OrderedDict((k[len('backbone.'):], v)
                                 for k, v in state_dict.items()
                                 if k.startswith('backbone.'))
    return _SWIN_CONVERTERS[fmt](state_dict)


def convert_swin_checkpoint(
        checkpoint: Mapping,
        fmt: Optional[str] = None,
        head: Literal['linear', 'none'] = 'linear') -> Dict:
    """A whole Swin checkpoint to an mmlape (mmengine-style) checkpoint.

    Args:
        checkpoint (Mapping): Loaded checkpoint of any known layout (an
            official one keeps its weights under ``model``).
        fmt (str, optional): Source layout; detected when None.
        head (str): Where an official classifier ``head.*`` goes:
            ``'linear'`` (mmpretrain ``LinearClsHead``: ``head.fc``) or
            ``'none'``. OpenMMLab heads are kept as they are.
            Defaults to ``'linear'``.

    Returns:
        dict: ``{'state_dict': {'backbone.*': ..., 'head.*': ...},
        'meta': {'converted_from': fmt}}``.
    """
    if head not in ('linear', 'none'):
        raise ValueError(f"head={head!r}; choose 'linear' or 'none'")
    sd = unwrap_state_dict(checkpoint)
    fmt = fmt or detect_swin_format(sd)
    out = OrderedDict(('backbone.' + k, v)
                      for k, v in convert_swin_backbone(sd, fmt).items())
    if fmt == 'official':
        if head == 'linear':
            for suffix in ('weight', 'bias'):
                if 'head.' + suffix in sd:
                    out['head.fc.' + suffix] = sd['head.' + suffix]
    else:
        for k, v in sd.items():
            if not k.startswith('backbone.'):
                out[k] = v
    return dict(state_dict=out, meta=dict(converted_from=fmt))
