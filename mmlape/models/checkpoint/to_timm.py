"""mmlape ViT classifiers in timm's names: the inverse of :mod:`.vit` (timm
-> mmlape) and :mod:`.eva` (timm's RoPE-ViT layout -> mmlape).

A classifier converts where timm computes it exactly: the ``Default`` join
(the PE added once, to the input) on the plain ViT (one-convolution patch
embedding, fc1-GELU-fc2 MLP, LayerNorm with eps 1e-6, global attention,
class token or GAP). :func:`timm_model` names the timm model and the
``timm.create_model`` arguments, :func:`timm_state_dict` writes the weights
in its names; anything else is refused in one line
(:class:`ValueError`) naming what timm lacks.

- ``VisionTransformer`` (``deit_*`` / ``vit_*`` names): a learnable or
  fixed sin-cos PE (whose values go into timm's learnable ``pos_embed``),
  the class token (``global_pool='token'``) or GAP normalised once
  (``global_pool='avg'``: ``fc_norm=True`` after it, or the final norm
  before it).
- ``Eva`` (the RoPE-ViT names ``vit_*_patch16_rope[_mixed][_ape]_224``):
  RoPE-Axial (``rope_type='cat'``) or RoPE-Mixed (``'mixed'``, every
  layer's ``rope_freqs`` stacked in ``rope.freqs``), with or without an
  absolute PE beside; and GAP between two norms (mmpretrain's and mmlape's
  ``out_type='avg_featmap'``: the final norm, GAP, ``fc_norm``), which
  timm's ``VisionTransformer`` cannot compute but ``Eva`` can.

A class token whose PE row is all zeros (a fixed 2D sin-cos PE, a timm
DeiT-III or RoPE-ViT file converted to mmlape) gets no row in timm
(``no_embed_class=True``): adding zero adds nothing, and the layout is the
one those timm models have.

References:
    timm (>= 1.0.17) ``timm/models/vision_transformer.py``
    (``VisionTransformer``: ``global_pool``, ``fc_norm``, ``final_norm``,
    ``no_embed_class``, ``init_values`` as ``ls1``/``ls2``) and
    ``timm/models/eva.py`` (``Eva`` with ``attn_type='rope'``:
    ``gamma_1``/``gamma_2``, ``rope.freqs``, ``use_fc_norm``,
    ``use_post_transformer_norm``); Heo et al., ECCV 2024 (RoPE-ViT).
"""
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from ..layers.ffn import Mlp
from ..layers.pe_join import DefaultJoin
from ..layers.pooling import ClsTokenPool, GAPPool
from ..layers.tokenizers import PatchEmbed
from .common import BACKBONE_PREFIX, describe_keys, strip_prefix

__all__ = [
    'CLASSIFIER_HEADS', 'TimmModel', 'classifier_weights', 'timm_model',
    'timm_state_dict', 'convert_to_timm'
]

#: mmpretrain's classifier heads timm's ``head`` (one linear layer)
#: computes, and where each keeps that layer.
CLASSIFIER_HEADS = {
    'VisionTransformerClsHead': 'head.layers.head.',
    'LinearClsHead': 'head.fc.',
}
#: The LayerNorm eps of timm's ViTs (``timm.layers.LayerNorm``).
TIMM_LN_EPS = 1e-6
#: timm's sizes, ``(embed_dim, depth, num_heads)``: the size in the printed
#: name (the arguments set the model either way).
_SIZES = {
    (192, 12, 3): 'tiny',
    (384, 12, 6): 'small',
    (768, 12, 12): 'base',
    (1024, 24, 16): 'large',
    (1280, 32, 16): 'huge',
}
#: A ``VisionTransformer`` name per size (``deit_*``: ImageNet's mean and
#: std in the name's pretrained config, as mmlape's DeiT configs); other
#: sizes take the first.
_VIT_NAMES = {
    'tiny': 'deit_tiny_patch16_224',
    'small': 'deit_small_patch16_224',
    'base': 'deit_base_patch16_224',
    'large': 'vit_large_patch16_224',
    'huge': 'vit_huge_patch14_224',
}
#: The RoPE-ViT sizes timm names (others take ``small``).
_EVA_SIZES = ('small', 'base', 'large')
#: timm's ``Eva`` name that sets nothing but sizes (EVA-01's): for an
#: ``Eva`` without layer scale, which the RoPE-ViT names build
#: (``init_values=1e-5``) and ``timm.create_model`` cannot unset (it drops
#: arguments that are None).
_PLAIN_EVA = 'eva_giant_patch14_224'
#: timm's rotary types.
_ROPE_TYPES = {'rope_axial': 'cat', 'rope_mixed': 'mixed'}


@dataclass(frozen=True)
class TimmModel:
    """A timm model that computes an mmlape classifier.

    Attributes:
        name (str): The ``timm.create_model`` name.
        kwargs (dict): Its arguments (``pretrained=False`` aside); they
            override every default of the name that matters.
        notes (list[str]): What the conversion did beyond renaming.
    """
    name: str
    kwargs: Dict[str, Any]
    notes: List[str] = field(default_factory=list)

    @property
    def family(self) -> str:
        """``'Eva'`` or ``'VisionTransformer'``: the timm class."""
        return 'Eva' if 'attn_type' in self.kwargs else 'VisionTransformer'

    def call(self) -> str:
        """The ``timm.create_model(...)`` call, one line of Python.

        Example:
            >>> TimmModel('vit_x', dict(depth=2)).call()
            "timm.create_model('vit_x', pretrained=False, depth=2)"
        """
        args = ''.join(f', {k}={v!r}' for k, v in self.kwargs.items())
        return f'timm.create_model({self.name!r}, pretrained=False{args})'


def classifier_weights(model_cfg: Optional[Mapping],
                       state_dict: Mapping) -> Dict[str, Tensor]:
    """The classifier of an mmpretrain ``ImageClassifier`` state dict as
    timm's ``head.weight`` and ``head.bias``.

    Args:
        model_cfg (Mapping, optional): The ``model`` config, when known:
            its type, neck and head are checked too.
        state_dict (Mapping): The classifier's state dict (``backbone.*``,
            ``head.*``).

    Returns:
        dict: ``head.weight`` ``(num_classes, C)`` and ``head.bias``.

    Raises:
        ValueError: Another model type, a neck, another head (a hidden
            layer, another head type), or keys of neither backbone nor
            classifier.
    """
    cfg = dict(model_cfg or {})
    kind = str(cfg.get('type') or 'ImageClassifier').split('.')[-1]
    if kind != 'ImageClassifier':
        raise ValueError(f'model.type={kind!r}: only an ImageClassifier '
                         f'(backbone and classification head) becomes a timm '
                         f'classifier')
    if cfg.get('neck'):
        neck = cfg['neck']
        name = neck.get('type') if isinstance(neck, Mapping) else neck
        raise ValueError(f'timm\'s ViTs have no neck between backbone and '
                         f'head; this model has model.neck={name!r}')
    head = cfg.get('head') or {}
    head_type = str(head.get('type', '')).split('.')[-1] if isinstance(
        head, Mapping) else ''
    if head_type and head_type not in CLASSIFIER_HEADS:
        raise ValueError(f'timm\'s classifier is one linear layer; '
                         f'model.head.type={head_type!r} is not one of '
                         f'{list(CLASSIFIER_HEADS)}')
    if isinstance(head, Mapping) and head.get('hidden_dim'):
        raise ValueError(f'timm\'s ViTs have no pre-logits layer; this head '
                         f'has one (model.head.hidden_dim='
                         f'{head["hidden_dim"]!r})')
    other = [
        k for k in state_dict if not k.startswith((BACKBONE_PREFIX, 'head.'))
    ]
    if other:
        raise ValueError(f'keys of neither backbone nor classifier, which '
                         f'timm\'s model has no place for: '
                         f'{describe_keys(other)}')
    head_keys = [k for k in state_dict if k.startswith('head.')]
    for prefix in CLASSIFIER_HEADS.values():
        if f'{prefix}weight' not in state_dict:
            continue
        wanted = {f'{prefix}weight', f'{prefix}bias'}
        extra = sorted(set(head_keys) - wanted)
        if extra or f'{prefix}bias' not in state_dict:
            raise ValueError(f'timm\'s classifier is one linear layer with '
                             f'a bias ({prefix}weight, {prefix}bias); the '
                             f'head has {describe_keys(head_keys)}')
        return OrderedDict((f'head.{p}', state_dict[f'{prefix}{p}'])
                           for p in ('weight', 'bias'))
    found = describe_keys(head_keys) if head_keys else 'no head.* keys'
    raise ValueError(f'no classifier mmlape knows in the checkpoint: '
                     f'expected {" or ".join(CLASSIFIER_HEADS.values())}'
                     f'weight (VisionTransformerClsHead, LinearClsHead), '
                     f'found {found}')


# ----------------------------------------------------------------------
# what timm computes
def _check_norm(norm: nn.Module, where: str) -> None:
    if not isinstance(norm, nn.LayerNorm) or not norm.elementwise_affine \
            or norm.bias is None:
        raise ValueError(f'timm\'s ViTs normalise with an affine LayerNorm; '
                         f'{where} is {type(norm).__name__}')
    if norm.eps != TIMM_LN_EPS:
        raise ValueError(f'timm\'s ViTs build their LayerNorms with eps '
                         f'{TIMM_LN_EPS:g}; {where} has eps {norm.eps:g} '
                         f'(norm_cfg)')


def _check_tokenizer(backbone: nn.Module) -> Tuple[int, int]:
    """The patch size and input channels of a tokenizer timm's
    ``PatchEmbed`` computes."""
    embed = backbone.patch_embed
    if type(embed) is not PatchEmbed:
        raise ValueError(f'timm\'s ViTs embed patches with one strided '
                         f'convolution; this backbone\'s tokenizer is '
                         f'{type(embed).__name__}')
    p = embed.patch_size
    if embed.stride != p or embed.dilation != 1 or (isinstance(
            embed.padding, int) and embed.padding) or embed.norm is not None:
        raise ValueError(f'timm\'s patch embedding is a convolution whose '
                         f'stride is its kernel, without padding or norm; '
                         f'this one has patch_size={p}, stride='
                         f'{embed.stride}, dilation={embed.dilation}, '
                         f'padding={embed.padding!r}, norm '
                         f'{type(embed.norm).__name__}')
    if any(n % p for n in backbone.img_size):
        raise ValueError(f'img_size={backbone.img_size} is not a whole '
                         f'number of {p}x{p} patches (timm\'s patch grid '
                         f'drops a partial patch, mmlape\'s pads it)')
    wants_bias = isinstance(backbone.pre_norm, nn.Identity)
    if (embed.proj.bias is not None) != wants_bias:
        raise ValueError(f'timm\'s patch embedding has a bias exactly when '
                         f'there is no pre_norm; this one has '
                         f'patch_bias={embed.proj.bias is not None} and '
                         f'pre_norm={not wants_bias}')
    return p, embed.proj.in_channels


def _check_blocks(backbone: nn.Module) -> Dict[str, Any]:
    """What every block shares (heads, MLP width, qkv bias, layer scale,
    rotary theta), refusing a block timm's blocks do not compute."""
    dims = backbone.embed_dims
    first: Optional[Dict[str, Any]] = None
    for i, blk in enumerate(backbone.blocks):
        where = f'block {i}'
        if getattr(blk, 'pe_norm', None) is not None:
            raise ValueError(f'timm\'s ViT blocks have no PE norm; {where} '
                             f'has blocks.{i}.pe_norm')
        attn, mlp = blk.attn, blk.mlp
        if type(mlp) is not Mlp or type(mlp.act) is not nn.GELU or \
                mlp.act.approximate != 'none':
            raise ValueError(f'timm\'s ViT MLP is fc1, GELU, fc2; {where} '
                             f'has {type(mlp).__name__} '
                             f'({getattr(mlp, "act", None)!r})')
        for name in ('norm1', 'norm2'):
            _check_norm(getattr(blk, name), f'blocks.{i}.{name}')
        if blk.norm2_in_residual:
            raise ValueError(f'timm\'s blocks keep the stream un-normalised '
                             f'before the MLP residual; {where} has '
                             f'norm2_in_residual=True (ViT-Lite, CCT)')
        if attn.window_size:
            raise ValueError(f'timm\'s ViTs attend globally; {where} has '
                             f'window_size={attn.window_size}')
        if attn.rel_pos_grid is not None:
            raise ValueError(f'timm\'s ViTs have no relative PE; {where} '
                             f'has a relative position bias table')
        if attn.qk_scale is not None and \
                attn.qk_scale != attn.head_dims**-0.5:
            raise ValueError(f'timm\'s attention scales the logits by '
                             f'head_dims ** -0.5; {where} has '
                             f'qk_scale={attn.qk_scale!r}')
        if attn.proj.bias is None:
            raise ValueError(f'timm\'s attention projection has a bias; '
                             f'{where} has none (proj_bias=False)')
        if mlp.fc1.bias is None or mlp.fc2.bias is None:
            raise ValueError(f'timm\'s MLP layers have biases; {where} '
                             f'lacks one')
        shared = dict(
            num_heads=attn.num_heads,
            hidden=mlp.fc1.out_features,
            qkv_bias=attn.qkv.bias is not None,
            layer_scale=blk.layer_scale,
            rope_type=attn.rope_type,
            rope_theta=getattr(attn, 'rope_theta', None))
        if first is None:
            first = shared
        elif shared != first:
            diff = [k for k in shared if shared[k] != first[k]]
            raise ValueError(f'timm builds every block alike; block {i} '
                             f'differs from block 0 in '
                             f'{", ".join(diff)} (layer_cfgs)')
    assert first is not None
    if dims % first['num_heads']:
        raise ValueError(f'{first["num_heads"]} heads do not divide '
                         f'{dims} channels')
    ratio = first['hidden'] / dims
    if int(dims * ratio) != first['hidden']:
        raise ValueError(f'timm computes the MLP width as int(embed_dim * '
                         f'mlp_ratio), which misses {first["hidden"]} for '
                         f'embed_dim {dims}')
    first['mlp_ratio'] = ratio
    return first


def _pool(backbone: nn.Module) -> str:
    """timm's ``global_pool`` of the backbone's output."""
    pool = backbone.pool
    if pool is not None and type(pool) is ClsTokenPool:
        return 'token'
    if pool is not None and type(pool) is GAPPool:
        return 'avg'
    name = type(pool).__name__ if pool is not None else \
        f'none (out_type={backbone.out_type!r})'
    raise ValueError(f'timm\'s classifiers pool the class token or the '
                     f'patches\' mean (GAP); this backbone\'s pooling is '
                     f'{name}')


def _cls_row_is_zero(backbone: nn.Module, pos_embed: Optional[Tensor]) -> bool:
    return (pos_embed is not None and backbone.with_cls_token
            and bool(pos_embed[:, 0].eq(0).all()))


def _name(family: str, size: Optional[str], rope: Optional[str], ape: bool,
          layer_scale: bool) -> str:
    if family == 'VisionTransformer':
        return _VIT_NAMES.get(size or 'tiny', _VIT_NAMES['tiny'])
    if not (rope and layer_scale):
        return _PLAIN_EVA
    size = size if size in _EVA_SIZES else 'small'
    mixed = '_mixed' if rope == 'rope_mixed' else ''
    return f'vit_{size}_patch16_rope{mixed}{"_ape" if ape else ""}_224'


def timm_model(backbone: nn.Module,
               num_classes: int,
               init_values: Optional[float] = None,
               pos_embed: Optional[Tensor] = None) -> TimmModel:
    """The timm model that computes a classifier of ``backbone``.

    Args:
        backbone (nn.Module): A built :class:`~mmlape.models.backbones.
            LaPEViT` (the class itself: the dense backbones built on it
            have no classifier).
        num_classes (int): The classifier's classes.
        init_values (float, optional): What timm's layer scale starts at,
            where the blocks have one (its weights are the checkpoint's
            either way). Defaults to None (1e-5, the RoPE-ViT models').
        pos_embed (Tensor, optional): The absolute PE the checkpoint holds
            (a learnable one's values); None takes the backbone's own.
            Decides ``no_embed_class`` (a zero class-token row).

    Returns:
        TimmModel: Name, arguments and notes.

    Raises:
        ValueError: Something timm's ViTs do not compute: a join other than
            ``Default`` (named), a relative PE, another tokenizer, FFN,
            norm or pooling, window attention, unlike blocks, a classifier
            on an intermediate layer.
    """
    join = backbone.pe_join
    if type(join) is not DefaultJoin:
        raise ValueError(
            f'timm has no {join.name} join: its ViTs add the PE once, to '
            f'the input (pe_join.type=\'Default\'); this backbone has '
            f'pe_join.type={join.name!r}')
    if backbone.pe_part.kind == 'relative':
        raise ValueError(f'timm\'s ViTs have no relative PE '
                         f'(pe_type={backbone.pe_type!r})')
    if backbone.out_indices[-1] != backbone.num_layers - 1:
        raise ValueError(f'the classifier reads layer '
                         f'{backbone.out_indices[-1]} (out_indices), not '
                         f'the last one as timm\'s does')
    patch, in_chans = _check_tokenizer(backbone)
    blocks = _check_blocks(backbone)
    global_pool = _pool(backbone)
    pre_norm = not isinstance(backbone.pre_norm, nn.Identity)
    if pre_norm:
        _check_norm(backbone.pre_norm, 'pre_norm')
    final_norm = bool(backbone.final_norm)
    if final_norm:
        _check_norm(backbone.norm, 'norm')
    fc_norm = backbone.fc_norm is not None
    if fc_norm:
        _check_norm(backbone.fc_norm, 'fc_norm')
    rope = backbone.rope_type
    if pos_embed is None:
        pos_embed = backbone.pos_embed
    has_ape = pos_embed is not None
    notes: List[str] = []
    # GAP between two norms: timm's VisionTransformer normalises once
    two_norms = global_pool == 'avg' and final_norm and fc_norm
    family = 'Eva' if rope or two_norms else 'VisionTransformer'
    dims, depth = backbone.embed_dims, backbone.num_layers
    size = _SIZES.get((dims, depth, blocks['num_heads']))
    h, w = backbone.img_size
    no_embed_class = _cls_row_is_zero(backbone, pos_embed)
    kwargs: Dict[str, Any] = dict(
        img_size=h if h == w else (h, w),
        patch_size=patch,
        in_chans=in_chans,
        num_classes=num_classes,
        embed_dim=dims,
        depth=depth,
        num_heads=blocks['num_heads'],
        mlp_ratio=blocks['mlp_ratio'],
        qkv_bias=blocks['qkv_bias'],
        init_values=(init_values or 1e-5) if blocks['layer_scale'] else None,
        class_token=backbone.with_cls_token,
        no_embed_class=no_embed_class,
        global_pool=global_pool)
    if family == 'VisionTransformer':
        # timm: `norm` where final_norm and not fc_norm; `fc_norm` where
        # final_norm and fc_norm
        kwargs.update(
            fc_norm=fc_norm,
            final_norm=final_norm or fc_norm,
            pre_norm=pre_norm)
    else:
        kwargs.update(
            use_fc_norm=fc_norm,
            use_post_transformer_norm=final_norm,
            use_pre_transformer_norm=pre_norm,
            attn_type='rope',
            use_abs_pos_emb=has_ape,
            use_rot_pos_emb=rope is not None)
        if rope:
            kwargs.update(
                rope_type=_ROPE_TYPES[rope],
                rope_grid_indexing='xy',
                rope_temperature=float(blocks['rope_theta']))
        if two_norms:
            notes.append('timm\'s Eva: the model normalises before and '
                         'after GAP (norm, fc_norm), which timm\'s '
                         'VisionTransformer cannot')
    fixed = backbone.ape_type or backbone.pe_type
    if fixed in ('sincos1d', 'sincos2d'):
        notes.append(f'pos_embed: the fixed {fixed} PE\'s values, in '
                     f'timm\'s learnable pos_embed')
    if no_embed_class:
        notes.append('pos_embed: the class token\'s row is zero, so it has '
                     'none in timm (no_embed_class=True)')
    name = _name(family, size, rope, has_ape, blocks['layer_scale'])
    if name == _PLAIN_EVA and rope:
        notes.append(f'{_PLAIN_EVA}, timm\'s plain Eva: its RoPE-ViT '
                     f'names build layer scale, which this model lacks (the '
                     f'arguments make it this RoPE-ViT)')
    return TimmModel(name, kwargs, notes)


# ----------------------------------------------------------------------
# the weights
def timm_state_dict(backbone: nn.Module, backbone_state: Mapping,
                    head: Mapping, model: TimmModel) -> Dict[str, Tensor]:
    """A classifier's weights in the names of the timm model ``model``.

    Args:
        backbone (nn.Module): The built backbone (its fixed sin-cos PE, if
            any, is taken from it).
        backbone_state (Mapping): Its weights (no ``backbone.`` prefix),
            the keys and shapes of ``backbone.state_dict()``.
        head (Mapping): ``head.weight``, ``head.bias``
            (:func:`classifier_weights`).
        model (TimmModel): :func:`timm_model`'s result for them.

    Returns:
        dict: timm's state dict (copies), loadable with ``strict=True``.

    Raises:
        ValueError: A backbone key with no counterpart in timm's model.
    """
    eva = model.family == 'Eva'
    gammas = ('gamma_1', 'gamma_2') if eva else ('ls1.gamma', 'ls2.gamma')
    out: Dict[str, Tensor] = OrderedDict()
    freqs: Dict[int, Tensor] = {}
    unknown = []
    same = ('patch_embed.proj.', 'norm.', 'fc_norm.')
    for key, value in backbone_state.items():
        parts = key.split('.')
        if key in ('cls_token', 'pos_embed') or key.startswith(same):
            out[key] = value
        elif key.startswith('pre_norm.'):
            out['norm_pre.' + key[len('pre_norm.'):]] = value
        elif parts[0] == 'blocks' and len(parts) >= 3:
            i, name = int(parts[1]), '.'.join(parts[2:])
            if name in ('gamma1', 'gamma2'):
                out[f'blocks.{i}.{gammas[int(name[-1]) - 1]}'] = value
            elif name == 'attn.rope_freqs':
                freqs[i] = value
            elif name.startswith(('norm1.', 'norm2.', 'attn.qkv.',
                                  'attn.proj.', 'mlp.fc1.', 'mlp.fc2.')):
                out[key] = value
            else:
                unknown.append(key)
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(f'keys timm\'s {model.family} has no place for: '
                         f'{describe_keys(unknown)}')
    if model.kwargs.get('use_abs_pos_emb', True) and 'pos_embed' not in out:
        # a fixed sin-cos PE: a buffer of the backbone, not a weight
        ref = out['patch_embed.proj.weight']
        out['pos_embed'] = backbone.pos_embed.to(ref.dtype)
    if model.kwargs['no_embed_class'] and 'pos_embed' in out:
        out['pos_embed'] = out['pos_embed'][:, 1:]
    if freqs:
        out['rope.freqs'] = torch.stack([freqs[i] for i in range(len(freqs))],
                                        dim=1)
    out.update(head)
    return OrderedDict(
        (k, v.detach().clone().contiguous()) for k, v in out.items())


def convert_to_timm(
    backbone: nn.Module,
    state_dict: Mapping,
    model_cfg: Optional[Mapping] = None
) -> Tuple[TimmModel, Dict[str, Tensor]]:
    """An mmlape classifier's state dict as a timm model's.

    Args:
        backbone (nn.Module): The built backbone of the classifier (its
            config's).
        state_dict (Mapping): The classifier's weights (``backbone.*``,
            ``head.*``).
        model_cfg (Mapping, optional): The classifier's ``model`` config:
            its model type, neck and head are checked, its backbone's
            ``layer_scale_init_value`` starts timm's layer scale.

    Returns:
        tuple[TimmModel, dict]: The timm model and its state dict.

    Raises:
        ValueError: What timm cannot compute (:func:`timm_model`,
            :func:`classifier_weights`), or weights that do not fit the
            backbone (missing, unexpected or other-shaped keys).
    """
    head = classifier_weights(model_cfg, state_dict)
    weights = strip_prefix(state_dict, BACKBONE_PREFIX)
    wanted = backbone.state_dict()
    missing = [k for k in wanted if k not in weights]
    unexpected = [k for k in weights if k not in wanted]
    shapes = [
        k for k in wanted
        if k in weights and tuple(weights[k].shape) != tuple(wanted[k].shape)
    ]
    if missing or unexpected or shapes:
        what = '; '.join(f'{label}: {describe_keys(keys)}'
                         for label, keys in (('missing', missing),
                                             ('unexpected', unexpected),
                                             ('other shapes', shapes)) if keys)
        raise ValueError(f'the weights do not fit the backbone of the '
                         f'config ({what})')
    options = dict((model_cfg or {}).get('backbone') or {})
    value = options.get('layer_scale_init_value')
    init_values = float(value) if isinstance(value,
                                             (int, float)) and value else None
    model = timm_model(backbone, head['head.weight'].shape[0], init_values,
                       weights.get('pos_embed'))
    return model, timm_state_dict(backbone, weights, head, model)
