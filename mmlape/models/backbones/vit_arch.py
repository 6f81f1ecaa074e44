"""The arch zoo of :class:`~mmlape.models.backbones.LaPEViT` and the checks
of its config-level options (``arch``, ``tokenizer``, ``pooling``,
mmpretrain's ``patch_cfg`` and ``layer_cfgs``), with one-line errors that
name the option.

References:
    DeiT, T2T-ViT, CeiT, ViT-Lite and CCT and their official code for the
    settings of each arch; mmpretrain's ``VisionTransformer`` archs.
"""
from typing import Dict, List, Optional, Sequence, Tuple, Type, Union

import torch.nn as nn
from mmengine.utils import to_2tuple

from mmlape.registry import POOLINGS, TOKENIZERS
from ..layers.parts import build_part, part_cfg, part_class
from ..layers.pe_join_base import BasePEJoin
from ..layers.pooling import ClsTokenPool
from ..layers.tokenizers import PatchEmbed

__all__ = [
    'ARCH_KEYS', 'ARCH_OPTIONS', 'VIT_ARCH_ZOO', 'VIT_OPTION_DEFAULTS',
    'MMPRETRAIN_VIT_ARCHS', 'parse_vit_arch', 'build_tokenizer', 'block_cfgs',
    'pooling_cfg', 'per_layer', 'gap_norm_applies'
]

#: Keys every arch has.
ARCH_KEYS = ('embed_dims', 'num_layers', 'num_heads', 'feedforward_channels')
#: Keys an arch may add: argument defaults, and settings without an
#: argument (``gap_norm=False``: no norm after GAP, as mmpretrain's T2T-ViT).
ARCH_OPTIONS = ('img_size', 'tokenizer', 'ffn', 'pooling', 'out_type',
                'with_cls_token', 'pe_type', 'qkv_bias', 'norm_cfg',
                'qk_scale', 'norm2_in_residual', 'pos_embed_std',
                'cls_token_std', 'gap_norm')

LN5 = dict(type='LN', eps=1e-5)
LN6 = dict(type='LN', eps=1e-6)

#: What an option takes when neither its argument nor the arch sets it
#: (``LaPEViT.option_defaults``).
VIT_OPTION_DEFAULTS = dict(
    img_size=224,
    patch_size=16,
    pe_type='learnable',
    out_type='cls_token',
    with_cls_token=True,
    qkv_bias=True,
    norm_cfg=LN6)


def _vit(embed_dims: int, num_layers: int, num_heads: int,
         feedforward_channels: int) -> Dict:
    return dict(
        embed_dims=embed_dims,
        num_layers=num_layers,
        num_heads=num_heads,
        feedforward_channels=feedforward_channels)


#: mmpretrain 1.2.0's ``VisionTransformer`` archs: each setting under all
#: its names (ViT-S there is 768 wide and 8 deep, as in the ViT paper's
#: code, not DeiT-S).
MMPRETRAIN_VIT_ARCHS = {
    **dict.fromkeys(('s', 'small'), _vit(768, 8, 8, 2304)),
    **dict.fromkeys(('b', 'base'), _vit(768, 12, 12, 3072)),
    **dict.fromkeys(('l', 'large'), _vit(1024, 24, 16, 4096)),
    **dict.fromkeys(('h', 'huge'), _vit(1280, 32, 16, 5120)),
    **dict.fromkeys(('eva-g', 'eva-giant'), _vit(1408, 40, 16, 6144)),
    **dict.fromkeys(('deit-t', 'deit-tiny'), _vit(192, 12, 3, 768)),
    **dict.fromkeys(('deit-s', 'deit-small', 'dinov2-s', 'dinov2-small'),
                    _vit(384, 12, 6, 1536)),
    **dict.fromkeys(('deit-b', 'deit-base'), _vit(768, 12, 12, 3072)),
    **dict.fromkeys(('dinov2-g', 'dinov2-giant'), _vit(1536, 40, 24, 6144)),
}

#: Compact-Transformers' 7-layer encoder (ViT-Lite, CCT): 32x32 inputs, the
#: FFN residual from the normalised stream, no qkv bias, PE std 0.2.
_COMPACT = dict(
    _vit(256, 7, 4, 512),
    img_size=32,
    qkv_bias=False,
    norm_cfg=LN5,
    norm2_in_residual=True,
    pos_embed_std=0.2)

#: The archs by name (``LaPEViT.arch_zoo``): mmpretrain's, then mmlape's.
VIT_ARCH_ZOO = {
    **MMPRETRAIN_VIT_ARCHS,
    # T2T module with Performer token layers, fixed 1D sin-cos PE
    't2t-vit-7':
    dict(
        _vit(256, 7, 4, 512),
        tokenizer=dict(type='T2T', token_dims=64, attention='performer'),
        pe_type='sincos1d',
        qkv_bias=False,
        norm_cfg=LN5,
        gap_norm=False),
    # Image-to-Tokens stem, LeFF in every block, LCA over the class tokens
    'ceit-tiny':
    dict(
        _vit(192, 12, 3, 768),
        tokenizer=dict(type='I2T', conv_channels=64, patch_size=4),
        ffn=dict(type='LeFF', kernel_size=3),
        out_type='pooled',
        pooling=dict(type='LCA'),
        norm_cfg=LN6),
    # 4x4 patches (Kaiming-normal), class token starting at zero
    'vit-lite-7/4':
    dict(
        _COMPACT,
        tokenizer=dict(
            type='Patch', patch_size=4, weight_init='kaiming_normal'),
        cls_token_std=0.),
    # one 3x3 conv + max-pool tokenizer, sequence pooling, no class token
    'cct-7/3x1':
    dict(
        _COMPACT,
        tokenizer=dict(type='Conv', num_layers=1, kernel_size=3),
        with_cls_token=False,
        out_type='pooled',
        pooling=dict(type='SeqPool')),
    # refuses inputs that are not a whole number of patches
    'test-tiny':
    dict(_vit(64, 4, 2, 256), tokenizer=dict(type='Patch', padding=None)),
}


def per_layer(value: Union[int, Sequence[int]], num_layers: int,
              name: str) -> List[int]:
    """``value`` for every layer: an int for all, or one entry per layer
    (None counts as 0)."""
    if isinstance(value, int):
        return [value] * num_layers
    value = [int(v or 0) for v in value]
    if len(value) != num_layers:
        raise ValueError(f'{name} has {len(value)} entries for '
                         f'{num_layers} layers')
    return value


def parse_vit_arch(arch: Union[str, Dict], zoo: Dict[str, Dict]) -> Dict:
    """A copy of ``zoo[arch]``, or of a custom arch dict once its keys are
    checked against :data:`ARCH_KEYS` and :data:`ARCH_OPTIONS`."""
    if isinstance(arch, str):
        arch = arch if arch in zoo else arch.lower()
        if arch not in zoo:
            raise ValueError(f'Unknown arch={arch!r}; choose one of '
                             f'{sorted(zoo)} or pass a dict')
        return dict(zoo[arch])
    if not isinstance(arch, dict) or not set(ARCH_KEYS) <= set(arch):
        raise ValueError(f'A custom arch must be a dict with keys '
                         f'{sorted(ARCH_KEYS)}, got {arch!r}')
    unknown = sorted(set(arch) - set(ARCH_KEYS) - set(ARCH_OPTIONS))
    if unknown:
        raise ValueError(f'Unknown arch key(s) {unknown}; an arch has '
                         f'{sorted(ARCH_KEYS)} and may set '
                         f'{sorted(ARCH_OPTIONS)}')
    return dict(arch)


def gap_norm_applies(out_type: str, arch: Dict,
                     join: Type[BasePEJoin]) -> bool:
    """Whether ``out_type='avg_featmap'`` normalises the pooled vector.

    mmpretrain's ViT does (``fc_norm``), its T2T-ViT does not
    (``gap_norm=False``), nor a join without a class token (PVG/MPVG, as
    their papers).
    """
    return (out_type == 'avg_featmap' and arch.get('gap_norm', True)
            and join.allows_cls_token)


#: mmcv ``PatchEmbed`` arguments (mmpretrain's ``patch_cfg``) and the
#: ``Patch`` tokenizer's names for them.
PATCH_CFG_KEYS = dict(
    kernel_size='patch_size',
    stride='stride',
    padding='padding',
    dilation='dilation',
    bias='bias',
    norm_cfg='norm_cfg')


def _patch_cfg_options(patch_cfg: Dict, in_channels: int,
                       embed_dims: int) -> Tuple[Dict, Optional[Tuple]]:
    """mmpretrain's ``patch_cfg`` as ``Patch`` tokenizer options, and the
    ``input_size`` it sets for the PE grid (None when it sets none)."""
    options, input_size = {}, None
    for key, value in patch_cfg.items():
        if key in PATCH_CFG_KEYS:
            options[PATCH_CFG_KEYS[key]] = value
        elif key == 'input_size':
            input_size = None if value is None else tuple(to_2tuple(value))
        elif key == 'conv_type' and value in ('Conv2d', 'Conv'):
            continue
        elif key in ('in_channels', 'embed_dims') and value == dict(
                in_channels=in_channels, embed_dims=embed_dims)[key]:
            continue
        else:
            raise ValueError(
                f'patch_cfg.{key}={value!r} is not supported: the Patch '
                f'tokenizer takes {sorted(PATCH_CFG_KEYS)} and input_size '
                f"(conv_type='Conv2d', in_channels and embed_dims as the "
                f'backbone)')
    return options, input_size


def build_tokenizer(
        cfg: Union[None, str, Dict],
        patch_size: Optional[int],
        patch_bias: Optional[bool],
        in_channels: int,
        embed_dims: int,
        patch_cfg: Optional[Dict] = None) -> Tuple[nn.Module, Optional[Tuple]]:
    """The tokenizer, and the input size a ``patch_cfg`` sets for the PE
    grid (None when it sets none).

    ``patch_size``/``patch_bias``, then ``patch_cfg``, set the ``Patch``
    tokenizer's; refused for any other tokenizer."""
    cfg = part_cfg(cfg, default='Patch')
    input_size = None
    if part_class(TOKENIZERS, 'tokenizer', cfg) is PatchEmbed:
        cfg.setdefault('patch_size', VIT_OPTION_DEFAULTS['patch_size'])
        if patch_size is not None:
            cfg['patch_size'] = cfg['stride'] = patch_size
        if patch_bias is not None:
            cfg['bias'] = patch_bias
        if patch_cfg:
            options, input_size = _patch_cfg_options(patch_cfg, in_channels,
                                                     embed_dims)
            cfg.update(options)
    elif patch_size is not None or patch_bias is not None or patch_cfg:
        what = 'patch_cfg sets' if patch_cfg else 'patch_size/patch_bias set'
        raise ValueError(
            f'{what} the Patch tokenizer, but '
            f'tokenizer.type={cfg["type"]!r}: give its options in '
            f'tokenizer=dict(...)')
    tokenizer = build_part(
        TOKENIZERS,
        'tokenizer',
        cfg,
        in_channels=in_channels,
        embed_dims=embed_dims)
    return tokenizer, input_size


#: What an entry of mmpretrain's ``layer_cfgs`` may set, as the block's
#: argument; ``act_cfg`` goes to the MLP, ``attn_drop_path`` and
#: ``proj_bias`` are mmlape's (for mmseg's ViT).
LAYER_CFG_KEYS = ('num_heads', 'feedforward_channels',
                  'layer_scale_init_value', 'drop_rate', 'attn_drop_rate',
                  'drop_path_rate', 'qkv_bias', 'norm_cfg', 'act_cfg',
                  'num_fcs', 'ffn_type', 'embed_dims', 'attn_drop_path',
                  'proj_bias')


def block_cfgs(layer_cfgs: Union[None, Dict, Sequence[Dict]],
               base: Sequence[Dict]) -> List[Dict]:
    """Each block's arguments: ``base[i]`` updated by ``layer_cfgs`` (one
    dict for every layer, or one per layer), as mmpretrain's ViT updates
    its encoder layers' arguments.

    ``num_fcs`` must be 2 and ``ffn_type`` ``'origin'`` (mmlape's MLP);
    ``act_cfg`` is the MLP's activation.
    """
    num_layers = len(base)
    if layer_cfgs is None:
        layer_cfgs = {}
    if isinstance(layer_cfgs, dict):
        layer_cfgs = [layer_cfgs] * num_layers
    layer_cfgs = list(layer_cfgs)
    if len(layer_cfgs) != num_layers:
        raise ValueError(f'layer_cfgs has {len(layer_cfgs)} entries for '
                         f'{num_layers} layers')
    out = []
    for i, (args, extra) in enumerate(zip(base, layer_cfgs)):
        args, extra = dict(args), dict(extra)
        unknown = sorted(set(extra) - set(LAYER_CFG_KEYS))
        if unknown:
            raise ValueError(f'layer_cfgs[{i}] has unknown key(s) {unknown}; '
                             f'choose from {list(LAYER_CFG_KEYS)}')
        if extra.pop('num_fcs', 2) != 2:
            raise ValueError('layer_cfgs.num_fcs must be 2: mmlape\'s MLP '
                             'has two linear layers')
        if extra.pop('ffn_type', 'origin') != 'origin':
            raise ValueError("layer_cfgs.ffn_type must be 'origin'; give "
                             'another FFN as ffn=dict(type=...)')
        dims = extra.pop('embed_dims', args['embed_dims'])
        if dims != args['embed_dims']:
            raise ValueError(f'layer_cfgs.embed_dims={dims} differs from '
                             f'the arch\'s {args["embed_dims"]}')
        act_cfg = extra.pop('act_cfg', None)
        if act_cfg is not None:
            ffn = dict(args.get('ffn_cfg') or dict(type='MLP'))
            if str(ffn['type']).lower() != 'mlp':
                raise ValueError(f'layer_cfgs.act_cfg sets the MLP\'s '
                                 f'activation, but ffn.type={ffn["type"]!r}')
            args['ffn_cfg'] = dict(ffn, act_cfg=act_cfg)
        args.update(extra)
        out.append(args)
    return out


def pooling_cfg(out_type: str, pooling: Union[None, str, Dict],
                arch_pooling: Union[None, str, Dict], join: Type[BasePEJoin],
                with_cls_token: bool) -> Optional[Dict]:
    """The pooling config of ``out_type`` (``pooling``, else the arch's
    ``arch_pooling``), checked against the join's class and the class
    token."""
    if out_type == 'pooled':
        cfg = pooling if pooling is not None else arch_pooling
        if cfg is None:
            raise ValueError(
                "out_type='pooled' needs pooling=dict(type=...); one of "
                f'{sorted(POOLINGS.module_dict)}')
    elif pooling is not None:
        raise ValueError(f'pooling={pooling!r} is used with '
                         f"out_type='pooled', not out_type={out_type!r}")
    else:
        cfg = {'cls_token': 'ClsToken', 'avg_featmap': 'GAP'}.get(out_type)
    if cfg is None:
        return None
    cfg = part_cfg(cfg)
    cls = part_class(POOLINGS, 'pooling', cfg)
    if cls.cls_token_needed(cfg) and cls is not ClsTokenPool:
        # (ClsToken's refusal is the join's own message.)
        if not join.allows_cls_token:
            raise ValueError(
                f'pe_join.type={join.name!r} removes the class token, which '
                f'pooling.type={cfg["type"]!r} needs. '
                f'{cls.without_cls_token}.')
        if not with_cls_token:
            raise ValueError(f'pooling.type={cfg["type"]!r} needs '
                             f'with_cls_token=True')
    return cfg
