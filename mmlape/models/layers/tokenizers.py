"""Tokenizers: how an image becomes the token grid of the ViT.

Every tokenizer maps ``(B, 3, H, W)`` to ``(tokens (B, N, C), (h, w))`` and
gives its output grid for an input size (``out_grid``), the PE grid.

References:
    ``Patch``: ViT/DeiT and ViT-Lite (Hassani et al., 2021). ``T2T``: Yuan
    et al., ICCV 2021 (yitu-opensource/T2T-ViT). ``I2T``: CeiT (Wu et al.,
    ICCV 2021). ``Conv``: CCT (Hassani et al., 2021).
"""
import math
from typing import Dict, Literal, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_activation_layer, build_norm_layer
from torch import Tensor

from mmlape.registry import TOKENIZERS

__all__ = [
    'PatchEmbed', 'T2TTokenizer', 'PerformerTokenLayer',
    'TransformerTokenLayer', 'I2TTokenizer', 'ConvTokenizer', 'conv_out',
    'tokens_to_map'
]

Grid = Tuple[int, int]


def tokens_to_map(x: Tensor, hw: Sequence[int]) -> Tensor:
    """Patch tokens ``(B, H*W, C)`` as a contiguous ``(B, C, H, W)`` map
    (the channels-last view is misread by mmcv's CPU ``RoIAlign`` and
    gives batch norm wrong gradients for a batch of one)."""
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *hw).contiguous()


def conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output length of a convolution, unfold or pool along one axis."""
    return (size + 2 * padding - kernel) // stride + 1


def _check_grid(name: str, img_hw: Sequence[int], grid: Grid) -> Grid:
    if grid[0] < 1 or grid[1] < 1:
        raise ValueError(f'tokenizer {name} turns a {img_hw[0]}x{img_hw[1]} '
                         f'image into an empty {grid[0]}x{grid[1]} grid')
    return grid


@TOKENIZERS.register_module(name='Patch')
class PatchEmbed(nn.Module):
    """Patches through a strided convolution (``proj``), optionally padded
    and normalised.

    Args:
        in_channels (int): Image channels.
        embed_dims (int): Channels ``C``.
        patch_size (int): Kernel side of the projection. Defaults to 16.
        bias (bool): Bias of the projection. Defaults to True.
        weight_init (str): ``'default'`` (PyTorch's convolution init, as in
            DeiT) or ``'kaiming_normal'`` (ViT-Lite's tokenizer). Defaults
            to ``'default'``.
        stride (int, optional): Stride of the projection. Defaults to
            ``patch_size``.
        padding (str | int, optional): ``'corner'`` zero-pads bottom and
            right until the kernels cover the image, ``'same'`` pads around
            it (mmcv's ``AdaptivePadding``), an int pads the convolution,
            None refuses partial patches. Defaults to ``'corner'``.
        dilation (int): Dilation of the projection. Defaults to 1.
        norm_cfg (dict, optional): A norm of the tokens (``norm``; mmseg's
            ``patch_norm``). Defaults to None.

    Raises:
        ValueError: With ``padding=None``, when the image is not a whole
            number of patches.

    Example:
        >>> embed = PatchEmbed(3, 64, patch_size=8)
        >>> tokens, hw = embed(torch.randn(2, 3, 32, 44))
        >>> tokens.shape, hw
        (torch.Size([2, 24, 64]), (4, 6))
    """
    WEIGHT_INITS = ('default', 'kaiming_normal')
    PADDINGS = ('corner', 'same')

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 patch_size: int = 16,
                 bias: bool = True,
                 weight_init: Literal['default', 'kaiming_normal'] = 'default',
                 stride: Optional[int] = None,
                 padding: Union[None, str, int] = 'corner',
                 dilation: int = 1,
                 norm_cfg: Optional[Dict] = None) -> None:
        super().__init__()
        if weight_init not in self.WEIGHT_INITS:
            raise ValueError(f'tokenizer.weight_init={weight_init!r}; choose '
                             f'one of {list(self.WEIGHT_INITS)}')
        stride = patch_size if stride is None else stride
        for name, value in (('patch_size', patch_size), ('stride', stride),
                            ('dilation', dilation)):
            if not isinstance(value, int) or isinstance(value, bool) or \
                    value < 1:
                raise ValueError(f'tokenizer.{name}={value!r} must be a '
                                 f'positive int')
        if isinstance(padding, str) and padding not in self.PADDINGS or \
                isinstance(padding, (bool, float)):
            raise ValueError(f'tokenizer.padding={padding!r}; choose one of '
                             f'{list(self.PADDINGS)}, an int or None')
        self.patch_size = patch_size
        self.stride = stride
        self.dilation = dilation
        self.padding = padding
        self.weight_init = weight_init
        self.proj = nn.Conv2d(
            in_channels,
            embed_dims,
            kernel_size=patch_size,
            stride=stride,
            padding=padding if isinstance(padding, int) else 0,
            dilation=dilation,
            bias=bias)
        if norm_cfg is not None:
            self.norm = build_norm_layer(norm_cfg, embed_dims)[1]
        else:
            self.norm = None

    def init_part_weights(self) -> None:
        if self.weight_init == 'kaiming_normal':
            nn.init.kaiming_normal_(self.proj.weight)

    def adaptive_pad(self, size: int) -> int:
        """Pixels ``'corner'``/``'same'`` add along an axis of ``size``
        so that the kernels cover it."""
        span = (self.patch_size - 1) * self.dilation + 1
        steps = -(-size // self.stride)
        return max((steps - 1) * self.stride + span - size, 0)

    def out_grid(self, img_hw: Sequence[int]) -> Grid:
        h, w = (int(n) for n in img_hw)
        p, s = self.patch_size, self.stride
        if self.padding is None and (p != s or self.dilation != 1):
            raise ValueError('tokenizer.padding=None needs stride == '
                             'patch_size and dilation 1')
        if self.padding is None and (h % p or w % p):
            raise ValueError(
                f'input of {h}x{w} pixels is not divisible by patch_size={p}:'
                f' pad or resize it to a multiple of {p} (e.g. '
                f'size_divisor={p} in the data preprocessor)')
        pad = self.padding if isinstance(self.padding, int) else 0
        span = (p - 1) * self.dilation + 1
        grid = tuple(
            conv_out(
                n +
                (self.adaptive_pad(n) if isinstance(self.padding, str) else 0),
                span, s, pad) for n in (h, w))
        return _check_grid('Patch', (h, w), grid)

    def forward(self, x: Tensor) -> Tuple[Tensor, Grid]:
        if isinstance(self.padding, str):
            pad_h, pad_w = (self.adaptive_pad(n) for n in x.shape[-2:])
            if pad_h or pad_w:
                if self.padding == 'corner':
                    x = F.pad(x, [0, pad_w, 0, pad_h])
                else:
                    x = F.pad(x, [
                        pad_w // 2, pad_w - pad_w // 2, pad_h // 2,
                        pad_h - pad_h // 2
                    ])
        elif self.padding is None:
            self.out_grid(x.shape[-2:])
        x = self.proj(x)
        hw = (x.shape[2], x.shape[3])
        x = x.flatten(2).transpose(1, 2)
        if self.norm is not None:
            x = self.norm(x)
        return x, hw


class TokenMlp(nn.Module):
    """``fc2(GELU(fc1(x)))`` with dropout after ``fc2`` (the T2T token
    layers' MLP)."""

    def __init__(self, dims: int, hidden_dims: int, drop: float = 0.) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dims, hidden_dims)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dims, dims)
        self.drop = nn.Dropout(drop)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.act(self.fc1(x))))


class PerformerTokenLayer(nn.Module):
    """T2T's token layer with Performer attention (one head).

    With ``h = norm1(x)``, ``k, q, v = kqv(h)`` (in that order) and the
    positive random features ``phi(u) = exp(u W^T - |u|^2 / 2) / sqrt(m)``
    of a fixed ``W`` (``m = kernel_ratio * dims`` orthogonal rows of norm
    ``sqrt(m)``)::

        y = v + proj(phi(q) (phi(k)^T v) / (phi(q) sum_t phi(k_t) + 1e-8))
        out = y + mlp(norm2(y))

    Args:
        in_dims (int): Input width (e.g. ``3 * 7 * 7``).
        dims (int): Output width (T2T's ``token_dim``).
        kernel_ratio (float): ``m / dims``. Defaults to 0.5.
        drop_rate (float): Dropout after ``proj`` and after the MLP (the
            official code fixes 0.1). Defaults to 0.1.
        norm_cfg (dict): Defaults to LN, eps 1e-5.
    """
    epsilon = 1e-8

    def __init__(self,
                 in_dims: int,
                 dims: int,
                 kernel_ratio: float = 0.5,
                 drop_rate: float = 0.1,
                 norm_cfg: Optional[Dict] = None) -> None:
        super().__init__()
        norm_cfg = norm_cfg or dict(type='LN', eps=1e-5)
        self.dims = dims
        self.num_features = int(dims * kernel_ratio)
        if self.num_features < 1:
            raise ValueError(f'tokenizer.kernel_ratio={kernel_ratio} leaves '
                             f'no random features for {dims} dims')
        self.norm1 = build_norm_layer(norm_cfg, in_dims)[1]
        self.kqv = nn.Linear(in_dims, 3 * dims)
        self.proj = nn.Linear(dims, dims)
        self.drop = nn.Dropout(drop_rate)
        self.norm2 = build_norm_layer(norm_cfg, dims)[1]
        self.mlp = TokenMlp(dims, dims, drop_rate)
        # Fixed random features: saved with the weights, never trained.
        self.register_buffer('w', torch.empty(self.num_features, dims))
        self.init_part_weights()

    def init_part_weights(self) -> None:
        nn.init.orthogonal_(self.w)
        self.w.mul_(math.sqrt(self.num_features))

    def _features(self, u: Tensor) -> Tensor:
        sq = (u * u).sum(dim=-1, keepdim=True) / 2
        return torch.exp(u @ self.w.T - sq) / math.sqrt(self.num_features)

    def forward(self, x: Tensor) -> Tensor:
        k, q, v = self.kqv(self.norm1(x)).split(self.dims, dim=-1)
        kp, qp = self._features(k), self._features(q)  # (B, T, m)
        denom = qp @ kp.sum(dim=1).unsqueeze(-1)  # (B, T, 1)
        y = (qp @ (kp.transpose(1, 2) @ v)) / (denom + self.epsilon)
        y = v + self.drop(self.proj(y))
        return y + self.mlp(self.norm2(y))


class TransformerTokenLayer(nn.Module):
    """T2T's token layer with softmax attention (T2T-ViT_t).

    ``y = v + proj(softmax(q k^T * s) v)``, ``out = y + mlp(norm2(y))``
    with ``q, k, v = qkv(norm1(x))``, no qkv bias, and the official scale
    ``s = (in_dims // num_heads) ** -0.5`` unless ``qk_scale`` is given.

    Args:
        in_dims (int): Input width.
        dims (int): Output width.
        num_heads (int): Defaults to 1.
        mlp_ratio (float): Defaults to 1.
        qk_scale (float, optional): Defaults to None (the official scale).
        drop_rate (float): Dropout after ``proj`` and after the MLP.
            Defaults to 0.
        norm_cfg (dict): Defaults to LN, eps 1e-5.
    """

    def __init__(self,
                 in_dims: int,
                 dims: int,
                 num_heads: int = 1,
                 mlp_ratio: float = 1.,
                 qk_scale: Optional[float] = None,
                 drop_rate: float = 0.,
                 norm_cfg: Optional[Dict] = None) -> None:
        super().__init__()
        if num_heads != 1:
            raise ValueError('the value shortcut of a T2T token layer needs '
                             f'one head, got num_heads={num_heads}')
        norm_cfg = norm_cfg or dict(type='LN', eps=1e-5)
        self.dims = dims
        self.scale = qk_scale or (in_dims // num_heads)**-0.5
        self.norm1 = build_norm_layer(norm_cfg, in_dims)[1]
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(in_dims, 3 * dims, bias=False)
        self.attn.proj = nn.Linear(dims, dims)
        self.drop = nn.Dropout(drop_rate)
        self.norm2 = build_norm_layer(norm_cfg, dims)[1]
        self.mlp = TokenMlp(dims, int(dims * mlp_ratio), drop_rate)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.attn.qkv(self.norm1(x)).split(self.dims, dim=-1)
        y = F.scaled_dot_product_attention(
            q[:, None], k[:, None], v[:, None], scale=self.scale)[:, 0]
        y = v + self.drop(self.attn.proj(y))
        return y + self.mlp(self.norm2(y))


@TOKENIZERS.register_module(name='T2T')
class T2TTokenizer(nn.Module):
    """Tokens-to-Token: soft splits with token layers in between.

    ``unfold(7, 4, 2)`` -> token layer -> re-structurise to the grid ->
    ``unfold(3, 2, 1)`` -> token layer -> re-structurise ->
    ``unfold(3, 2, 1)`` -> ``project`` (linear to ``C``). A 224x224 image
    gives a 14x14 grid (stride 16).

    Args:
        in_channels (int): Image channels.
        embed_dims (int): Channels ``C``.
        token_dims (int): Width of the token layers. Defaults to 64.
        attention (str): ``'performer'`` (T2T-ViT-7/10/12/14/19/24) or
            ``'transformer'`` (T2T-ViT_t). Defaults to ``'performer'``.
        kernel_ratio (float): Performer features per dim. Defaults to 0.5.
        drop_rate (float, optional): Dropout inside the token layers.
            Defaults to None (the official 0.1 Performer, 0 Transformer).
        qk_scale (float, optional): Scale of the Transformer token layers.
            Defaults to None (the official ``in_dims ** -0.5``, not
            mmpretrain's ``token_dims ** -0.5``).
        norm_cfg (dict): Norms of the token layers. Defaults to LN, eps
            1e-5.

    Example:
        >>> t2t = T2TTokenizer(3, 64, token_dims=16)
        >>> tokens, hw = t2t(torch.randn(1, 3, 64, 48))
        >>> tokens.shape, hw
        (torch.Size([1, 12, 64]), (4, 3))
    """
    ATTENTIONS = ('performer', 'transformer')
    SPLITS = ((7, 4, 2), (3, 2, 1), (3, 2, 1))  # kernel, stride, padding

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 token_dims: int = 64,
                 attention: Literal['performer', 'transformer'] = 'performer',
                 kernel_ratio: float = 0.5,
                 drop_rate: Optional[float] = None,
                 qk_scale: Optional[float] = None,
                 norm_cfg: Optional[Dict] = None) -> None:
        super().__init__()
        if attention not in self.ATTENTIONS:
            raise ValueError(f'tokenizer.attention={attention!r}; choose one '
                             f'of {list(self.ATTENTIONS)}')
        self.attention = attention
        self.stride = 16
        norm_cfg = norm_cfg or dict(type='LN', eps=1e-5)
        in_dims = [in_channels * 7 * 7, token_dims * 3 * 3]
        for i, dims in enumerate(in_dims, start=1):
            if attention == 'performer':
                layer = PerformerTokenLayer(
                    dims,
                    token_dims,
                    kernel_ratio=kernel_ratio,
                    drop_rate=0.1 if drop_rate is None else drop_rate,
                    norm_cfg=norm_cfg)
            else:
                if kernel_ratio != 0.5:
                    raise ValueError('tokenizer.kernel_ratio applies to '
                                     "attention='performer' only")
                layer = TransformerTokenLayer(
                    dims,
                    token_dims,
                    qk_scale=qk_scale,
                    drop_rate=drop_rate or 0.,
                    norm_cfg=norm_cfg)
            setattr(self, f'attention{i}', layer)
        self.project = nn.Linear(token_dims * 3 * 3, embed_dims)

    def out_grid(self, img_hw: Sequence[int]) -> Grid:
        grid = tuple(int(s) for s in img_hw)
        for k, s, p in self.SPLITS:
            grid = tuple(conv_out(n, k, s, p) for n in grid)
        return _check_grid('T2T', img_hw, grid)

    def forward(self, x: Tensor) -> Tuple[Tensor, Grid]:
        hw = tuple(x.shape[-2:])
        for i, (k, s, p) in enumerate(self.SPLITS):
            if i:
                x = x.transpose(1, 2).reshape(x.shape[0], -1, *hw)
            x = F.unfold(x, k, padding=p, stride=s).transpose(1, 2)
            hw = tuple(conv_out(n, k, s, p) for n in hw)
            if i < 2:
                x = getattr(self, f'attention{i + 1}')(x)
        return self.project(x), hw


@TOKENIZERS.register_module(name='I2T')
class I2TTokenizer(nn.Module):
    """CeiT's Image-to-Tokens: conv, BatchNorm, max-pool, then patches.

    ``proj(maxpool(bn(conv(x))))`` with ``conv`` 7x7/2 (no bias, no
    activation), ``maxpool`` 3x3/2 and ``proj`` a ``patch_size`` convolution
    to ``C``: stride ``4 * patch_size`` in all (16 for CeiT).

    Args:
        in_channels (int): Image channels.
        embed_dims (int): Channels ``C``.
        conv_channels (int): Channels of the stem. Defaults to 64.
        kernel_size (int): Stem kernel. Defaults to 7.
        stride (int): Stem stride. Defaults to 2.
        patch_size (int): Patch side on the stem's feature map.
            Defaults to 4.
        norm_cfg (dict): Stem norm. Defaults to ``dict(type='BN')``.

    Example:
        >>> i2t = I2TTokenizer(3, 64)
        >>> i2t(torch.randn(1, 3, 64, 64))[0].shape
        torch.Size([1, 16, 64])
    """

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 conv_channels: int = 64,
                 kernel_size: int = 7,
                 stride: int = 2,
                 patch_size: int = 4,
                 norm_cfg: Optional[Dict] = None) -> None:
        super().__init__()
        norm_cfg = norm_cfg or dict(type='BN')
        self.conv = nn.Conv2d(
            in_channels,
            conv_channels,
            kernel_size,
            stride=stride,
            padding=kernel_size // 2,
            bias=False)
        self.bn = build_norm_layer(norm_cfg, conv_channels)[1]
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.proj = nn.Conv2d(
            conv_channels, embed_dims, patch_size, stride=patch_size)
        self.stride = stride * 2 * patch_size

    def out_grid(self, img_hw: Sequence[int]) -> Grid:
        k, s = self.conv.kernel_size[0], self.conv.stride[0]
        p = self.proj.stride[0]
        grid = tuple(
            conv_out(conv_out(int(n), k, s, k // 2), 3, 2, 1) // p
            for n in img_hw)
        return _check_grid('I2T', img_hw, grid)

    def forward(self, x: Tensor) -> Tuple[Tensor, Grid]:
        x = self.proj(self.pool(self.bn(self.conv(x))))
        hw = (x.shape[2], x.shape[3])
        return x.flatten(2).transpose(1, 2), hw


class _ConvStage(nn.Module):
    """One stage of the CCT tokenizer: conv, activation, max-pool."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int,
                 stride: int, padding: int, bias: bool,
                 act_cfg: Optional[Dict], pool: Optional[Tuple[int, int,
                                                               int]]) -> None:
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size,
            stride=stride,
            padding=padding,
            bias=bias)
        self.act = (
            build_activation_layer(act_cfg) if act_cfg else nn.Identity())
        self.pool = nn.MaxPool2d(*pool) if pool else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.pool(self.act(self.conv(x)))


@TOKENIZERS.register_module(name='Conv')
class ConvTokenizer(nn.Module):
    """CCT's convolutional tokenizer.

    ``num_layers`` stages of ``maxpool(ReLU(conv(x)))``; the last stage has
    ``C`` channels, the others ``mid_channels``. CCT-7/3x1: one 3x3/1 stage
    (padding 1, no bias) and a 3x3/2 max-pool, so 32x32 gives 16x16 tokens.
    The convolutions start Kaiming-normal, as in the official code.

    Args:
        in_channels (int): Image channels.
        embed_dims (int): Channels ``C``.
        num_layers (int): Conv stages. Defaults to 1.
        kernel_size (int): Defaults to 3.
        stride (int, optional): Defaults to ``max(1, kernel_size // 2 - 1)``.
        padding (int, optional): Defaults to ``max(1, kernel_size // 2)``.
        mid_channels (int): Channels between stages. Defaults to 64.
        bias (bool): Defaults to False.
        act_cfg (dict, optional): Defaults to ``dict(type='ReLU')``; None
            for none.
        max_pool (bool): Pool after each stage. Defaults to True.
        pool_kernel (int): Defaults to 3.
        pool_stride (int): Defaults to 2.
        pool_padding (int): Defaults to 1.

    Example:
        >>> conv = ConvTokenizer(3, 64)
        >>> conv(torch.randn(1, 3, 32, 32))[0].shape
        torch.Size([1, 256, 64])
    """

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 num_layers: int = 1,
                 kernel_size: int = 3,
                 stride: Optional[int] = None,
                 padding: Optional[int] = None,
                 mid_channels: int = 64,
                 bias: bool = False,
                 act_cfg: Optional[Dict] = dict(type='ReLU'),
                 max_pool: bool = True,
                 pool_kernel: int = 3,
                 pool_stride: int = 2,
                 pool_padding: int = 1) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f'tokenizer.num_layers={num_layers}; it must be '
                             f'>= 1')
        stride = max(1, kernel_size // 2 - 1) if stride is None else stride
        padding = max(1, kernel_size // 2) if padding is None else padding
        self.geometry = (kernel_size, stride, padding)
        self.pool_geometry = ((pool_kernel, pool_stride,
                               pool_padding) if max_pool else None)
        channels = [in_channels
                    ] + [mid_channels] * (num_layers - 1) + [embed_dims]
        self.layers = nn.ModuleList(
            _ConvStage(channels[i], channels[i + 1], kernel_size, stride,
                       padding, bias, act_cfg, self.pool_geometry)
            for i in range(num_layers))
        self.stride = (stride * (pool_stride if max_pool else 1))**num_layers

    def init_part_weights(self) -> None:
        for layer in self.layers:
            nn.init.kaiming_normal_(layer.conv.weight)

    def out_grid(self, img_hw: Sequence[int]) -> Grid:
        grid = tuple(int(n) for n in img_hw)
        for _ in self.layers:
            grid = tuple(conv_out(n, *self.geometry) for n in grid)
            if self.pool_geometry:
                grid = tuple(conv_out(n, *self.pool_geometry) for n in grid)
        return _check_grid('Conv', img_hw, grid)

    def forward(self, x: Tensor) -> Tuple[Tensor, Grid]:
        for layer in self.layers:
            x = layer(x)
        hw = (x.shape[2], x.shape[3])
        return x.flatten(2).transpose(1, 2), hw
