"""Poolings: how the tokens of the last layer become one vector.

A pooling's class attributes tell the backbone what it needs (e.g. a class
token, refused to a join without one).

References:
    ``ClsToken``: ViT/DeiT. ``GAP``: PVG/MPVG (AAAI 2025). ``SeqPool``:
    CCT. ``LCA``: CeiT's Layer-wise Class-token Attention (Wu et al., ICCV
    2021).
"""
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from torch import Tensor

from mmlape.registry import POOLINGS
from .ffn import Mlp

__all__ = ['BasePooling', 'ClsTokenPool', 'GAPPool', 'SeqPool', 'LCAPool']


class BasePooling(nn.Module):
    """What a pooling needs from the backbone.

    Attributes:
        needs_cls_token (bool): Works only with a class token (a pooling
            whose options decide it overrides :meth:`cls_token_needed`).
        layer_cls_tokens (bool): Pools one token of every layer
            (:meth:`layer_token`, before any norm); the final norm then
            applies to its output.
        last_layer_only (bool): Only meaningful on the last layer (learned
            from the final features), so ``out_indices`` must be ``-1``.
        gap (bool): Global average of the patch tokens: an MPVG final term
            reaches the output as its token mean.
        without_cls_token (str): How the papers or mmlape resolve a join
            without a class token (the refusal message).
    """
    needs_cls_token = False
    layer_cls_tokens = False
    last_layer_only = False
    gap = False
    without_cls_token = ''

    @classmethod
    def cls_token_needed(cls, cfg: Dict) -> bool:
        """Whether the pooling built from ``cfg`` needs a class token."""
        return cls.needs_cls_token

    def layer_token(self, x: Tensor, num_extra_tokens: int) -> Tensor:
        """The token of one layer's output ``(B, N, C)`` that a
        ``layer_cls_tokens`` pooling pools: the class token."""
        return x[:, 0]

    def forward(self, x: Tensor, num_extra_tokens: int) -> Tensor:
        raise NotImplementedError


@POOLINGS.register_module(name='ClsToken')
class ClsTokenPool(BasePooling):
    """The class token: ``x[:, 0]``.

    Example:
        >>> ClsTokenPool()(torch.randn(2, 17, 64), 1).shape
        torch.Size([2, 64])
    """
    needs_cls_token = True
    without_cls_token = (
        "PVG and MPVG replace the class token by GAP: build the backbone "
        "with with_cls_token=False and out_type='avg_featmap' (the papers' "
        'DeiT, T2T-ViT and ViT-Lite setting)')

    def forward(self, x: Tensor, num_extra_tokens: int) -> Tensor:
        if not num_extra_tokens:
            raise ValueError('ClsToken pooling needs a class token')
        return x[:, 0]


@POOLINGS.register_module(name='GAP')
class GAPPool(BasePooling):
    """The mean of the patch tokens (extra tokens left out).

    Example:
        >>> GAPPool()(torch.randn(2, 17, 64), 1).shape
        torch.Size([2, 64])
    """
    gap = True

    def forward(self, x: Tensor, num_extra_tokens: int) -> Tensor:
        return x[:, num_extra_tokens:].mean(dim=1)


@POOLINGS.register_module(name='SeqPool')
class SeqPool(BasePooling):
    """CCT's sequence pooling over all tokens:
    ``softmax_N(attention_pool(x))^T x``.

    Args:
        embed_dims (int): Channels ``C``.

    Example:
        >>> SeqPool(64)(torch.randn(2, 16, 64), 0).shape
        torch.Size([2, 64])
    """
    last_layer_only = True

    def __init__(self, embed_dims: int) -> None:
        super().__init__()
        self.attention_pool = nn.Linear(embed_dims, 1)

    def forward(self, x: Tensor, num_extra_tokens: int) -> Tensor:
        weights = self.attention_pool(x).softmax(dim=1)  # (B, N, 1)
        return (weights.transpose(1, 2) @ x)[:, 0]


class LCAAttention(nn.Module):
    """Attention in which only the last token queries (``qkv``, ``proj``
    named as in CeiT's code)."""

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.) -> None:
        super().__init__()
        if embed_dims % num_heads:
            raise ValueError(f'num_heads={num_heads} does not divide '
                             f'embed_dims={embed_dims}')
        self.num_heads = num_heads
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        heads, d = self.num_heads, c // self.num_heads
        weight, bias = self.qkv.weight, self.qkv.bias
        q = F.linear(x[:, -1:], weight[:c], None if bias is None else bias[:c])
        kv = F.linear(x, weight[c:], None if bias is None else bias[c:])
        q = q.reshape(b, 1, heads, d).transpose(1, 2)
        k, v = kv.reshape(b, n, 2, heads, d).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_drop if self.training else 0.)
        out = out.transpose(1, 2).reshape(b, 1, c)
        return self.proj_drop(self.proj(out))


@POOLINGS.register_module(name='LCA')
class LCAPool(BasePooling):
    """CeiT's Layer-wise Class-token Attention.

    With ``t = [c_1 .. c_L] + E`` (one token of each layer's output plus
    ``pos_layer_embed`` ``E``, zero at the start)::

        z = t_L + proj(attention(q = norm1(t)_L, k = v = norm1(t)))
        out = z + mlp(norm2(z))

    The backbone's final norm (and MPVG's token-mean term) then applies.
    ``c_l`` is layer ``l``'s class token (``'cls'``) or its mean patch
    token (``'gap'``: the MPVG paper's CeiT-Ti PVG/MPVG; the reading that
    gives its Table 1 count, docs/recipes.md, "CeiT-Ti").

    Args:
        embed_dims (int): Channels ``C``.
        num_layers (int): Encoder layers ``L`` (rows of ``E``).
        num_heads (int): Heads.
        feedforward_channels (int): Hidden channels of the MLP.
        layer_token (str): ``'cls'`` (each layer's class token) or
            ``'gap'`` (each layer's mean patch token; no class token
            needed). Defaults to ``'cls'``.
        qkv_bias (bool): Defaults to True.
        drop_rate (float): Dropout after ``proj`` and in the MLP.
            Defaults to 0.
        attn_drop_rate (float): Defaults to 0.
        norm_cfg (dict): Defaults to LN, eps 1e-6.

    Example:
        >>> lca = LCAPool(64, num_layers=4, num_heads=2,
        ...               feedforward_channels=128)
        >>> lca(torch.randn(2, 4, 64), 0).shape
        torch.Size([2, 64])
        >>> gap = LCAPool(64, 4, 2, 128, layer_token='gap')
        >>> gap.layer_token(torch.randn(2, 16, 64), 0).shape
        torch.Size([2, 64])
    """
    needs_cls_token = True
    layer_cls_tokens = True
    last_layer_only = True
    LAYER_TOKENS = ('cls', 'gap')
    without_cls_token = (
        "CeiT's Layer-wise Class-token Attention pools the class token of "
        'every layer, and PVG/MPVG have no class token. The MPVG paper '
        'counts LCA in its CeiT-Ti PVG/MPVG (6.361M, Table 1); mmlape '
        'feeds LCA the GAP token of every layer, the reading that gives '
        "that count: pooling=dict(type='LCA', layer_token='gap') with "
        'with_cls_token=False (the configs/ceit -pvg/-mpvg configs). GAP '
        "instead of LCA (with_cls_token=False, out_type='avg_featmap') "
        'drops LCA\'s parameters (docs/recipes.md, "CeiT-Ti")')

    def __init__(self,
                 embed_dims: int,
                 num_layers: int,
                 num_heads: int,
                 feedforward_channels: int,
                 layer_token: str = 'cls',
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 norm_cfg: Optional[Dict] = None) -> None:
        super().__init__()
        if layer_token not in self.LAYER_TOKENS:
            raise ValueError(f'Unknown pooling.layer_token={layer_token!r}; '
                             f'choose one of {list(self.LAYER_TOKENS)}')
        self.layer_token_type = layer_token
        self.needs_cls_token = layer_token == 'cls'
        norm_cfg = norm_cfg or dict(type='LN', eps=1e-6)
        self.pos_layer_embed = nn.Parameter(
            torch.zeros(1, num_layers, embed_dims))
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = LCAAttention(
            embed_dims,
            num_heads,
            qkv_bias=qkv_bias,
            attn_drop=attn_drop_rate,
            proj_drop=drop_rate)
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.mlp = Mlp(embed_dims, feedforward_channels, drop_rate)

    @classmethod
    def cls_token_needed(cls, cfg: Dict) -> bool:
        return cfg.get('layer_token', 'cls') == 'cls'

    def layer_token(self, x: Tensor, num_extra_tokens: int) -> Tensor:
        if self.layer_token_type == 'gap':
            return x[:, num_extra_tokens:].mean(dim=1)
        if not num_extra_tokens:
            raise ValueError("pooling.layer_token='cls' needs a class token")
        return x[:, 0]

    def init_part_weights(self) -> None:
        nn.init.zeros_(self.pos_layer_embed)

    def forward(self, x: Tensor, num_extra_tokens: int = 0) -> Tensor:
        """Args:
            x (Tensor): One token of every layer, ``(B, L, C)``.
        """
        if x.shape[1] != self.pos_layer_embed.shape[1]:
            raise ValueError(f'LCA pools {self.pos_layer_embed.shape[1]} '
                             f'layer tokens, got {x.shape[1]}')
        t = x + self.pos_layer_embed
        z = t[:, -1:] + self.attn(self.norm1(t))
        z = z + self.mlp(self.norm2(z))
        return z[:, 0]

    def extra_repr(self) -> str:
        return f'layer_token={self.layer_token_type!r}'
