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


# ----------------------------------------------------------------------
# T2T-ViT, CeiT, ViT-Lite and CCT
#
# References: the official code of each (key names and layouts):
# yitu-opensource/T2T-ViT (``tokens_to_token.*``, Performer ``kqv``/``w``,
# the sinusoid ``pos_embed`` stored as a frozen parameter; timm checkpoints
# with ``state_dict`` and ``state_dict_ema``), mmpretrain's ``T2T_ViT``
# (``encoder.{i}.ln1``, ``ffn.layers.0.0``), coeusguo/ceit (``i2t.*``,
# ``blocks.{i}.leff.*``, ``lca.*``, ``pos_layer_embed``) and
# SHI-Labs/Compact-Transformers (``tokenizer.conv_layers.*``,
# ``classifier.*``).

#: Checkpoint layouts of the ViT family that mmlape converts.
FAMILY_FORMATS = ('t2t_vit', 'mmpretrain_t2t', 'ceit', 'compact')

_T2T_RULES: List[Tuple[str, str]] = [
    (r'^tokens_to_token\.attention(\d)\.mlp\.0\.',
     r'patch_embed.attention\1.mlp.fc1.'),
    (r'^tokens_to_token\.attention(\d)\.mlp\.2\.',
     r'patch_embed.attention\1.mlp.fc2.'),
    (r'^tokens_to_token\.', 'patch_embed.'),
    (r'^(blocks\.\d+\.|norm\.|cls_token$)', r'\1'),
]
_MMPRETRAIN_T2T_RULES: List[Tuple[str, str]] = [
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
_CEIT_RULES: List[Tuple[str, str]] = [
    (r'^i2t\.backbone\.(conv|bn)\.', r'patch_embed.\1.'),
    (r'^i2t\.proj\.', 'patch_embed.proj.'),
    (r'^blocks\.(\d+)\.leff\.', r'blocks.\1.mlp.'),
    (r'^lca\.feedforward\.', 'pool.mlp.'),
    (r'^lca\.', 'pool.'),
    (r'^pos_layer_embed$', 'pool.pos_layer_embed'),
    (r'^(blocks\.\d+\.|norm\.|cls_token$|pos_embed$)', r'\1'),
]
_COMPACT_RULES: List[Tuple[str, str]] = [
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
    keys = _backbone_keys(state_dict)
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
    from mmlape.models.layers.pos_embed import build_1d_sincos
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

    Names change, tensors do not. T2T-ViT's stored sinusoid ``pos_embed``
    is checked and dropped (mmlape rebuilds the fixed PE); the Compact-
    Transformers tokenizer becomes the ``Patch`` tokenizer when its
    convolution has a bias (ViT-Lite's layout) and the ``Conv`` tokenizer
    otherwise (CCT's layout). LaPE PE norms (``blocks.{i}.pe_norm``,
    ``pe_join.*``) pass through.

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
    backbone, head = OrderedDict(), OrderedDict()
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
        for pattern, repl in _FAMILY_RULES[fmt]:
            if re.match(pattern, key):
                backbone[re.sub(pattern, repl, key)] = value
                break
        else:
            raise ValueError(f'Cannot convert key "{key}" of a {fmt} '
                             f'checkpoint: mmlape has no counterpart')
    return backbone, head


def convert_vit_family_checkpoint(checkpoint: Mapping,
                                  fmt: Optional[str] = None,
                                  head: Literal['vit', 'linear',
                                                'none'] = 'vit',
                                  use_ema: bool = True) -> Dict:
    """A whole official checkpoint of the ViT family to an mmlape one.

    Args:
        checkpoint (Mapping): The loaded file (a bare state dict, or a
            wrapper with ``state_dict`` / ``model``; T2T-ViT's timm files
            also carry ``state_dict_ema``).
        fmt (str, optional): One of :data:`FAMILY_FORMATS`; detected when
            None.
        head (str): Where the classifier goes: ``'vit'``
            (``VisionTransformerClsHead``: ``head.layers.head``, the head of
            mmlape's configs), ``'linear'`` (``head.fc``) or ``'none'``.
            Defaults to ``'vit'``.
        use_ema (bool): Take ``state_dict_ema`` when the file has one (the
            weights T2T-ViT reports). Defaults to True.

    Returns:
        dict: ``{'state_dict': {'backbone.*', 'head.*'}, 'meta':
        {'converted_from': fmt}}``.
    """
    if head not in ('vit', 'linear', 'none'):
        raise ValueError(f"head={head!r}; choose 'vit', 'linear' or 'none'")
    source = checkpoint
    if (use_ema and isinstance(checkpoint, Mapping)
            and isinstance(checkpoint.get('state_dict_ema'), Mapping)):
        source = {'state_dict': checkpoint['state_dict_ema']}
    sd = unwrap_state_dict(source)
    others = OrderedDict()
    if any(k.startswith('backbone.') for k in sd):
        # An OpenMMLab model (mmpretrain's T2T_ViT): its head is kept.
        others = OrderedDict(
            (k, v) for k, v in sd.items() if not k.startswith('backbone.'))
        sd = OrderedDict((k[len('backbone.'):], v) for k, v in sd.items()
                         if k.startswith('backbone.'))
    fmt = fmt or detect_vit_family_format(sd)
    backbone, classifier = convert_vit_family(sd, fmt)
    out = OrderedDict(('backbone.' + k, v) for k, v in backbone.items())
    target = {'vit': 'head.layers.head.', 'linear': 'head.fc.'}.get(head)
    if target:
        for name, value in classifier.items():
            out[target + name] = value
        out.update(others)
    return dict(state_dict=out, meta=dict(converted_from=fmt))
