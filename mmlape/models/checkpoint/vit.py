"""ViT checkpoint layouts, their conversion to mmlape, and the fit.

References:
    The official DeiT and LaPE code (timm names; the distilled DeiT's
    ``dist_token`` and PE row), the official ViT-Adapter (DeiT's ``1 + N``
    PE rows without a class token), mmpretrain's and mmseg's
    ``VisionTransformer`` (their key names).

For :class:`~mmlape.models.backbones.LaPEViT` and what is built on it:
:func:`detect_layout` names the layout (what each extra PE row is),
:func:`convert_layout` renames keys and keeps a class-token row and the
patch rows, :func:`fit_pos_embed` fits one backbone (:class:`ViTSpec`).
"""
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, List, Literal, Mapping, Optional, Tuple

import torch
from mmengine.logging import print_log
from torch import Tensor

from .common import (BACKBONE_PREFIX, CheckpointFamily, Converted, Layout,
                     check_pe_norms, check_pe_width, fit_patch_rows, is_square,
                     rename_keys, select_backbone, strip_prefix, table_rules)
from .eva import convert_eva, is_eva
from .official_lape import (LAPE_REL_INDEX, LAPE_REL_NORM, PE_NORM_KEY,
                            check_run_weights, convert_lape_relative,
                            drop_fixed_pe, options_text, read_official_run,
                            stack_unshared)
from .recorded import another_model, model_differences, recorded_backbone
from .vit_family import VIT_FAMILY

__all__ = [
    'FORMATS', 'ROW_KINDS', 'VIT', 'ViTSpec', 'detect_format', 'detect_layout',
    'convert_layout', 'convert_backbone', 'convert_mmpretrain_vit',
    'convert_mmseg_vit', 'convert_checkpoint', 'fit_pos_embed',
    'MMPRETRAIN_VIT_NAMES', 'MMSEG_VIT_NAMES', 'mmseg_vit_name'
]

Format = Literal['mmlape', 'timm', 'mmpretrain', 'mmseg']
#: Key namings mmlape reads.
FORMATS = ('mmlape', 'timm', 'mmpretrain', 'mmseg')

#: What an extra row of ``pos_embed`` holds. ``cls``: a class token's
#: position; ``dist``: a distillation token's; ``unused``: a row the source
#: model never adds to any token (the official ViT-Adapter keeps DeiT's
#: class row although it has no class token).
ROW_KINDS = ('cls', 'dist', 'unused')

#: mmpretrain's ViT names and mmlape's (see :func:`.common.table_rules`).
MMPRETRAIN_VIT_NAMES = [
    ('patch_embed.projection.', 'patch_embed.proj.'),
    ('layers.{i}.ln1.', 'blocks.{i}.norm1.'),
    ('layers.{i}.ln2.', 'blocks.{i}.norm2.'),
    ('layers.{i}.attn.qkv.', 'blocks.{i}.attn.qkv.'),
    ('layers.{i}.attn.proj.', 'blocks.{i}.attn.proj.'),
    ('layers.{i}.attn.gamma1.weight', 'blocks.{i}.gamma1'),
    ('layers.{i}.ffn.gamma2.weight', 'blocks.{i}.gamma2'),
    ('layers.{i}.ffn.layers.0.0.', 'blocks.{i}.mlp.fc1.'),
    ('layers.{i}.ffn.layers.1.', 'blocks.{i}.mlp.fc2.'),
    ('ln1.', 'norm.'),
    ('ln2.', 'fc_norm.'),  # the norm after GAP (out_type='avg_featmap')
    ('pre_norm.', 'pre_norm.'),
    ('ln_pre.', 'pre_norm.'),
    ('patch_embed.norm.', 'patch_embed.norm.'),
] + [(k, k) for k in ('cls_token', 'pos_embed', 'dist_token')]
#: mmseg's: its attention is ``nn.MultiheadAttention``; the rest as
#: mmpretrain's.
MMSEG_VIT_NAMES = [
    ('layers.{i}.attn.attn.in_proj_{p}', 'blocks.{i}.attn.qkv.{p}'),
    ('layers.{i}.attn.attn.out_proj.', 'blocks.{i}.attn.proj.'),
    ('ln_pre.', 'pre_norm.'),
] + MMPRETRAIN_VIT_NAMES
_MMPRETRAIN_RULES = table_rules(MMPRETRAIN_VIT_NAMES)
_MMSEG_RULES = table_rules(MMSEG_VIT_NAMES)
_TO_MMSEG_RULES = table_rules(MMSEG_VIT_NAMES, reverse=True)


def mmseg_vit_name(name: str) -> str:
    """The name mmseg's ViT gives the parameter mmlape calls ``name`` (a
    block's module mmseg lacks keeps its ``layers.{i}`` prefix)."""
    for pattern, repl in _TO_MMSEG_RULES + [(r'^blocks\.', 'layers.')]:
        if re.match(pattern, name):
            return re.sub(pattern, repl, name)
    return name


# Modules only a ViT-Adapter backbone has.
_ADAPTER_KEY = re.compile(r'^(level_embed$|spm\.|interactions\.)')


@dataclass(frozen=True)
class ViTSpec:
    """What one :class:`~mmlape.models.backbones.LaPEViT` (or
    ViT-Adapter) expects of a checkpoint.

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
        patch_weight_shape (tuple[int], optional): The patch embedding's
            ``patch_embed.proj.weight`` shape (None without one).
        num_layers (int): Encoder blocks (0: not checked).
        layer_scale (bool): Whether the blocks have layer scale
            (``gamma1``/``gamma2``).
    """
    pos_embed_shape: Optional[Tuple[int, int, int]]
    num_extra_tokens: int
    grid_size: Tuple[int, int]
    interpolate_mode: str = 'bicubic'
    join: str = 'Default'
    pe_norm_layers: Tuple[int, ...] = ()
    patch_weight_shape: Optional[Tuple[int, ...]] = None
    num_layers: int = 0
    layer_scale: bool = False


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


def detect_layout(state_dict: Mapping, fmt: Optional[str] = None) -> Layout:
    """Name the layout of a backbone state dict (keys without prefix).

    Rules, from the sources' code:

    - mmseg's ViT always has a class token and a ``1 + N``-row PE.
    - Elsewhere each owned token (``cls_token``, then ``dist_token``) has a
      PE row, in that order.
    - A ViT-Adapter backbone without a class token and a ``k*k + 1``-row
      PE is the official ViT-Adapter (DeiT's unused class row); mmlape's
      has ``k*k`` rows (``k*k + 1`` is never a square).
    - ``attn.pe_norm`` or a stored ``attn.relative_position_index``: the
      LaPE code's relative PE. ``gamma_1`` or ``rope.freqs``: timm's Eva.
    - A timm-named ``k*k``-row PE beside a class token has no row for it
      (timm's ``no_embed_class=True``: DeiT-III, RoPE-ViT with an APE).

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
            LAPE_REL_NORM.match(k) or LAPE_REL_INDEX.match(k)
            for k in state_dict):
        return Layout('lape-relative', 'timm', tokens)
    rows = _pe_rows(state_dict)
    is_adapter = any(_ADAPTER_KEY.match(k) for k in state_dict)
    if (is_adapter and not tokens and rows is not None and not is_square(rows)
            and is_square(rows - 1)):
        return Layout('vit-adapter', 'mmlape', ('unused', ))
    if is_adapter:  # only mmlape and the official code have these modules
        return Layout('mmlape', 'mmlape', tokens)
    if 'dist' in tokens:
        return Layout('deit-distilled', 'timm', tokens)
    if fmt == 'timm':
        name = 'eva' if is_eva(state_dict) else 'deit' if tokens else 'timm'
        if 'cls' in tokens and rows is not None and is_square(rows):
            tokens = tuple(t for t in tokens if t != 'cls')
        return Layout(name, fmt, tokens)
    return Layout('mmlape', 'mmlape', tokens)


# ----------------------------------------------------------------------
# step 2: mmlape names and PE rows
def convert_mmpretrain_vit(state_dict: Mapping) -> Dict[str, Tensor]:
    """mmpretrain ``VisionTransformer`` backbone keys to mmlape's names."""
    return rename_keys(state_dict, _MMPRETRAIN_RULES, 'an mmpretrain ViT')


def convert_mmseg_vit(state_dict: Mapping) -> Dict[str, Tensor]:
    """mmseg ``VisionTransformer`` backbone keys to mmlape's names (the
    fused ``in_proj`` of ``nn.MultiheadAttention`` is mmlape's ``qkv``)."""
    return rename_keys(state_dict, _MMSEG_RULES, 'an mmseg ViT')


def convert_layout(state_dict: Mapping,
                   layout: Optional[Layout] = None,
                   pe_type: Optional[str] = None) -> Converted:
    """A backbone state dict of any known layout in mmlape's names and PE
    layout.

    Keys are renamed, unshared PEs stacked, the classifier and
    distillation token dropped, a stored fixed sin-cos PE checked and
    dropped; ``pos_embed`` keeps a class-token row (if any) and the patch
    rows, and a class token without a PE row gets a zero row (adding
    nothing, as the source does).

    Args:
        state_dict (Mapping): Backbone keys, no prefix.
        layout (Layout, optional): Detected when None.
        pe_type (str, optional): The source's PE type when its file records
            it (the official LaPE code's ``args``); None recognises a fixed
            PE of a timm-named file by its values. Defaults to None.

    Returns:
        Converted: The state dict, its layout and notes on what changed.

    Raises:
        ValueError: A key with no counterpart, or a stored fixed PE that is
            not mmlape's (the message names the largest difference).
    """
    layout = layout or detect_layout(state_dict)
    notes: List[str] = []
    if layout.naming == 'mmseg':
        sd = convert_mmseg_vit(state_dict)
    elif layout.naming == 'mmpretrain':
        sd = convert_mmpretrain_vit(state_dict)
    else:
        sd = stack_unshared(state_dict)
        if layout.name == 'lape-relative':
            sd = convert_lape_relative(sd, notes)
        if layout.name == 'eva':
            sd = convert_eva(sd, notes)
        if layout.naming == 'timm' or pe_type is not None:
            drop_fixed_pe(sd, pe_type, notes)
    dropped = [
        k for k in sd
        if k == 'dist_token' or k.startswith(('head.', 'head_dist.'))
    ]
    for k in dropped:
        del sd[k]
    if dropped:
        notes.append(f'left out of the backbone weights: {dropped} (mmlape '
                     f'backbones have no distillation token; a classifier '
                     f'is not part of a backbone)')
    pe = sd.get('pos_embed')
    unused = [i for i, kind in enumerate(layout.extra_rows) if kind != 'cls']
    if pe is not None and unused:
        n_extra = len(layout.extra_rows)
        if not is_square(pe.shape[-2] - n_extra):
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
    if pe is not None and 'cls_token' in sd and \
            'cls' not in layout.extra_rows:
        sd['pos_embed'] = torch.cat(
            [pe.new_zeros(pe.shape[0], 1, pe.shape[2]), pe], dim=1)
        notes.append('pos_embed: the source adds no PE to its class token '
                     '(no class-token row); a zero row was added, which '
                     'adds nothing to it either')
    return Converted(sd, layout, notes)


# ----------------------------------------------------------------------
# step 3: fit one backbone
def fit_pos_embed(src: Tensor,
                  src_extra: int,
                  spec: ViTSpec,
                  key: str = 'pos_embed') -> Tuple[Tensor, List[str]]:
    """Fit an mmlape-layout PE to one backbone.

    Args:
        src (Tensor): ``(P, src_extra + N, C)``; its extra row, if any, is a
            class token's.
        src_extra (int): 1 when ``src`` has a class-token row, else 0.
        spec (ViTSpec): The backbone.
        key (str): The key's name, for messages. Defaults to ``'pos_embed'``.

    Returns:
        tuple[Tensor, list[str]]: The fitted PE and notes on what changed.

    Raises:
        ValueError: Another width, another number of PEs (Unshare keeps one
            per layer), or patch rows of another count that are not a
            square grid.
    """
    dst = spec.pos_embed_shape
    notes: List[str] = []
    check_pe_width(src, dst, key)
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
    src, resized = fit_patch_rows(src, want, spec.grid_size,
                                  spec.interpolate_mode, key)
    return src, notes + resized


# ----------------------------------------------------------------------
# the ViT's path
class ViTCheckpoints(CheckpointFamily):
    """The checkpoint path of the ViT and the backbones built on it."""
    name = 'ViT'
    formats = FORMATS
    heads = {'vit': 'head.layers.head.', 'linear': 'head.fc.', 'none': None}
    default_head = 'vit'

    def detect(self, state_dict: Mapping) -> str:
        return detect_format(state_dict)

    def convert(self,
                state_dict: Mapping,
                fmt: Optional[str] = None,
                pe_type: Optional[str] = None) -> Converted:
        self.check_format(fmt)
        conv = convert_layout(state_dict, detect_layout(state_dict, fmt),
                              pe_type)
        # a bare timm-named model's classifier
        conv.head = OrderedDict((suffix, state_dict['head.' + suffix])
                                for suffix in ('weight', 'bias')
                                if 'head.' + suffix in state_dict)
        return conv

    def convert_file(self,
                     checkpoint: Mapping,
                     state_dict: Mapping,
                     fmt: Optional[str] = None) -> Converted:
        """Convert, reading the official LaPE run the file records
        (``args`` or ``meta['official_lape']``): its PE type decides
        whether a stored PE is fixed, the weights must be the run's, and
        the run goes to ``meta['official_lape']``."""
        run = read_official_run(checkpoint)
        if run is None:
            conv = self.convert(state_dict, fmt)
            if (conv.layout.naming == 'timm'
                    and any(PE_NORM_KEY.match(k) for k in conv.state_dict)):
                conv.notes.append(
                    'the file records no official LaPE args: whether its '
                    'LaPE chains the PE norms (pe_join.hierarchical=True, '
                    'the --join-type LaPE code) or not (False, the first '
                    'release\'s --pe_joining LaPE) is not checked')
            return conv
        options = run.backbone()
        conv = self.convert(state_dict, fmt, options['pe_type'])
        check_run_weights(run, options, conv.state_dict)
        conv.meta['official_lape'] = run.as_meta()
        arch = run.arch()
        arch = ', '.join(f'{k}={v!r}'
                         for k, v in arch.items()) + ', ' if arch else ''
        conv.notes.insert(
            0, f'the file records the official LaPE run {run.describe()}: '
            f'mmlape\'s {arch}{options_text(options)}')
        return conv

    def convert_checkpoint(self,
                           checkpoint: Mapping,
                           fmt: Optional[str] = None,
                           head: Optional[str] = None,
                           backbone: Any = None,
                           **options) -> Dict:
        """As :meth:`~.common.CheckpointFamily.convert_checkpoint`; with
        ``backbone`` (a config's, built or not), a file whose recorded
        official LaPE run is another model is refused.

        Raises:
            ValueError: What the conversion refuses, or one line naming
                each option of ``backbone`` that differs from the run.
        """
        if fmt is None:
            family = VIT_FAMILY.detect(VIT_FAMILY.read(checkpoint, False))
            if family:  # official T2T-ViT, CeiT, ViT-Lite, CCT
                return self.convert_family_checkpoint(checkpoint, family, head,
                                                      **options)
        out = super().convert_checkpoint(checkpoint, fmt, head, **options)
        recorded = recorded_backbone(out)
        if backbone is not None and recorded:
            wrong = model_differences(recorded[1], backbone)
            if wrong:
                raise ValueError('the checkpoint ' +
                                 another_model(wrong, recorded[0]))
        return out

    def convert_family_checkpoint(self, checkpoint: Mapping, family: str,
                                  head: Optional[str], **options) -> Dict:
        """An official ViT-family file (:data:`~.vit_family.VIT_FAMILY`,
        its format ``family``) to an mmlape checkpoint."""
        return VIT_FAMILY.convert_checkpoint(checkpoint, family, head
                                             or self.default_head, **options)

    def check_architecture(self, state_dict: Mapping, spec: ViTSpec) -> None:
        """Refuse converted backbone keys of another architecture than
        ``spec``'s in one line that names the setting to change: another
        width, patch size or depth, layer scale the model lacks, register
        tokens (mmlape's ViT has none)."""
        if 'reg_token' in state_dict:
            rows = state_dict['reg_token'].shape[1]
            raise ValueError(
                f'the checkpoint has {rows} register tokens (reg_token), '
                f'which mmlape\'s ViT does not compute; use a file of a '
                f'model without them')
        weight = state_dict.get('patch_embed.proj.weight')
        want = spec.patch_weight_shape
        if weight is not None and want is not None and \
                tuple(weight.shape) != tuple(want):
            have = tuple(weight.shape)
            if have[0] != want[0]:
                raise ValueError(
                    f'the checkpoint\'s embedding is {have[0]} wide, this '
                    f'model\'s {want[0]}: use a checkpoint of the same '
                    f'width, or set model.backbone.arch to the checkpoint\'s '
                    f'size')
            if have[2:] != tuple(want[2:]):
                size = 'x'.join(map(str, have[2:]))
                raise ValueError(
                    f'the checkpoint\'s patches are {size}, this model\'s '
                    f'{"x".join(map(str, want[2:]))}: set '
                    f'model.backbone.patch_size={have[2]}')
        blocks = {
            int(k.split('.')[1])
            for k in state_dict if re.match(r'^blocks\.\d+\.', k)
        }
        if spec.num_layers and blocks and max(blocks) + 1 != spec.num_layers:
            raise ValueError(
                f'the checkpoint has {max(blocks) + 1} layers, this model '
                f'{spec.num_layers}: set model.backbone.arch to the '
                f'checkpoint\'s (its num_layers)')
        if not spec.layer_scale and any(
                re.match(r'^blocks\.\d+\.gamma[12]$', k) for k in state_dict):
            raise ValueError(
                'the checkpoint has layer scale (blocks.{i}.gamma1/gamma2, '
                'as DeiT-III and RoPE-ViT models train), this model has '
                'none: set model.backbone.layer_scale_init_value (e.g. '
                '1e-5; the loaded values replace it)')

    def check(self, state_dict: Mapping, spec: ViTSpec) -> None:
        """The layers that own a PE norm (``blocks.{i}.pe_norm``) must be
        the model's (:func:`~.common.check_pe_norms`)."""
        check_pe_norms(state_dict,
                       [f'blocks.{i}' for i in spec.pe_norm_layers], spec.join)

    def fit(self, state_dict: Dict[str, Tensor], prefix: str,
            spec: ViTSpec) -> List[str]:
        """Drop the PE rows (layout-decided) and class token the model
        cannot use, then :func:`fit_pos_embed`."""
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
        state_dict[key], notes = fit_pos_embed(conv.state_dict['pos_embed'],
                                               src_extra, spec, key)
        if spec.num_extra_tokens == 0 and prefix + 'cls_token' in state_dict:
            # (mmseg's ViT keeps an unused class token without one)
            del state_dict[prefix + 'cls_token']
            notes.append(f'dropped {prefix}cls_token: this model has no '
                         f'class token')
        return conv.notes + notes

    def backbone_state(self, checkpoint: Mapping,
                       prefix: Optional[str]) -> Dict[str, Tensor]:
        """The backbone keys of a loaded file; an official T2T-ViT, CeiT,
        ViT-Lite or CCT file is converted first (``prefix`` ignored)."""
        family = VIT_FAMILY.detect(VIT_FAMILY.read(checkpoint, False))
        if not family:
            return super().backbone_state(checkpoint, prefix)
        converted = VIT_FAMILY.convert_checkpoint(checkpoint, family, 'none')
        print_log(
            f'the file has the official {family} layout: converted to '
            f'mmlape\'s',
            logger='current')
        return strip_prefix(converted['state_dict'], BACKBONE_PREFIX)


#: The ViT's checkpoint path.
VIT = ViTCheckpoints()
#: Backbone keys of any layout the path reads, in mmlape's names
#: (see :meth:`~.common.CheckpointFamily.convert_backbone`).
convert_backbone = VIT.convert_backbone

#: A whole ViT checkpoint to an mmlape one; a timm classifier goes to
#: ``head.layers.head`` (``head='vit'``), ``head.fc`` (``'linear'``) or
#: nowhere (``'none'``).
convert_checkpoint = VIT.convert_checkpoint
