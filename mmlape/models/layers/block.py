"""The pre-norm Transformer encoder block every mmlape backbone uses.

References:
    ViT (Dosovitskiy et al., 2021) and DeiT (Touvron et al., 2021) for the
    block; LaPE (Yu et al., ICCV 2023) for the position embedding added to
    the attention input after ``norm1``; ViT-Adapter (Chen et al., 2022) for
    layer scale and zero-padded window attention; Swin (Liu et al., 2021)
    for the 2D relative position bias table; Compact-Transformers (Hassani
    et al., 2021) for the encoder layer of ViT-Lite/CCT, whose FFN residual
    starts from the normalised stream.

The FFN is a registered part (``ffn=dict(type='MLP' | 'LeFF')``, see
:mod:`mmlape.models.layers.ffn`).

The block knows nothing about PE joins. It takes the per-layer PE bundle
that a join decides (:class:`~mmlape.models.layers.pe_join.LayerPE`, the
same for every block type): ``pe.attn``, added to ``norm1(x)`` only (it
never enters the residual stream or the MLP), and ``pe.bias``, added to the
attention logits.
"""
import math
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from torch import Tensor

from mmlape.registry import FFNS
from .ffn import Mlp
from .parts import build_part
from .pe_join import LayerPE

__all__ = ['Attention', 'Mlp', 'TransformerBlock', 'relative_position_index']


def relative_position_index(grid_hw: Sequence[int]) -> Tensor:
    """Index into a ``(2H-1)*(2W-1)`` relative-bias table for every pair.

    Args:
        grid_hw (Sequence[int]): Patch grid ``(H, W)``.

    Returns:
        Tensor: Long tensor of shape ``(H*W, H*W)``.
    """
    h, w = grid_hw
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing='ij')
    coords = torch.stack([ys.flatten(), xs.flatten()])  # 2, N
    rel = coords[:, :, None] - coords[:, None, :]  # 2, N, N
    return (rel[0] + h - 1) * (2 * w - 1) + (rel[1] + w - 1)


class Attention(nn.Module):
    """Multi-head self-attention on ``scaled_dot_product_attention``.

    Args:
        embed_dims (int): Channels ``C``.
        num_heads (int): Heads; must divide ``C``.
        qkv_bias (bool): Bias in the qkv projection. Defaults to True.
        attn_drop (float): Dropout on attention weights. Defaults to 0.
        proj_drop (float): Dropout after the output projection.
            Defaults to 0.
        window_size (int): Attend within non-overlapping windows of this
            many patches a side (zero-padded, as in ViT-Adapter); 0 attends
            globally. Defaults to 0.
        rel_pos_grid (Sequence[int], optional): Patch grid ``(H, W)`` of a
            learnable 2D relative position bias table owned by this layer.
            Defaults to None (no table).
        qk_scale (float, optional): Scale of the logits. Defaults to None
            (``head_dims ** -0.5``).

    Example:
        >>> attn = Attention(64, 2)
        >>> attn(torch.randn(2, 50, 64)).shape
        torch.Size([2, 50, 64])
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 window_size: int = 0,
                 rel_pos_grid: Optional[Sequence[int]] = None,
                 qk_scale: Optional[float] = None) -> None:
        super().__init__()
        if embed_dims % num_heads:
            raise ValueError(f'num_heads={num_heads} does not divide '
                             f'embed_dims={embed_dims}')
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads
        self.attn_drop = attn_drop
        self.qk_scale = qk_scale
        self.window_size = window_size
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        self.rel_pos_grid = None
        if rel_pos_grid is not None:
            h, w = rel_pos_grid
            self.rel_pos_grid = (int(h), int(w))
            self.relative_position_bias_table = nn.Parameter(
                torch.zeros((2 * h - 1) * (2 * w - 1), num_heads))
            nn.init.trunc_normal_(self.relative_position_bias_table, std=.02)
            self.register_buffer(
                'relative_position_index',
                relative_position_index(rel_pos_grid),
                persistent=False)

    def relative_bias(self) -> Tensor:
        """This layer's relative bias, shape ``(heads, N, N)``."""
        n = self.relative_position_index.shape[0]
        table = self.relative_position_bias_table
        bias = table[self.relative_position_index.reshape(-1)]
        return bias.reshape(n, n, -1).permute(2, 0, 1)

    def _sdpa(self, q: Tensor, k: Tensor, v: Tensor,
              bias: Optional[Tensor]) -> Tensor:
        if bias is not None:
            bias = bias.to(q.dtype)
        return F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=bias,
            dropout_p=self.attn_drop if self.training else 0.,
            scale=self.qk_scale)

    def forward(self,
                x: Tensor,
                bias: Optional[Tensor] = None,
                hw: Optional[Tuple[int, int]] = None) -> Tensor:
        """Args:
            x (Tensor): Tokens ``(B, N, C)``.
            bias (Tensor, optional): Additive logits ``(1|B, heads, N, N)``.
            hw (tuple, optional): Patch grid; needed for window attention.
        """
        if self.window_size > 0:
            if bias is not None:
                raise ValueError('window attention takes no attention bias')
            return self._window_forward(x, hw)
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dims)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = self._sdpa(q, k, v, bias)
        out = out.transpose(1, 2).reshape(b, n, c)
        return self.proj_drop(self.proj(out))

    def _window_forward(self, x: Tensor, hw: Optional[Tuple[int,
                                                            int]]) -> Tensor:
        if hw is None or hw[0] * hw[1] != x.shape[1]:
            raise ValueError('window attention needs the patch grid `hw` of '
                             'a patch-only token sequence')
        b, n, c = x.shape
        h, w = hw
        ws = self.window_size
        hp, wp = math.ceil(h / ws) * ws, math.ceil(w / ws) * ws
        # Zero-pad after the projection, as ViT-Adapter does: padded keys
        # have zero logits and zero values.
        qkv = self.qkv(x).reshape(b, h, w, 3 * c)
        qkv = F.pad(qkv, (0, 0, 0, wp - w, 0, hp - h))
        qkv = qkv.reshape(b, hp // ws, ws, wp // ws, ws, 3, self.num_heads,
                          self.head_dims)
        qkv = qkv.permute(5, 0, 1, 3, 6, 2, 4, 7)
        qkv = qkv.reshape(3, -1, self.num_heads, ws * ws, self.head_dims)
        q, k, v = qkv.unbind(0)
        out = self._sdpa(q, k, v, None)  # (B*nW, heads, ws*ws, d)
        out = out.reshape(b, hp // ws, wp // ws, self.num_heads, ws, ws,
                          self.head_dims)
        out = out.permute(0, 1, 4, 2, 5, 3, 6).reshape(b, hp, wp, c)
        out = out[:, :h, :w].reshape(b, n, c)
        return self.proj_drop(self.proj(out))


class TransformerBlock(nn.Module):
    """Pre-norm encoder block with a slot for a layer-wise PE.

    ``x' = x + DP(g1 * MSA(norm1(x) + pe.attn, bias=pe.bias))``,
    ``y = x' + DP(g2 * FFN(norm2(x')))``, where ``g1, g2`` are layer-scale
    vectors when enabled. With ``norm2_in_residual`` (ViT-Lite, CCT)
    ``y = norm2(x') + DP(FFN(norm2(x')))``. A join that needs a per-layer
    PE norm attaches it as ``pe_norm`` (the state-dict name
    ``blocks.{i}.pe_norm`` of the LaPE code); the join, not the block,
    decides how it is used.

    Args:
        embed_dims (int): Channels ``C``.
        num_heads (int): Attention heads.
        feedforward_channels (int): Hidden channels of the MLP.
        qkv_bias (bool): Bias in the qkv projection. Defaults to True.
        drop_rate (float): Dropout after projections. Defaults to 0.
        attn_drop_rate (float): Attention dropout. Defaults to 0.
        drop_path_rate (float): Stochastic depth. Defaults to 0.
        norm_cfg (dict): Norm config. Defaults to LN with eps 1e-6.
        layer_scale_init_value (float): Initial layer-scale value; 0
            disables layer scale. Defaults to 0.
        window_size (int): Window attention size, 0 for global.
            Defaults to 0.
        rel_pos_grid (Sequence[int], optional): Grid of this layer's
            relative position bias table. Defaults to None.
        qk_scale (float, optional): Attention scale. Defaults to None
            (``head_dims ** -0.5``).
        ffn_cfg (dict, optional): The FFN part, ``dict(type='MLP')`` or
            ``dict(type='LeFF', ...)``; the FFN is stored as ``mlp``.
            Defaults to None (MLP).
        norm2_in_residual (bool): The stream itself becomes ``norm2(x')``
            before the FFN residual (the encoder layer of
            Compact-Transformers). Defaults to False.

    Example:
        >>> from mmlape.models.layers.pe_join import LayerPE
        >>> blk = TransformerBlock(64, 2, 256)
        >>> pe = LayerPE(attn=torch.randn(1, 17, 64))
        >>> blk(torch.randn(2, 17, 64), pe=pe).shape
        torch.Size([2, 17, 64])
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 feedforward_channels: int,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 layer_scale_init_value: float = 0.,
                 window_size: int = 0,
                 rel_pos_grid: Optional[Sequence[int]] = None,
                 qk_scale: Optional[float] = None,
                 ffn_cfg: Optional[Dict] = None,
                 norm2_in_residual: bool = False) -> None:
        super().__init__()
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = Attention(
            embed_dims,
            num_heads,
            qkv_bias=qkv_bias,
            attn_drop=attn_drop_rate,
            proj_drop=drop_rate,
            window_size=window_size,
            rel_pos_grid=rel_pos_grid,
            qk_scale=qk_scale)
        self.drop_path = (
            DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity())
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.mlp = build_part(
            FFNS,
            'ffn',
            ffn_cfg or dict(type='MLP'),
            embed_dims=embed_dims,
            feedforward_channels=feedforward_channels,
            drop_rate=drop_rate)
        self.norm2_in_residual = norm2_in_residual
        self.layer_scale = layer_scale_init_value > 0
        if self.layer_scale:
            self.gamma1 = nn.Parameter(
                torch.full((embed_dims, ), float(layer_scale_init_value)))
            self.gamma2 = nn.Parameter(
                torch.full((embed_dims, ), float(layer_scale_init_value)))

    def forward(self,
                x: Tensor,
                hw: Optional[Tuple[int, int]] = None,
                pe: Optional[LayerPE] = None) -> Tensor:
        """Args:
            x (Tensor): Tokens ``(B, N, C)``.
            hw (tuple, optional): Patch grid, for window attention.
            pe (LayerPE, optional): This layer's PE: ``attn``
                ``(1, N, C)``, added to ``norm1(x)`` only; ``bias``
                ``(1, heads, N, N)``, added to the logits.
        """
        attn_pos, attn_bias = (None, None) if pe is None else pe
        h = self.norm1(x)
        if attn_pos is not None:
            # In place: LayerNorm's backward needs its input, not its
            # output, so this saves a (B, N, C) allocation per layer.
            h = h.add_(attn_pos)
        h = self.attn(h, attn_bias, hw)
        if self.layer_scale:
            h = self.gamma1 * h
        x = x + self.drop_path(h)
        if self.norm2_in_residual:
            x = self.norm2(x)
            h = self.mlp(x, hw)
        else:
            h = self.mlp(self.norm2(x), hw)
        if self.layer_scale:
            h = self.gamma2 * h
        return x + self.drop_path(h)
