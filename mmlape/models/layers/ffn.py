"""Feed-forward networks of the encoder block: ``MLP`` (ViT/DeiT) and
``LeFF``, the Locally-enhanced Feed-Forward of CeiT (Wu et al., ICCV 2021;
coeusguo/ceit).

An FFN takes the normalised tokens ``(B, N, C)`` and the patch grid ``hw``;
tokens before the ``h * w`` patch tokens (a class token) are extra.
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_norm_layer
from torch import Tensor

from mmlape.registry import FFNS

__all__ = ['Mlp', 'LeFF']


@FFNS.register_module(name='MLP')
class Mlp(nn.Module):
    """Two linear layers with GELU in between (``fc1``, ``fc2``).

    Args:
        embed_dims (int): Channels ``C``.
        feedforward_channels (int): Hidden channels.
        drop_rate (float): Dropout after the activation and after ``fc2``.
            Defaults to 0.
        act_cfg (dict, optional): The activation (mmcv's
            ``build_activation_layer``). Defaults to GELU.

    Example:
        >>> Mlp(64, 128)(torch.randn(2, 17, 64)).shape
        torch.Size([2, 17, 64])
    """

    def __init__(self,
                 embed_dims: int,
                 feedforward_channels: int,
                 drop_rate: float = 0.,
                 act_cfg: Optional[Dict] = None) -> None:
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, feedforward_channels)
        self.act = (
            nn.GELU() if act_cfg is None else build_activation_layer(act_cfg))
        self.fc2 = nn.Linear(feedforward_channels, embed_dims)
        self.drop = nn.Dropout(drop_rate)

    def forward(self,
                x: Tensor,
                hw: Optional[Tuple[int, int]] = None) -> Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


@FFNS.register_module(name='LeFF')
class LeFF(nn.Module):
    """CeiT's Locally-enhanced Feed-Forward.

    On the patch tokens as a ``(B, C, h, w)`` map:
    ``bn3(conv3(GELU(bn2(dwconv(GELU(bn1(conv1(x))))))))``; ``conv1`` and
    ``conv3`` are 1x1 convolutions (``C -> F -> C``), ``conv2`` a depth-wise
    ``kernel_size`` convolution. Extra tokens (the class token) are returned
    as they came in, so the block's residual adds the normalised class token
    to itself, as the official code does.

    Args:
        embed_dims (int): Channels ``C``.
        feedforward_channels (int): Hidden channels ``F``.
        kernel_size (int): Depth-wise kernel. Defaults to 3.
        with_bn (bool): BatchNorm after each convolution. Defaults to True.
        norm_cfg (dict): Defaults to ``dict(type='BN')``.

    Example:
        >>> leff = LeFF(64, 128)
        >>> leff(torch.randn(2, 1 + 16, 64), (4, 4)).shape
        torch.Size([2, 17, 64])
    """

    def __init__(self,
                 embed_dims: int,
                 feedforward_channels: int,
                 kernel_size: int = 3,
                 with_bn: bool = True,
                 norm_cfg: Optional[Dict] = None) -> None:
        super().__init__()
        norm_cfg = norm_cfg or dict(type='BN')
        hidden = feedforward_channels
        self.conv1 = nn.Conv2d(embed_dims, hidden, 1)
        self.conv2 = nn.Conv2d(
            hidden,
            hidden,
            kernel_size,
            padding=(kernel_size - 1) // 2,
            groups=hidden)
        self.conv3 = nn.Conv2d(hidden, embed_dims, 1)
        self.act = nn.GELU()
        self.with_bn = with_bn
        if with_bn:
            self.bn1 = build_norm_layer(norm_cfg, hidden)[1]
            self.bn2 = build_norm_layer(norm_cfg, hidden)[1]
            self.bn3 = build_norm_layer(norm_cfg, embed_dims)[1]
        else:
            self.bn1 = self.bn2 = self.bn3 = nn.Identity()

    def forward(self, x: Tensor, hw: Tuple[int, int]) -> Tensor:
        b, n, c = x.shape
        h, w = hw
        extra = n - h * w
        if extra < 0:
            raise ValueError(f'LeFF got {n} tokens for a {h}x{w} grid')
        patches = x[:, extra:].transpose(1, 2).reshape(b, c, h, w)
        y = self.act(self.bn1(self.conv1(patches)))
        y = self.act(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y)).flatten(2).transpose(1, 2)
        if extra:
            y = torch.cat([x[:, :extra], y], dim=1)
        return y
