"""The arch zoo of :class:`~mmlape.models.backbones.LaPEViT` and the checks
of its config-level options.

References:
    DeiT (Touvron et al., 2021), T2T-ViT (Yuan et al., ICCV 2021), CeiT (Wu
    et al., ICCV 2021), ViT-Lite and CCT (Hassani et al., 2021) and their
    official code for the settings of each arch.

An arch is a dict of the four keys every ViT has (:data:`ARCH_KEYS`) plus
the settings it fixes (:data:`ARCH_OPTIONS`): defaults of constructor
arguments, and settings of the original model that have no argument of
their own. The helpers below turn an ``arch``, ``tokenizer`` or ``pooling``
argument into what the backbone builds, with one-line errors that name the
option; the backbone (:mod:`~mmlape.models.backbones.vit`) builds the
modules.
"""
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch.nn as nn

from mmlape.registry import PE_JOINS, POOLINGS, TOKENIZERS
from ..layers.parts import build_part, part_class
from ..layers.pooling import ClsTokenPool
from ..layers.tokenizers import PatchEmbed

__all__ = [
    'ARCH_KEYS', 'ARCH_OPTIONS', 'VIT_ARCH_ZOO', 'VIT_OPTION_DEFAULTS',
    'parse_vit_arch', 'build_tokenizer', 'pooling_cfg', 'per_layer'
]

#: Keys every arch has.
ARCH_KEYS = ('embed_dims', 'num_layers', 'num_heads', 'feedforward_channels')
#: Keys an arch may add: defaults of constructor arguments (``img_size``,
#: ``tokenizer``, ``ffn``, ``pooling``, ``out_type``, ``with_cls_token``,
#: ``pe_type``, ``qkv_bias``, ``norm_cfg``) and settings of the original
#: model that have no argument of their own.
ARCH_OPTIONS = ('img_size', 'tokenizer', 'ffn', 'pooling', 'out_type',
                'with_cls_token', 'pe_type', 'qkv_bias', 'norm_cfg',
                'qk_scale', 'norm2_in_residual', 'pos_embed_std',
                'cls_token_std')

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

#: The archs by name (``LaPEViT.arch_zoo``).
VIT_ARCH_ZOO = {
    'deit-tiny':
    dict(embed_dims=192, num_layers=12, num_heads=3, feedforward_channels=768),
    'deit-small':
    dict(
        embed_dims=384, num_layers=12, num_heads=6, feedforward_channels=1536),
    'deit-base':
    dict(
        embed_dims=768, num_layers=12, num_heads=12,
        feedforward_channels=3072),
    # T2T module with Performer token layers; fixed 1D sinusoidal PE;
    # no qkv bias; LayerNorm eps 1e-5.
    't2t-vit-7':
    dict(
        embed_dims=256,
        num_layers=7,
        num_heads=4,
        feedforward_channels=512,
        tokenizer=dict(type='T2T', token_dims=64, attention='performer'),
        pe_type='sincos1d',
        qkv_bias=False,
        norm_cfg=LN5),
    # Image-to-Tokens stem, LeFF in every block, LCA over the 12 class
    # tokens.
    'ceit-tiny':
    dict(
        embed_dims=192,
        num_layers=12,
        num_heads=3,
        feedforward_channels=768,
        tokenizer=dict(type='I2T', conv_channels=64, patch_size=4),
        ffn=dict(type='LeFF', kernel_size=3),
        out_type='pooled',
        pooling=dict(type='LCA'),
        norm_cfg=LN6),
    # Compact-Transformers: 4x4 patches (Kaiming-normal) on 32x32, the
    # FFN residual from the normalised stream, no qkv bias, PE std 0.2,
    # class token starting at zero.
    'vit-lite-7/4':
    dict(
        embed_dims=256,
        num_layers=7,
        num_heads=4,
        feedforward_channels=512,
        img_size=32,
        tokenizer=dict(
            type='Patch', patch_size=4, weight_init='kaiming_normal'),
        qkv_bias=False,
        norm_cfg=LN5,
        norm2_in_residual=True,
        pos_embed_std=0.2,
        cls_token_std=0.),
    # As ViT-Lite-7/4 with one 3x3 conv + max-pool tokenizer and
    # sequence pooling instead of a class token.
    'cct-7/3x1':
    dict(
        embed_dims=256,
        num_layers=7,
        num_heads=4,
        feedforward_channels=512,
        img_size=32,
        tokenizer=dict(type='Conv', num_layers=1, kernel_size=3),
        with_cls_token=False,
        out_type='pooled',
        pooling=dict(type='SeqPool'),
        qkv_bias=False,
        norm_cfg=LN5,
        norm2_in_residual=True,
        pos_embed_std=0.2),
    'test-tiny':
    dict(embed_dims=64, num_layers=4, num_heads=2, feedforward_channels=256),
}


def to_2tuple(x: Union[int, Sequence[int]]) -> Tuple[int, int]:
    if isinstance(x, int):
        return (x, x)
    x = tuple(int(v) for v in x)
    if len(x) != 2:
        raise ValueError(f'expected an int or a pair, got {x}')
    return x


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


def _join_allows_cls_token(pe_join: Union[None, str, Dict]) -> bool:
    """Whether the join a config names keeps a class token (unknown types
    are left to :func:`~mmlape.models.layers.pe_join.build_pe_join` to
    refuse)."""
    if pe_join is None:
        return True
    join_type = pe_join if isinstance(pe_join,
                                      str) else dict(pe_join).get('type')
    if isinstance(join_type, type):
        return getattr(join_type, 'allows_cls_token', True)
    lookup = {k.lower(): v for k, v in PE_JOINS.module_dict.items()}
    cls = lookup.get(str(join_type).lower())
    return True if cls is None else cls.allows_cls_token


def build_tokenizer(cfg: Union[None, str, Dict], patch_size: Optional[int],
                    patch_bias: Optional[bool], in_channels: int,
                    embed_dims: int) -> nn.Module:
    """The tokenizer; ``patch_size``/``patch_bias`` set the ``Patch``
    tokenizer's options and are refused for any other."""
    cfg = dict(type='Patch') if cfg is None else cfg
    cfg = dict(type=cfg) if isinstance(cfg, str) else dict(cfg)
    if part_class(TOKENIZERS, 'tokenizer', cfg) is PatchEmbed:
        cfg.setdefault('patch_size', VIT_OPTION_DEFAULTS['patch_size'])
        if patch_size is not None:
            cfg['patch_size'] = patch_size
        if patch_bias is not None:
            cfg['bias'] = patch_bias
    elif patch_size is not None or patch_bias is not None:
        raise ValueError(
            f'patch_size/patch_bias set the Patch tokenizer, but '
            f'tokenizer.type={cfg["type"]!r}: give its options in '
            f'tokenizer=dict(...)')
    return build_part(
        TOKENIZERS,
        'tokenizer',
        cfg,
        in_channels=in_channels,
        embed_dims=embed_dims)


def pooling_cfg(out_type: str, pooling: Union[None, str, Dict],
                arch_pooling: Union[None, str, Dict], pe_join: Union[None, str,
                                                                     Dict],
                with_cls_token: bool) -> Optional[Dict]:
    """The pooling config of ``out_type`` (``pooling``, else the arch's
    ``arch_pooling``), checked against the join and the class token."""
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
    cfg = dict(type=cfg) if isinstance(cfg, str) else dict(cfg)
    cls = part_class(POOLINGS, 'pooling', cfg)
    if cls.cls_token_needed(cfg) and cls is not ClsTokenPool:
        # (ClsToken's refusal is the join's own message.)
        if not _join_allows_cls_token(pe_join):
            join = pe_join if isinstance(pe_join,
                                         str) else dict(pe_join)['type']
            raise ValueError(
                f'pe_join.type={join!r} removes the class token, which '
                f'pooling.type={cfg["type"]!r} needs. '
                f'{cls.without_cls_token}.')
        if not with_cls_token:
            raise ValueError(f'pooling.type={cfg["type"]!r} needs '
                             f'with_cls_token=True')
    return cfg
