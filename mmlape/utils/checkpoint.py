"""Checkpoint layouts users hold, their conversion to mmlape, and the fit.

References:
    The official DeiT and LaPE code (timm names; the distilled DeiT's
    ``dist_token``, 198-row ``pos_embed`` and ``head_dist``; the LaPE code's
    2D relative PE with ``blocks.{i}.attn.pe_norm`` and a stored
    ``relative_position_index``; ``pos_embed{i}`` of the unshared PE), the
    official ViT-Adapter detection and segmentation code (the backbone keeps
    DeiT's ``1 + N``-row ``pos_embed`` but has no class token and never uses
    row 0), mmpretrain's ``VisionTransformer`` / ``DistilledVisionTransformer``
    and mmseg's ``VisionTransformer`` (their key names). The split into a
    pure filter that a model merely calls follows timm's
    ``checkpoint_filter_fn``.

Everything a checkpoint needs before it reaches an mmlape backbone happens
here, in three steps, on plain dicts of tensors:

1. :func:`detect_layout` names the layout: the key naming and, row by row,
   what the extra (non-patch) rows of ``pos_embed`` are. The layout, not the
   presence of a ``cls_token`` key, decides how many extra rows there are
   (a distilled DeiT has two, the official ViT-Adapter one unused row and no
   class token).
2. :func:`convert_layout` renames the keys to mmlape's and keeps only the
   rows an mmlape model can use: a class-token row (when the source has a
   class token) followed by the patch rows.
3. :func:`fit_pos_embed` and :func:`check_join_compatible` fit the result to
   one backbone (:class:`BackboneSpec`): resize the patch grid, drop or add
   the class-token row, and refuse what cannot fit with a message that names
   the problem.

The backbone only calls these: :meth:`LaPEViT._fit_state_dict` runs
:func:`fit_state_dict` on every ``load_state_dict`` (``load_from``, test and
resume checkpoints), :meth:`LaPEViT.load_pretrained` runs
:func:`load_backbone_checkpoint` (read, convert, check, load, log) for
``init_cfg``; ``tools/convert/vit_to_mmlape.py`` writes the converted file
(:func:`convert_checkpoint`).
"""
import math
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List, Literal, Mapping, Optional, Tuple

import torch
from torch import Tensor

__all__ = [
    'BACKBONE_PREFIX', 'FORMATS', 'BackboneSpec', 'Layout', 'Converted',
    'unwrap_state_dict', 'strip_prefix', 'select_backbone', 'detect_format',
    'detect_layout', 'convert_layout', 'convert_backbone', 'convert_timm_vit',
    'convert_mmpretrain_vit', 'convert_mmseg_vit', 'convert_checkpoint',
    'fit_pos_embed', 'fit_state_dict', 'check_join_compatible',
    'pe_norm_layers', 'load_backbone_checkpoint', 'FAMILY_FORMATS',
    'detect_vit_family_format', 'convert_vit_family',
    'convert_vit_family_checkpoint', 'SWIN_FORMATS', 'detect_swin_format',
    'convert_official_swin', 'convert_mmpretrain_swin',
    'convert_swin_backbone', 'convert_swin_checkpoint', 'SwinSpec',
    'fit_swin_state_dict', 'check_swin_join_compatible', 'load_swin_checkpoint'
]

#: The prefix of a backbone's keys in a whole model's state dict (mmengine
#: classifiers, detectors and segmentors all name their backbone so).
BACKBONE_PREFIX = 'backbone.'

Format = Literal['mmlape', 'timm', 'mmpretrain', 'mmseg']
#: Key namings mmlape reads.
FORMATS = ('mmlape', 'timm', 'mmpretrain', 'mmseg')

#: What an extra row of ``pos_embed`` holds. ``cls``: a class token's
#: position; ``dist``: a distillation token's; ``unused``: a row the source
#: model never adds to any token (the official ViT-Adapter keeps DeiT's
#: class row although it has no class token).
ROW_KINDS = ('cls', 'dist', 'unused')

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
    (r'^(cls_token|pos_embed|dist_token)$', r'\1'),
]
_MMSEG_RULES: List[Tuple[str, str]] = [
    (r'^layers\.(\d+)\.attn\.attn\.in_proj_(weight|bias)$',
     r'blocks.\1.attn.qkv.\2'),
    (r'^layers\.(\d+)\.attn\.attn\.out_proj\.', r'blocks.\1.attn.proj.'),
] + _MMPRETRAIN_RULES
# Keys of the official LaPE code's relative-PE blocks.
_LAPE_REL_NORM = re.compile(r'^blocks\.(\d+)\.attn\.pe_norm\.(weight|bias)$')
_LAPE_REL_INDEX = re.compile(r'^blocks\.(\d+)\.attn\.relative_position_index$')
# Modules only a ViT-Adapter backbone has.
_ADAPTER_KEY = re.compile(r'^(level_embed$|spm\.|interactions\.)')
_PE_NORM_KEY = re.compile(r'^blocks\.(\d+)\.pe_norm\.')


@dataclass(frozen=True)
class Layout:
    """How a checkpoint's backbone is laid out.

    Attributes:
        name (str): ``'mmlape'``, ``'deit'`` (official DeiT/LaPE, timm
            names), ``'deit-distilled'``, ``'lape-relative'`` (the LaPE
            code's 2D relative PE), ``'vit-adapter'`` (official ViT-Adapter
            detection/segmentation), ``'timm'`` (timm names, no class
            token), ``'mmpretrain'`` or ``'mmseg'``.
        naming (str): One of :data:`FORMATS`.
        extra_rows (tuple[str]): What each ``pos_embed`` row before the patch
            rows holds, in order (see :data:`ROW_KINDS`).
    """
    name: str
    naming: str
    extra_rows: Tuple[str, ...] = ()

    def describe(self) -> str:
        rows = ', '.join(self.extra_rows) or 'none'
        return f'{self.name} layout ({self.naming} names, extra PE rows: ' \
               f'{rows})'


@dataclass
class Converted:
    """A backbone state dict in mmlape's names and PE layout.

    Attributes:
        state_dict (dict): mmlape backbone keys, no prefix.
        layout (Layout): The layout it came from.
        notes (list[str]): What the conversion dropped or changed, for the
            caller's log.
    """
    state_dict: Dict[str, Tensor]
    layout: Layout
    notes: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class BackboneSpec:
    """What one mmlape backbone expects of a checkpoint.

    Attributes:
        pos_embed_shape (tuple[int, int, int], optional): ``(P, rows, C)`` of
            the learnable PE; None when the PE is not a parameter (fixed
            sin-cos buffers, relative PE).
        num_extra_tokens (int): Rows before the patch rows (1 with a class
            token, else 0).
        grid_size (tuple[int, int]): The PE's patch grid.
        interpolate_mode (str): How patch rows are resized.
        join (str): The PE join's name, for messages.
        pe_norm_layers (tuple[int]): Layers that own ``blocks.{i}.pe_norm``.
    """
    pos_embed_shape: Optional[Tuple[int, int, int]]
    num_extra_tokens: int
    grid_size: Tuple[int, int]
    interpolate_mode: str = 'bicubic'
    join: str = 'Default'
    pe_norm_layers: Tuple[int, ...] = ()


# ----------------------------------------------------------------------
# selecting the backbone
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


def strip_prefix(state_dict: Mapping, prefix: str) -> Dict[str, Tensor]:
    """The entries under ``prefix``, with the prefix removed."""
    return OrderedDict((k[len(prefix):], v) for k, v in state_dict.items()
                       if k.startswith(prefix))


def select_backbone(state_dict: Mapping,
                    prefix: Optional[str] = None) -> Dict[str, Tensor]:
    """The backbone part of a state dict.

    Args:
        state_dict (Mapping): A whole model's or a bare backbone's state.
        prefix (str, optional): Keep the keys under this prefix, stripped.
            None takes :data:`BACKBONE_PREFIX` when any key has it and the
            whole dict otherwise (an official DeiT file is a bare backbone
            plus its head). Defaults to None.

    Raises:
        ValueError: An explicit ``prefix`` that no key has.
    """
    if prefix is None:
        if any(k.startswith(BACKBONE_PREFIX) for k in state_dict):
            return strip_prefix(state_dict, BACKBONE_PREFIX)
        return OrderedDict(state_dict)
    selected = strip_prefix(state_dict, prefix)
    if not selected:
        raise ValueError(f'the checkpoint has no keys under prefix '
                         f'"{prefix}" (keys start e.g. with '
                         f'{sorted({k.split(".")[0] for k in state_dict})[:5]}'
                         f')')
    return selected


# ----------------------------------------------------------------------
# step 1: the layout
def detect_format(state_dict: Mapping) -> Format:
    """Which naming a ViT state dict uses.

    Args:
        state_dict (Mapping): A (possibly ``backbone.``-prefixed) state dict.

    Returns:
        str: ``'mmlape'``, ``'timm'``, ``'mmpretrain'`` or ``'mmseg'``.

    Raises:
        ValueError: If the keys look like no known ViT.
    """
    keys = list(select_backbone(state_dict))
    if any('.attn.attn.in_proj_weight' in k for k in keys):
        return 'mmseg'
    if any(k.startswith('layers.') and '.ln1.' in k for k in keys):
        return 'mmpretrain'
    if any(k.startswith('blocks.') for k in keys):
        prefixed = any(k.startswith(BACKBONE_PREFIX) for k in state_dict)
        return 'mmlape' if prefixed else 'timm'
    raise ValueError('Not a ViT checkpoint mmlape knows: expected keys like '
                     '"blocks.0.norm1.weight" (timm/mmlape), '
                     '"layers.0.ln1.weight" (mmpretrain/mmseg); got e.g. '
                     f'{list(state_dict)[:5]}')


def _pe_rows(state_dict: Mapping) -> Optional[int]:
    pe = state_dict.get('pos_embed')
    if pe is None:
        rows = [
            v.shape[-2] for k, v in state_dict.items()
            if re.match(r'^pos_embed\d+$', k)
        ]
        return rows[0] if rows else None
    return pe.shape[-2]


def _is_square(n: int) -> bool:
    return n >= 0 and math.isqrt(n)**2 == n


def detect_layout(state_dict: Mapping, fmt: Optional[str] = None) -> Layout:
    """Name the layout of a backbone state dict (keys without prefix).

    Rules, from the sources' code:

    - mmseg's ViT always owns a class token and a ``1 + N``-row PE.
    - Elsewhere each token the source owns (``cls_token``, then
      ``dist_token``) has a PE row, in that order.
    - A ViT-Adapter backbone (``level_embed``, ``spm.*``, ``interactions.*``)
      without a class token whose PE has ``k*k + 1`` rows is the official
      ViT-Adapter: it keeps DeiT's class row and never uses it. mmlape's own
      ViT-Adapter has ``k*k`` rows; ``k*k + 1`` is never a square, so the
      two cannot be confused for a square grid.
    - Blocks with ``attn.pe_norm`` or a stored ``attn.relative_position_index``
      are the LaPE code's relative PE.

    Args:
        state_dict (Mapping): Backbone keys, no prefix.
        fmt (str, optional): The naming; detected when None (a dict without
            prefix is then read as timm-named).

    Returns:
        Layout: The layout.
    """
    fmt = fmt or detect_format(state_dict)
    if fmt == 'mmseg':
        return Layout('mmseg', fmt, ('cls', ))
    tokens = tuple(kind for kind, key in (('cls', 'cls_token'), ('dist',
                                                                 'dist_token'))
                   if key in state_dict)
    if fmt == 'mmpretrain':
        return Layout('mmpretrain', fmt, tokens)
    if any(
            _LAPE_REL_NORM.match(k) or _LAPE_REL_INDEX.match(k)
            for k in state_dict):
        return Layout('lape-relative', 'timm', tokens)
    rows = _pe_rows(state_dict)
    is_adapter = any(_ADAPTER_KEY.match(k) for k in state_dict)
    if (is_adapter and not tokens and rows is not None and not _is_square(rows)
            and _is_square(rows - 1)):
        return Layout('vit-adapter', 'mmlape', ('unused', ))
    if is_adapter:  # only mmlape and the official code have these modules
        return Layout('mmlape', 'mmlape', tokens)
    if 'dist' in tokens:
        return Layout('deit-distilled', 'timm', tokens)
    if fmt == 'timm':
        return Layout('deit' if tokens else 'timm', fmt, tokens)
    return Layout('mmlape', 'mmlape', tokens)


# ----------------------------------------------------------------------
# step 2: mmlape names and PE rows
def _apply_rules(sd: Mapping,
                 rules: List[Tuple[str, str]],
                 source: str,
                 dropped: tuple = ()) -> Dict[str, Tensor]:
    """Rename every key by the first of ``rules`` that matches it; keys
    matching a ``dropped`` pattern (buffers the model rebuilds) are left
    out, any other key is refused, naming ``source`` (e.g. ``'an mmpretrain
    ViT'``)."""
    out = OrderedDict()
    for key, value in sd.items():
        if any(re.search(p, key) for p in dropped):
            continue
        for pattern, repl in rules:
            if re.match(pattern, key):
                out[re.sub(pattern, repl, key)] = value
                break
        else:
            raise ValueError(f'Cannot convert key "{key}" of {source} '
                             f'checkpoint: mmlape has no counterpart')
    return out


def convert_mmpretrain_vit(state_dict: Mapping) -> Dict[str, Tensor]:
    """mmpretrain ``VisionTransformer`` backbone keys to mmlape's names."""
    return _apply_rules(state_dict, _MMPRETRAIN_RULES, 'an mmpretrain ViT')


def convert_mmseg_vit(state_dict: Mapping) -> Dict[str, Tensor]:
    """mmseg ``VisionTransformer`` backbone keys to mmlape's names (the
    fused ``in_proj`` of ``nn.MultiheadAttention`` is mmlape's ``qkv``)."""
    return _apply_rules(state_dict, _MMSEG_RULES, 'an mmseg ViT')


def _stack_unshared(state_dict: Mapping) -> Dict[str, Tensor]:
    """``pos_embed0..pos_embed{L-1}`` (the LaPE code's unshared PE) stacked
    into one ``(L, N', C)`` ``pos_embed``."""
    out, per_layer = OrderedDict(), {}
    for key, value in state_dict.items():
        m = re.match(r'^pos_embed(\d+)$', key)
        if m:
            per_layer[int(m.group(1))] = value
        else:
            out[key] = value
    if per_layer:
        if sorted(per_layer) != list(range(len(per_layer))):
            raise ValueError('Unshared PEs pos_embed0..N are not contiguous:'
                             f' {sorted(per_layer)}')
        out['pos_embed'] = torch.cat(
            [per_layer[i] for i in range(len(per_layer))], dim=0)
    return out


def _convert_lape_relative(state_dict: Mapping,
                           notes: List[str]) -> Dict[str, Tensor]:
    """The LaPE code's relative-PE blocks in mmlape's names.

    ``blocks.{i}.attn.pe_norm`` (the LayerNorm over the key axis) becomes
    ``blocks.{i}.pe_norm``. The stored ``relative_position_index`` is checked
    against the index mmlape computes for the table's grid and dropped
    (mmlape computes it); a different index would pair the table's entries
    with other offsets, so it is refused.
    """
    from mmlape.models.layers.block import relative_position_index
    out = OrderedDict()
    checked = 0
    for key, value in state_dict.items():
        m = _LAPE_REL_NORM.match(key)
        if m:
            out[f'blocks.{m.group(1)}.pe_norm.{m.group(2)}'] = value
            continue
        m = _LAPE_REL_INDEX.match(key)
        if m:
            n = value.shape[0]
            side = math.isqrt(n)
            if value.shape != (n, n) or side * side != n or not torch.equal(
                    value.long(), relative_position_index((side, side))):
                raise ValueError(
                    f'{key} of shape {tuple(value.shape)} is not the '
                    f'relative position index of a square patch grid as '
                    f'mmlape computes it; the bias table would be read with '
                    f'other offsets')
            checked += 1
            continue
        out[key] = value
    if checked:
        notes.append(f'checked and dropped {checked} stored '
                     f'relative_position_index buffers (mmlape computes '
                     f'the same index)')
    return out


def convert_layout(state_dict: Mapping,
                   layout: Optional[Layout] = None) -> Converted:
    """A backbone state dict of any known layout in mmlape's names and PE
    layout.

    Keys are renamed (mmpretrain, mmseg, the LaPE code's relative PE), the
    unshared PEs are stacked, a classifier (``head.*``, ``head_dist.*``) and
    the distillation token are dropped, and ``pos_embed`` keeps only a
    class-token row (when the layout has one) and the patch rows.

    Args:
        state_dict (Mapping): Backbone keys, no prefix.
        layout (Layout, optional): Detected when None.

    Returns:
        Converted: The state dict, its layout and notes on what changed.
    """
    layout = layout or detect_layout(state_dict)
    notes: List[str] = []
    if layout.naming == 'mmseg':
        sd = convert_mmseg_vit(state_dict)
    elif layout.naming == 'mmpretrain':
        sd = convert_mmpretrain_vit(state_dict)
    else:
        sd = _stack_unshared(state_dict)
        if layout.name == 'lape-relative':
            sd = _convert_lape_relative(sd, notes)
    dropped = [
        k for k in sd
        if k == 'dist_token' or k.startswith(('head.', 'head_dist.'))
    ]
    for k in dropped:
        del sd[k]
    if dropped:
        notes.append(f'dropped {dropped} (mmlape backbones have no '
                     f'distillation token; classifiers are not backbone '
                     f'weights)')
    pe = sd.get('pos_embed')
    unused = [i for i, kind in enumerate(layout.extra_rows) if kind != 'cls']
    if pe is not None and unused:
        n_extra = len(layout.extra_rows)
        if not _is_square(pe.shape[-2] - n_extra):
            raise ValueError(
                f'pos_embed has {pe.shape[-2]} rows; the {layout.describe()}'
                f' has {n_extra} extra rows, which leaves '
                f'{pe.shape[-2] - n_extra} patch rows, not a square grid')
        keep = [i for i in range(pe.shape[-2]) if i not in unused]
        sd['pos_embed'] = pe[:, keep]
        kinds = [layout.extra_rows[i] for i in unused]
        notes.append(f'pos_embed: dropped the {" and ".join(kinds)} row(s) '
                     f'of the {layout.name} layout ({pe.shape[-2]} -> '
                     f'{len(keep)} rows)')
    return Converted(sd, layout, notes)


def convert_backbone(state_dict: Mapping,
                     fmt: Optional[str] = None) -> Dict[str, Tensor]:
    """Backbone keys of any known layout, as mmlape names and lays them out.

    Args:
        state_dict (Mapping): A state dict; a ``backbone.`` prefix selects
            the backbone part of a whole model.
        fmt (str, optional): One of :data:`FORMATS`; detected when None.

    Returns:
        dict: mmlape backbone keys, without prefix.
    """
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f'Unknown checkpoint format {fmt!r}; choose one of '
                         f'{list(FORMATS)}')
    fmt = fmt or detect_format(state_dict)
    sd = select_backbone(state_dict)
    return convert_layout(sd, detect_layout(sd, fmt)).state_dict


def convert_timm_vit(state_dict: Mapping) -> Dict[str, Tensor]:
    """Official DeiT / LaPE (timm names) to mmlape backbone keys."""
    return convert_backbone(state_dict, 'timm')


def convert_checkpoint(checkpoint: Mapping,
                       fmt: Optional[str] = None,
                       head: Literal['vit', 'linear', 'none'] = 'vit') -> Dict:
    """A whole checkpoint to an mmlape (mmengine-style) checkpoint.

    Args:
        checkpoint (Mapping): Loaded checkpoint of any known layout.
        fmt (str, optional): Source naming; detected when None.
        head (str): Where a timm classifier ``head.*`` goes: ``'vit'``
            (mmpretrain ``VisionTransformerClsHead``: ``head.layers.head``),
            ``'linear'`` (``LinearClsHead``: ``head.fc``) or ``'none'``.
            A distilled DeiT's ``head_dist`` is dropped. The other parts of
            an OpenMMLab model (necks, heads of mmpretrain/mmdet/mmseg
            checkpoints) are kept as they are. Defaults to ``'vit'``.

    Returns:
        dict: ``{'state_dict': {'backbone.*': ..., ...}, 'meta':
        {'converted_from': naming, 'layout': name, 'notes': [...]}}``.
    """
    if head not in ('vit', 'linear', 'none'):
        raise ValueError(f"head={head!r}; choose 'vit', 'linear' or 'none'")
    sd = unwrap_state_dict(checkpoint)
    fmt = fmt or detect_format(sd)
    if fmt not in FORMATS:
        raise ValueError(f'Unknown checkpoint format {fmt!r}; choose one of '
                         f'{list(FORMATS)}')
    backbone = select_backbone(sd)
    conv = convert_layout(backbone, detect_layout(backbone, fmt))
    out = OrderedDict(
        (BACKBONE_PREFIX + k, v) for k, v in conv.state_dict.items())
    prefixed = any(k.startswith(BACKBONE_PREFIX) for k in sd)
    if not prefixed:  # a bare timm-named model: its classifier is head.*
        target = {'vit': 'head.layers.head.', 'linear': 'head.fc.'}
        if head != 'none':
            for suffix in ('weight', 'bias'):
                if 'head.' + suffix in sd:
                    out[target[head] + suffix] = sd['head.' + suffix]
    else:
        for k, v in sd.items():
            if not k.startswith(BACKBONE_PREFIX):
                out[k] = v
    return dict(
        state_dict=out,
        meta=dict(
            converted_from=fmt, layout=conv.layout.name, notes=conv.notes))


# ----------------------------------------------------------------------
# step 3: fit one backbone
def pe_norm_layers(state_dict: Mapping) -> List[int]:
    """Layers that own a PE norm (``blocks.{i}.pe_norm``) in a backbone
    state dict."""
    return sorted({
        int(m.group(1))
        for m in (_PE_NORM_KEY.match(k) for k in state_dict) if m
    })


def check_join_compatible(state_dict: Mapping, spec: BackboneSpec) -> None:
    """Refuse a backbone state dict trained with another join.

    The layers that own a PE norm must be the same in the checkpoint and in
    the model. An MPVG checkpoint may initialise a PVG model (its
    ``pe_join.last_norm`` is then reported as unexpected): that is how MPVG
    reaches a backbone without a final norm.

    Raises:
        ValueError: Names both joins' PE-norm layers.
    """
    found = pe_norm_layers(state_dict)
    if found != list(spec.pe_norm_layers):
        raise ValueError(
            f'Checkpoint does not fit the join: it has PE norms '
            f'(blocks.{{i}}.pe_norm) in layers {found} but this model '
            f'(pe_join.type={spec.join!r}) has them in layers '
            f'{list(spec.pe_norm_layers)}. Initialise from a checkpoint '
            f'trained with the same join (e.g. a LaPE ImageNet checkpoint '
            f'for a LaPE model, an MPVG one for PVG/MPVG).')


def fit_pos_embed(src: Tensor,
                  src_extra: int,
                  spec: BackboneSpec,
                  key: str = 'pos_embed') -> Tuple[Tensor, List[str]]:
    """Fit an mmlape-layout PE to one backbone.

    Args:
        src (Tensor): ``(P, src_extra + N, C)``; its extra row, if any, is a
            class token's.
        src_extra (int): 1 when ``src`` has a class-token row, else 0.
        spec (BackboneSpec): The backbone.
        key (str): The key's name, for messages. Defaults to ``'pos_embed'``.

    Returns:
        tuple[Tensor, list[str]]: The fitted PE and notes on what changed.

    Raises:
        ValueError: Another width, another number of PEs (Unshare keeps one
            per layer), or patch rows of another count that are not a
            square grid.
    """
    from mmlape.models.layers.pos_embed import resize_pos_embed
    dst = spec.pos_embed_shape
    notes: List[str] = []
    if src.dim() != 3 or src.shape[-1] != dst[-1]:
        raise ValueError(
            f'Checkpoint does not fit: its {key} has shape '
            f'{tuple(src.shape)} but this model has {tuple(dst)} (embed_dims '
            f'{dst[-1]}). Use a checkpoint of the same width.')
    if src.shape[0] != dst[0]:
        raise ValueError(
            f'Checkpoint does not fit: it has {src.shape[0]} position '
            f'embedding(s) in {key} but pe_join.type={spec.join!r} needs '
            f'{dst[0]} (Unshare keeps one per layer). Use a checkpoint of '
            f'the same join.')
    want = spec.num_extra_tokens
    if src_extra > want:
        src = src[:, src_extra - want:]
        notes.append(f'{key}: dropped the class-token row (this model has '
                     f'no class token)')
    elif src_extra < want:
        src = torch.cat([src.new_zeros(src.shape[0], 1, src.shape[2]), src],
                        dim=1)
        notes.append(f'{key}: added a zero class-token row (the checkpoint '
                     f'has no class token)')
    n = src.shape[1] - want
    grid = tuple(spec.grid_size)
    if n != grid[0] * grid[1]:
        side = math.isqrt(n)
        if side * side != n:
            raise ValueError(
                f'Checkpoint does not fit: after its extra rows, {key} has '
                f'{n} patch rows, which is not a square grid; cannot resize '
                f'it to this model\'s {grid[0]}x{grid[1]} grid')
        src = resize_pos_embed(
            src, (side, side),
            grid,
            mode=spec.interpolate_mode,
            num_extra_tokens=want)
        notes.append(f'{key}: resized from a {side}x{side} to a {grid[0]}x'
                     f'{grid[1]} grid ({spec.interpolate_mode})')
    return src, notes


def fit_state_dict(state_dict: Dict[str, Tensor], prefix: str,
                   spec: BackboneSpec) -> List[str]:
    """Fit the PE under ``prefix`` of a (whole model's) state dict, in place.

    This is what a backbone's ``load_state_dict`` pre-hook calls, so a
    checkpoint loaded by any route (``init_cfg``, ``load_from``, a test
    checkpoint) is fitted. The layout of the keys under ``prefix`` decides
    which PE rows are extra tokens; rows the model cannot use (a
    distillation token's, the official ViT-Adapter's unused row) are
    dropped, then :func:`fit_pos_embed` fits the rest.

    Returns:
        list[str]: Notes on what changed (empty when nothing did).
    """
    key = prefix + 'pos_embed'
    if key not in state_dict or spec.pos_embed_shape is None:
        return []
    local = {}
    for k, v in state_dict.items():
        name = k[len(prefix):]
        if k.startswith(prefix) and (name in ('pos_embed', 'cls_token',
                                              'dist_token')
                                     or _ADAPTER_KEY.match(name)):
            local[name] = v
    layout = detect_layout(local, 'mmlape')
    conv = convert_layout({'pos_embed': state_dict[key]}, layout)
    src_extra = 1 if 'cls' in layout.extra_rows else 0
    fitted, notes = fit_pos_embed(conv.state_dict['pos_embed'], src_extra,
                                  spec, key)
    state_dict[key] = fitted
    return conv.notes + notes


# ----------------------------------------------------------------------
# applying the steps to a backbone
def load_backbone_checkpoint(module: torch.nn.Module,
                             checkpoint: str,
                             prefix: Optional[str],
                             spec: BackboneSpec,
                             new_key_pattern: Optional[str] = None) -> None:
    """Read, convert, check and load a checkpoint into a backbone.

    The file is read through mmengine's loader (mmlape makes it safe), the
    backbone part is selected (``prefix``, or ``backbone.`` when present);
    an official T2T-ViT / CeiT / ViT-Lite / CCT file is first converted as
    ``tools/convert/vit_family_to_mmlape.py`` converts it (T2T-ViT's EMA
    weights; ``prefix`` does not apply to such a file); the result is
    converted (:func:`convert_layout`), checked against the join
    (:func:`check_join_compatible`) and loaded; the backbone's own
    ``load_state_dict`` pre-hook fits the PE. What was dropped, missing or
    unexpected is logged.

    Args:
        module (nn.Module): The backbone.
        checkpoint (str): Path or URL of the checkpoint.
        prefix (str, optional): See :func:`select_backbone`.
        spec (BackboneSpec): The backbone's expectations.
        new_key_pattern (str, optional): Keys a ViT checkpoint cannot have
            (modules a subclass adds); they are summarised instead of being
            listed as missing. Defaults to None.

    Raises:
        ValueError: The checkpoint has no keys under ``prefix``, was trained
            with another join, or does not fit (the message says why).
    """
    from mmengine.logging import print_log
    from mmengine.runner.checkpoint import CheckpointLoader
    ckpt = CheckpointLoader.load_checkpoint(checkpoint, map_location='cpu')
    try:
        family = detect_vit_family_format(unwrap_state_dict(ckpt))
        if family:
            converted = convert_vit_family_checkpoint(ckpt, family, 'none')
            sd = strip_prefix(converted['state_dict'], BACKBONE_PREFIX)
            print_log(
                f'"{checkpoint}" has the official {family} layout: '
                f'converted to mmlape\'s',
                logger='current')
        else:
            sd = select_backbone(unwrap_state_dict(ckpt), prefix)
        conv = convert_layout(sd)
        check_join_compatible(conv.state_dict, spec)
    except ValueError as err:
        raise ValueError(f'Checkpoint "{checkpoint}": {err}') from None
    print_log(
        f'"{checkpoint}" is a {conv.layout.describe()}', logger='current')
    for note in conv.notes:
        print_log(note, logger='current')
    _load_and_report(module, conv.state_dict, checkpoint, new_key_pattern)


def _load_and_report(module: torch.nn.Module,
                     state_dict: Dict[str, Tensor],
                     checkpoint: str,
                     new_key_pattern: Optional[str] = None) -> None:
    """Load a converted backbone state dict (not strictly) and log what was
    missing, unexpected or new; a shape that does not fit is a ValueError
    naming the file."""
    from mmengine.logging import print_log
    try:
        missing, unexpected = module.load_state_dict(state_dict, strict=False)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f'Checkpoint "{checkpoint}" does not fit this '
                         f'{type(module).__name__}: {err}') from None
    new = [
        k for k in missing if new_key_pattern and re.match(new_key_pattern, k)
    ]
    missing = [k for k in missing if k not in new]
    if new:
        print_log(
            f'{len(new)} tensors of modules that a ViT checkpoint does '
            f'not have are initialised afresh',
            logger='current')
    if missing:
        print_log(
            f'Keys missing from "{checkpoint}" (left as initialised): '
            f'{missing}',
            logger='current',
            level=30)
    if unexpected:
        print_log(
            f'Unexpected keys in "{checkpoint}" (ignored): {unexpected}',
            logger='current',
            level=30)
    print_log(
        f'Loaded {len(state_dict) - len(unexpected)} tensors from '
        f'"{checkpoint}"',
        logger='current')


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
    if any(k.startswith(BACKBONE_PREFIX) for k in sd):
        # An OpenMMLab model (mmpretrain's T2T_ViT): its head is kept.
        others = OrderedDict(
            (k, v) for k, v in sd.items() if not k.startswith(BACKBONE_PREFIX))
        sd = strip_prefix(sd, BACKBONE_PREFIX)
    fmt = fmt or detect_vit_family_format(sd)
    backbone, classifier = convert_vit_family(sd, fmt)
    out = OrderedDict((BACKBONE_PREFIX + k, v) for k, v in backbone.items())
    target = {'vit': 'head.layers.head.', 'linear': 'head.fc.'}.get(head)
    if target:
        for name, value in classifier.items():
            out[target + name] = value
        out.update(others)
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
    keys = list(select_backbone(state_dict))
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
    return _apply_rules(sd, rules, 'an official Swin', _SWIN_DROPPED)


def convert_mmpretrain_swin(state_dict: Mapping) -> Dict[str, Tensor]:
    """mmpretrain ``SwinTransformer`` backbone keys to mmlape's, with the
    patch-merging norm and reduction permuted to the official order."""
    out = _apply_rules(state_dict, _SWIN_MMPRETRAIN_RULES,
                       'an mmpretrain Swin', _SWIN_DROPPED)
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
    if any(k.startswith(BACKBONE_PREFIX) for k in state_dict):
        state_dict = OrderedDict((k[len(BACKBONE_PREFIX):], v)
                                 for k, v in state_dict.items()
                                 if k.startswith(BACKBONE_PREFIX))
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
    out = OrderedDict((BACKBONE_PREFIX + k, v)
                      for k, v in convert_swin_backbone(sd, fmt).items())
    if fmt == 'official':
        if head == 'linear':
            for suffix in ('weight', 'bias'):
                if 'head.' + suffix in sd:
                    out['head.fc.' + suffix] = sd['head.' + suffix]
    else:
        for k, v in sd.items():
            if not k.startswith(BACKBONE_PREFIX):
                out[k] = v
    return dict(state_dict=out, meta=dict(converted_from=fmt))


# ----------------------------------------------------------------------
# fitting a Swin checkpoint to one LaPESwin
@dataclass(frozen=True)
class SwinSpec:
    """What one :class:`~mmlape.models.backbones.LaPESwin` expects of a
    checkpoint.

    Attributes:
        pos_embed_shape (tuple[int, int, int], optional): ``(1, N, C)`` of
            the absolute PE; None without one (the official Swin-T).
        grid_size (tuple[int, int]): The PE's patch grid.
        window_size (int): Window side; the relative-bias tables have
            ``(2 * window_size - 1) ** 2`` rows.
        interpolate_mode (str): How the PE is resized to another grid.
        join (str): The PE join's name, for messages.
        pe_norm_blocks (tuple[str]): Blocks (``layers.{s}.blocks.{j}``)
            that own a PE norm.
    """
    pos_embed_shape: Optional[Tuple[int, int, int]]
    grid_size: Tuple[int, int]
    window_size: int
    interpolate_mode: str = 'bicubic'
    join: str = 'Default'
    pe_norm_blocks: Tuple[str, ...] = ()


def fit_swin_state_dict(state_dict: Dict[str, Tensor], prefix: str,
                        spec: SwinSpec) -> List[str]:
    """Fit the Swin keys under ``prefix`` of a state dict, in place.

    A Swin's ``load_state_dict`` pre-hook calls this, so every route
    (``init_cfg``, ``load_from``, a test checkpoint) is fitted: the absolute
    PE (no extra rows) is resized to this grid; another width, a PE that is
    not a square grid, or relative-bias tables of another window size are
    refused.

    Returns:
        list[str]: Notes on what changed (empty when nothing did).

    Raises:
        ValueError: Names the key and both shapes.
    """
    from mmlape.models.layers.pos_embed import resize_pos_embed
    notes: List[str] = []
    key = prefix + 'pos_embed'
    dst = spec.pos_embed_shape
    if key in state_dict and dst is not None:
        src = state_dict[key]
        if src.dim() != 3 or src.shape[2] != dst[2]:
            raise ValueError(f'Checkpoint does not fit: {key} has shape '
                             f'{tuple(src.shape)}, this model {tuple(dst)}')
        n = src.shape[1]
        if n != dst[1]:
            side = math.isqrt(n)
            if side * side != n:
                raise ValueError(
                    f'Checkpoint does not fit: {key} has {n} rows, not a '
                    f'square grid; cannot resize it to {spec.grid_size}')
            state_dict[key] = resize_pos_embed(
                src, (side, side),
                spec.grid_size,
                mode=spec.interpolate_mode,
                num_extra_tokens=0)
            notes.append(f'Resize {key} from a {side}x{side} to a '
                         f'{spec.grid_size[0]}x{spec.grid_size[1]} grid')
    rows = (2 * spec.window_size - 1)**2
    for k, v in state_dict.items():
        if (k.startswith(prefix) and k.endswith('relative_position_bias_table')
                and v.shape[0] != rows):
            raise ValueError(
                f'Checkpoint does not fit: {k} has {v.shape[0]} rows, a '
                f'window of {math.isqrt(v.shape[0]) // 2 + 1}; this model has '
                f'window_size={spec.window_size} ({rows} rows)')
    return notes


def check_swin_join_compatible(state_dict: Mapping, spec: SwinSpec) -> None:
    """Refuse a Swin backbone state dict whose PE norms sit in other blocks
    than the model's (a checkpoint of another join).

    Raises:
        ValueError: Names both sides' counts.
    """
    found = sorted(
        {k.rsplit('.pe_norm.', 1)[0]
         for k in state_dict if '.pe_norm.' in k})
    if found != sorted(spec.pe_norm_blocks):
        raise ValueError(
            f'Checkpoint does not fit the join: it has PE norms in '
            f'{len(found)} blocks but this model (pe_join.type='
            f'{spec.join!r}) has them in {len(spec.pe_norm_blocks)}. '
            f'Initialise from a checkpoint trained with the same join.')


def load_swin_checkpoint(module: torch.nn.Module, checkpoint: str,
                         prefix: Optional[str], spec: SwinSpec) -> None:
    """Read, convert, check and load a Swin checkpoint of any known layout.

    The file is read with mmengine's loader (made safe by mmlape);
    ``prefix`` (e.g. ``'backbone.'``) selects the backbone part; official
    and mmpretrain layouts are converted (:func:`convert_swin_backbone`);
    the PE norms must match the join; the backbone's pre-hook fits the PE.
    Missing and unexpected keys are logged (an official Swin-T has no
    absolute PE: it stays as initialised).

    Raises:
        ValueError: No keys under ``prefix``, another join, another width
            or window size.
    """
    from mmengine.runner.checkpoint import CheckpointLoader
    ckpt = CheckpointLoader.load_checkpoint(checkpoint, map_location='cpu')
    sd = unwrap_state_dict(ckpt)
    if prefix:
        sd = strip_prefix(sd, prefix)
        if not sd:
            raise ValueError(f'Checkpoint "{checkpoint}" has no keys under '
                             f'prefix "{prefix}"')
    sd = convert_swin_backbone(sd)
    check_swin_join_compatible(sd, spec)
    _load_and_report(module, sd, checkpoint)
