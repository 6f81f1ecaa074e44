"""mmpretrain's ``T2T_ViT`` signature on :class:`LaPEViT`.

References:
    Yuan et al., "Tokens-to-Token ViT", ICCV 2021; mmpretrain 1.2.0's
    ``T2T_ViT``.
"""
from copy import deepcopy
from dataclasses import replace
from typing import Dict, Sequence, Union

import torch.nn as nn
from mmcv.cnn import build_norm_layer

from mmlape.registry import register_model
from ..checkpoint import T2T_CHECKPOINTS, ViTSpec
from ..layers.pos_embed import build_1d_sincos
from .vit import LaPEViT

__all__ = ['LaPET2TViT']

#: What mmpretrain's ``t2t_cfg`` and ``layer_cfgs`` may set here.
T2T_CFG_KEYS = ('token_dims', 'use_performer')
LAYER_CFG_KEYS = ('embed_dims', 'num_heads', 'feedforward_channels',
                  'drop_rate', 'attn_drop_rate', 'qkv_bias', 'qk_scale',
                  'norm_cfg', 'num_fcs', 'act_cfg')


def _layer_settings(layer_cfgs: Union[Dict, Sequence[Dict]], num_layers: int,
                    embed_dims: int, norm_cfg: Dict) -> Dict:
    """The one setting of every encoder layer, from mmpretrain's
    ``layer_cfgs`` (a dict, or one per layer that must agree)."""
    if isinstance(layer_cfgs, dict):
        cfgs = [layer_cfgs]
    else:
        cfgs = list(layer_cfgs)
        if len(cfgs) != num_layers:
            raise ValueError(f'layer_cfgs has {len(cfgs)} entries for '
                             f'num_layers={num_layers}')
    settings = []
    for i, cfg in enumerate(cfgs):
        if not isinstance(cfg, dict):
            raise ValueError(f'layer_cfgs[{i}] must be a dict, got {cfg!r}')
        unknown = sorted(set(cfg) - set(LAYER_CFG_KEYS))
        if unknown:
            raise ValueError(f'layer_cfgs sets {unknown}, which LaPET2TViT '
                             f'does not take; it takes '
                             f'{sorted(LAYER_CFG_KEYS)}')
        cfg = dict(
            dict(
                embed_dims=embed_dims,
                num_heads=6,
                feedforward_channels=3 * embed_dims,
                drop_rate=0.,
                attn_drop_rate=0.,
                qkv_bias=False,
                norm_cfg=norm_cfg,
                num_fcs=2,
                act_cfg=dict(type='GELU')), **deepcopy(cfg))
        # mmpretrain's attention takes any qk_scale as "the head scale":
        # it has no effect there, and none here.
        cfg.pop('qk_scale', None)
        for key, want in (('embed_dims', embed_dims), ('num_fcs', 2),
                          ('act_cfg', dict(type='GELU'))):
            if cfg[key] != want:
                raise ValueError(f'layer_cfgs.{key}={cfg[key]!r}; '
                                 f'LaPET2TViT takes {want!r}')
        settings.append(cfg)
    if any(s != settings[0] for s in settings[1:]):
        raise ValueError('layer_cfgs differ between layers; LaPET2TViT '
                         'takes one setting for every encoder layer')
    return settings[0]


@register_model()
class LaPET2TViT(LaPEViT):
    """T2T-ViT (mmpretrain's ``T2T_ViT``) whose PE join comes from config.

    A drop-in for mmpretrain 1.2.0's ``T2T_ViT`` (same outputs on the same
    weights) plus ``pe_join``. The fixed sinusoid ``pos_embed`` is a
    state-dict buffer as upstream's: loaded, and resized (not rebuilt) at
    another ``img_size``.

    Args:
        img_size (int | tuple): Pretraining size; sets the PE grid
            (``img_size // 16``). Defaults to 224.
        in_channels (int): Defaults to 3.
        embed_dims (int): Defaults to 384.
        num_layers (int): Encoder layers. Defaults to 14.
        out_indices (int | Sequence[int]): Layers whose output is returned
            (negative ones from the end). Defaults to -1.
        drop_rate (float): Dropout after the PE. Defaults to 0.
        drop_path_rate (float): Stochastic depth, linear over layers.
            Defaults to 0.
        norm_cfg (dict): Norm of the encoder layers, the final norm and the
            PE norms. Defaults to ``dict(type='LN')`` (eps 1e-5).
        final_norm (bool): Normalise the last layer's output.
            Defaults to True.
        out_type (str): ``'cls_token'``, ``'featmap'``, ``'avg_featmap'``
            (GAP without another norm, as upstream's T2T-ViT) or ``'raw'``.
            Defaults to ``'cls_token'``.
        with_cls_token (bool): Defaults to True.
        interpolate_mode (str): How the sinusoid is resized for another
            grid. Defaults to ``'bicubic'``.
        t2t_cfg (dict): The T2T module's ``token_dims`` (64) and
            ``use_performer`` (False: softmax token layers, T2T-ViT_t; True:
            mmlape's Performer token layers, which upstream does not
            implement). Defaults to an empty dict.
        layer_cfgs (dict | Sequence[dict]): Every encoder layer's
            ``num_heads`` (6), ``feedforward_channels`` (``3 *
            embed_dims``), ``qkv_bias`` (False), ``drop_rate``,
            ``attn_drop_rate``, ``norm_cfg``; one dict, or one per layer
            that all agree. Defaults to an empty dict.
        pe_join (dict | str, optional): A join that takes the fixed
            ``sincos1d`` PE (``Default``, ``LaPE``, ...). Defaults to None
            (``Default``).
        cache_pe_plan (bool): See :class:`LaPEViT`. Defaults to True.
        with_cp (bool): Gradient checkpointing of blocks. Defaults to False.
        attn_scale (str): ``'mmpretrain'``: logits multiplied by
            ``sqrt(head_dims)`` as mmpretrain 1.2.0 computes them (it
            divides by the scale it is given), in the token layers and the
            encoder; ``'official'``: the paper code's
            ``(in_dims // heads) ** -0.5`` and ``head_dims ** -0.5``.
            Defaults to ``'mmpretrain'``.
        init_cfg (dict | list, optional): mmengine's, or
            ``dict(type='Pretrained', ...)`` for an mmpretrain, official or
            mmlape T2T-ViT checkpoint. Defaults to None.

    Example:
        >>> import torch
        >>> t2t = LaPET2TViT(img_size=64, embed_dims=64, num_layers=2,
        ...                  t2t_cfg=dict(token_dims=16),
        ...                  layer_cfgs=dict(num_heads=2))
        >>> t2t(torch.randn(1, 3, 64, 64))[0].shape
        torch.Size([1, 64])
    """
    checkpoint_family = T2T_CHECKPOINTS
    ATTN_SCALES = ('mmpretrain', 'official')

    def __init__(self,
                 img_size: Union[int, Sequence[int]] = 224,
                 in_channels: int = 3,
                 embed_dims: int = 384,
                 num_layers: int = 14,
                 out_indices: Union[int, Sequence[int]] = -1,
                 drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 norm_cfg: Dict = dict(type='LN'),
                 final_norm: bool = True,
                 out_type: str = 'cls_token',
                 with_cls_token: bool = True,
                 interpolate_mode: str = 'bicubic',
                 t2t_cfg: Dict = dict(),
                 layer_cfgs: Union[Dict, Sequence[Dict]] = dict(),
                 pe_join: Union[None, str, Dict] = None,
                 cache_pe_plan: bool = True,
                 with_cp: bool = False,
                 attn_scale: str = 'mmpretrain',
                 init_cfg: Union[None, Dict, Sequence[Dict]] = None) -> None:
        if not isinstance(t2t_cfg, dict) or set(t2t_cfg) - set(T2T_CFG_KEYS):
            raise ValueError(f't2t_cfg={t2t_cfg!r}; LaPET2TViT takes '
                             f'{list(T2T_CFG_KEYS)}')
        if not isinstance(out_indices, (int, Sequence)) or isinstance(
                out_indices, (bool, str)):
            raise ValueError(f'out_indices must be an int or a sequence of '
                             f'ints, got {type(out_indices)}')
        if out_type == 'cls_token' and not with_cls_token:
            raise ValueError("with_cls_token must be True when "
                             "out_type='cls_token'")
        if out_type not in ('raw', 'cls_token', 'featmap', 'avg_featmap'):
            raise ValueError(f'Unknown out_type={out_type!r}; choose one of '
                             f"['raw', 'cls_token', 'featmap', "
                             f"'avg_featmap']")
        layer = _layer_settings(layer_cfgs, num_layers, embed_dims, norm_cfg)
        if attn_scale not in self.ATTN_SCALES:
            raise ValueError(f'attn_scale={attn_scale!r}; choose one of '
                             f'{list(self.ATTN_SCALES)}')
        self.attn_scale = attn_scale
        token_dims = t2t_cfg.get('token_dims', 64)
        head_dims = embed_dims // layer['num_heads']
        if t2t_cfg.get('use_performer', False):
            tokenizer = dict(
                type='T2T', token_dims=token_dims, attention='performer')
        else:
            tokenizer = dict(
                type='T2T', token_dims=token_dims, attention='transformer')
        arch = dict(
            embed_dims=embed_dims,
            num_layers=num_layers,
            num_heads=layer['num_heads'],
            feedforward_channels=layer['feedforward_channels'],
            tokenizer=tokenizer,
            gap_norm=False)  # upstream's T2T-ViT pools by GAP, no norm after
        if attn_scale == 'mmpretrain':
            # mmpretrain 1.2.0 divides the logits by the scale it is given
            # (the head width ** -0.5), i.e. multiplies by its square root.
            arch['qk_scale'] = head_dims**0.5
            if not t2t_cfg.get('use_performer', False):
                tokenizer['qk_scale'] = token_dims**0.5
        super().__init__(
            arch=arch,
            img_size=img_size,
            in_channels=in_channels,
            pe_join=pe_join,
            pe_type='sincos1d',
            with_cls_token=with_cls_token,
            out_type=out_type,
            out_indices=out_indices,
            final_norm=final_norm,
            qkv_bias=layer['qkv_bias'],
            drop_rate=layer['drop_rate'],
            attn_drop_rate=layer['attn_drop_rate'],
            drop_path_rate=drop_path_rate,
            norm_cfg=layer['norm_cfg'],
            interpolate_mode=interpolate_mode,
            with_cp=with_cp,
            cache_pe_plan=cache_pe_plan,
            init_cfg=init_cfg)
        if final_norm and layer['norm_cfg'] != norm_cfg:
            # upstream's final norm follows the top-level norm_cfg
            self.norm = build_norm_layer(norm_cfg, self.embed_dims)[1]
        self.drop_after_pos = nn.Dropout(drop_rate)
        # The sinusoid as upstream keeps it: a buffer of the state dict.
        table = build_1d_sincos(self.num_patches + self.num_extra_tokens,
                                self.embed_dims)
        del self.pos_embed
        self.register_buffer('pos_embed', table, persistent=True)

    def checkpoint_spec(self) -> ViTSpec:
        """As the ViT's, with the sinusoid buffer's shape: a checkpoint's
        sinusoid is fitted (resized) to this model's grid."""
        return replace(
            super().checkpoint_spec(),
            pos_embed_shape=tuple(self.pos_embed.shape))
