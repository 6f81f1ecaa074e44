"""Encoder blocks: the pre-norm ViT block and Swin's (shifted) window
block. A block knows no PE join: it takes the per-layer bundle
:class:`~mmlape.models.layers.pe_plan.LayerPE` (``attn`` added to
``norm1(x)`` only, ``bias`` added to the logits, ``qk`` applied to q and k).

References:
    ViT (Dosovitskiy et al., 2021), DeiT (Touvron et al., 2021); LaPE (Yu
    et al., ICCV 2023) for the PE added after ``norm1``; ViT-Adapter (Chen
    et al., 2022) for layer scale and zero-padded window attention; Swin
    (Liu et al., 2021) for the relative bias and shifted-window mask;
    Compact-Transformers (Hassani et al., 2021) for ViT-Lite/CCT's layer.
"""
import functools
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
from .pe_add import add_attn_pe
from .pe_plan import LayerPE, QKFn
from .pos_embed import pe_type_part, relative_position_index

__all__ = [
    'Attention', 'Mlp', 'TransformerBlock', 'relative_position_index',
    'WindowAttention', 'SwinBlock', 'shifted_window_mask', 'pad_grid'
]


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
        pe_type (str, optional): The PE type whose per-layer tensors this
            attention holds (a relative bias table, rotary frequencies:
            :meth:`~mmlape.models.layers.pos_embed.BasePEType.attach`);
            None or an absolute type holds none. Defaults to None.
        pe_grid (Sequence[int], optional): The PE's patch grid ``(H, W)``
            (a relative table's). Defaults to None.
        qk_scale (float, optional): Scale of the logits. Defaults to None
            (``head_dims ** -0.5``).
        proj_bias (bool): Bias of the output projection (mmseg's ViT has
            none without a qkv bias). Defaults to True.
        rope_theta (float, optional): The rotary ``theta``. Defaults to the
            type's (its declaration's ``theta``, :mod:`.pos_embed`).

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
                 pe_type: Optional[str] = None,
                 pe_grid: Optional[Sequence[int]] = None,
                 qk_scale: Optional[float] = None,
                 proj_bias: bool = True,
                 rope_theta: Optional[float] = None) -> None:
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
        self.proj = nn.Linear(embed_dims, embed_dims, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)
        #: What a PE type attached (the relative table's grid, the
        #: rotary type), read by the checkpoint and timm converters.
        self.rel_pos_grid = self.rope_type = None
        self.pe_part = None if pe_type is None else pe_type_part(pe_type)
        if self.pe_part is not None:
            self.pe_part.attach(self, pe_grid, rope_theta)

    def rope_frequencies(self) -> Tensor:
        """This layer's rotary frequencies ``(2, heads, head_dims / 2)``
        (its rotary PE type's :meth:`frequencies`)."""
        return self.pe_part.frequencies(self)

    def rotary_tables(self, grid_hw: Sequence[int],
                      num_extra_tokens: int) -> Tuple[Tensor, Tensor]:
        """This layer's rotary ``cos`` and ``sin`` on ``grid_hw`` (its PE
        type's :meth:`tables`)."""
        return self.pe_part.tables(self, grid_hw, num_extra_tokens)

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
                hw: Optional[Tuple[int, int]] = None,
                qk: Optional[QKFn] = None) -> Tensor:
        """Args:
            x (Tensor): Tokens ``(B, N, C)``.
            bias (Tensor, optional): Additive logits ``(1|B, heads, N, N)``.
            hw (tuple, optional): Patch grid; needed for window attention.
            qk (QKFn, optional): Maps the queries and keys
                ``(B, heads, N, head_dims)`` before the logits.
        """
        if self.window_size > 0:
            if bias is not None or qk is not None:
                raise ValueError('window attention takes no attention bias '
                                 'or q/k map')
            return self._window_forward(x, hw)
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dims)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        if qk is not None:
            q, k = qk(q, k)
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

    ``x' = x + DP(g1 * MSA(norm1(x) + pe.attn, bias=pe.bias, qk=pe.qk))``,
    ``y = x' + DP(g2 * FFN(norm2(x')))``, where ``g1, g2`` are layer-scale
    vectors when enabled. With ``norm2_in_residual`` (ViT-Lite, CCT)
    ``y = norm2(x') + DP(FFN(norm2(x')))``. A join may attach a per-layer
    ``pe_norm`` (state-dict name ``blocks.{i}.pe_norm``, as the LaPE code).

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
        pe_type (str, optional): The PE type whose per-layer tensors the
            attention holds (see :class:`Attention`). Defaults to None.
        pe_grid (Sequence[int], optional): The PE's patch grid.
            Defaults to None.
        qk_scale (float, optional): Attention scale. Defaults to None
            (``head_dims ** -0.5``).
        ffn_cfg (dict, optional): The FFN part, ``dict(type='MLP')`` or
            ``dict(type='LeFF', ...)``; the FFN is stored as ``mlp``.
            Defaults to None (MLP).
        norm2_in_residual (bool): The stream itself becomes ``norm2(x')``
            before the FFN residual (the encoder layer of
            Compact-Transformers). Defaults to False.
        attn_drop_path (bool): Stochastic depth on the attention residual
            too (mmseg's ViT drops the FFN residual only). Defaults to True.
        proj_bias (bool): Bias of the attention's output projection.
            Defaults to True.
        rope_theta (float, optional): A rotary PE type's ``theta``.
            Defaults to None (the type's).

    Example:
        >>> from mmlape.models.layers.pe_plan import LayerPE
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
                 pe_type: Optional[str] = None,
                 pe_grid: Optional[Sequence[int]] = None,
                 qk_scale: Optional[float] = None,
                 ffn_cfg: Optional[Dict] = None,
                 norm2_in_residual: bool = False,
                 attn_drop_path: bool = True,
                 proj_bias: bool = True,
                 rope_theta: Optional[float] = None) -> None:
        super().__init__()
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = Attention(
            embed_dims,
            num_heads,
            qkv_bias=qkv_bias,
            attn_drop=attn_drop_rate,
            proj_drop=drop_rate,
            window_size=window_size,
            pe_type=pe_type,
            pe_grid=pe_grid,
            qk_scale=qk_scale,
            proj_bias=proj_bias,
            rope_theta=rope_theta)
        self.drop_path = (
            DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity())
        self.attn_drop_path = attn_drop_path
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
                ``(1, heads, N, N)``, added to the logits; ``qk``, applied
                to the queries and keys.
        """
        pe = pe or LayerPE()
        attn_pos = pe.attn
        h = self.norm1(x)
        if attn_pos is not None:
            h = add_attn_pe(h, attn_pos)
        h = self.attn(h, pe.bias, hw, pe.qk)
        if self.layer_scale:
            h = self.gamma1 * h
        x = x + (self.drop_path(h) if self.attn_drop_path else h)
        if self.norm2_in_residual:
            x = self.norm2(x)
            h = self.mlp(x, hw)
        else:
            h = self.mlp(self.norm2(x), hw)
        if self.layer_scale:
            h = self.gamma2 * h
        return x + self.drop_path(h)


# ----------------------------------------------------------------------
# Swin
def pad_grid(x: Tensor, multiple: int) -> Tensor:
    """Zero-pad a ``(B, H, W, C)`` map at the bottom and right to a
    multiple of ``multiple``."""
    h, w = x.shape[1:3]
    pad_h, pad_w = (-h) % multiple, (-w) % multiple
    if pad_h or pad_w:
        x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
    return x


@functools.lru_cache(maxsize=64)
def shifted_window_mask(hw: Tuple[int, int],
                        window: int,
                        shift: int,
                        device: Optional[torch.device] = None) -> Tensor:
    """Logit mask of shifted-window attention, ``(nW, n, n)``.

    After the cyclic shift by ``-shift`` a window at the bottom or right
    edge holds tokens of up to three regions that are not neighbours in the
    image (rows ``[0, H - window)``, ``[H - window, H - shift)`` and
    ``[H - shift, H)``, likewise for columns). Pairs from different regions
    get -100 (Swin's value), pairs within a region 0.

    Args:
        hw (tuple[int, int]): Padded grid ``(H, W)``, multiples of
            ``window``.
        window (int): Window side.
        shift (int): Shift, ``0 < shift < window``.
        device (torch.device, optional): Where the (cached) mask lives.
            Defaults to None (CPU).
    """
    h, w = hw

    def region(size: int) -> Tensor:
        idx = torch.arange(size)
        return (idx >= size - window).long() + (idx >= size - shift).long()

    ids = region(h)[:, None] * 3 + region(w)[None, :]  # H, W
    ids = ids.reshape(h // window, window, w // window, window)
    ids = ids.permute(0, 2, 1, 3).reshape(-1, window * window)
    same = ids[:, :, None] == ids[:, None, :]
    return torch.zeros(same.shape).masked_fill_(~same, -100.).to(device)


class WindowAttention(nn.Module):
    """(Shifted) window self-attention with a relative position bias.

    Args:
        embed_dims (int): Channels ``C``.
        num_heads (int): Heads; must divide ``C``.
        window_size (int): Window side. Defaults to 7.
        shift (bool): Shift the windows by ``window_size // 2``.
            Defaults to False.
        pad_small_map (bool): When the map is no larger than a window, keep
            the shift and pad (dense tasks); otherwise, as Swin does for
            classification, a map equal to a window is not shifted and a
            smaller one is refused. Defaults to False.
        qkv_bias (bool): Defaults to True.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 window_size: int = 7,
                 shift: bool = False,
                 pad_small_map: bool = False,
                 qkv_bias: bool = True) -> None:
        super().__init__()
        if embed_dims % num_heads:
            raise ValueError(f'num_heads={num_heads} does not divide '
                             f'embed_dims={embed_dims}')
        self.num_heads = num_heads
        self.window_size = window_size
        self.shift_size = window_size // 2 if shift else 0
        self.pad_small_map = pad_small_map
        self.scale = (embed_dims // num_heads)**-0.5
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size - 1)**2, num_heads))
        self.register_buffer(
            'relative_position_index',
            relative_position_index((window_size, window_size)),
            persistent=False)

    def relative_bias(self) -> Tensor:
        """The window's relative bias, ``(heads, n, n)``."""
        n = self.window_size**2
        bias = self.relative_position_bias_table[
            self.relative_position_index.reshape(-1)]
        return bias.reshape(n, n, -1).permute(2, 0, 1)

    def effective_shift(self, hw: Tuple[int, int]) -> int:
        side = min(hw)
        if self.pad_small_map or side > self.window_size:
            return self.shift_size
        if side == self.window_size:
            return 0
        raise ValueError(
            f'a {hw[0]}x{hw[1]} feature map is smaller than '
            f'window_size={self.window_size}: set pad_small_map=True (dense '
            f'tasks), a smaller window_size, or a larger input')

    def forward(self, x: Tensor, hw: Tuple[int, int]) -> Tensor:
        """Args:
            x (Tensor): ``(B, H*W, C)``, the normed tokens (plus the PE).
            hw (tuple[int, int]): ``(H, W)``.
        """
        b, n, c = x.shape
        h, w = hw
        if n != h * w:
            raise ValueError(f'{n} tokens do not fill a {h}x{w} grid')
        ws, shift = self.window_size, self.effective_shift(hw)
        x = pad_grid(x.view(b, h, w, c), ws)
        hp, wp = x.shape[1:3]
        if shift:
            x = torch.roll(x, (-shift, -shift), dims=(1, 2))
        nh, nw = hp // ws, wp // ws
        x = x.view(b, nh, ws, nw, ws, c).permute(0, 1, 3, 2, 4, 5)
        x = x.reshape(b, nh * nw, ws * ws, c)
        heads = self.num_heads
        qkv = self.qkv(x).reshape(b, nh * nw, ws * ws, 3, heads, c // heads)
        q, k, v = qkv.permute(3, 0, 1, 4, 2, 5).unbind(0)  # B, nW, h, n, d
        logits = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_bias()
        if shift:
            mask = shifted_window_mask((hp, wp), ws, shift, x.device)
            bias = bias + mask.to(bias.dtype)[:, None]
        out = (logits + bias).softmax(dim=-1) @ v
        out = self.proj(out.transpose(2, 3).reshape(b, nh * nw, ws * ws, c))
        out = out.view(b, nh, nw, ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        out = out.reshape(b, hp, wp, c)
        if shift:
            out = torch.roll(out, (shift, shift), dims=(1, 2))
        return out[:, :h, :w].reshape(b, n, c)


class SwinBlock(nn.Module):
    """Swin block with a slot for a layer-wise PE.

    ``x' = x + DP(WMSA(norm1(x) + pe.attn))``,
    ``y = x' + DP(MLP(norm2(x')))``. ``pe.attn`` is added before the
    window padding and shift; no logits bias (the window has its own).

    Args:
        embed_dims (int): Channels.
        num_heads (int): Heads.
        window_size (int): Window side.
        shift (bool): Shifted windows.
        mlp_ratio (float): MLP hidden channels / channels. Defaults to 4.
        drop_path_rate (float): Stochastic depth. Defaults to 0.
        pad_small_map (bool): See :class:`WindowAttention`.
        norm_cfg (dict): Norm config. Defaults to LN (eps 1e-5).
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 window_size: int,
                 shift: bool,
                 mlp_ratio: float = 4.,
                 drop_path_rate: float = 0.,
                 pad_small_map: bool = False,
                 norm_cfg: Optional[Dict] = None) -> None:
        super().__init__()
        norm_cfg = norm_cfg or dict(type='LN')
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = WindowAttention(embed_dims, num_heads, window_size, shift,
                                    pad_small_map)
        self.drop_path = (
            DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity())
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.mlp = Mlp(embed_dims, int(embed_dims * mlp_ratio))

    def forward(self,
                x: Tensor,
                hw: Optional[Tuple[int, int]] = None,
                pe: Optional[LayerPE] = None) -> Tensor:
        """Args:
            x (Tensor): Tokens ``(B, H*W, C)``.
            hw (tuple[int, int]): The grid ``(H, W)`` (needed).
            pe (LayerPE, optional): This layer's PE (``attn`` only).
        """
        if hw is None:
            raise ValueError('a Swin block needs the patch grid hw')
        pe = pe or LayerPE()
        attn_pos = pe.attn
        if pe.bias is not None or pe.qk is not None:
            raise ValueError('a Swin block takes no PE logits bias or q/k '
                             'map (its window relative bias is its own)')
        h = self.norm1(x)
        if attn_pos is not None:
            h = add_attn_pe(h, attn_pos)
        x = x + self.drop_path(self.attn(h, hw))
        return x + self.drop_path(self.mlp(self.norm2(x)))
