"""ViT-Adapter's modules: spatial prior, injector, extractor.

References:
    Chen et al., "Vision Transformer Adapter for Dense Predictions", ICLR
    2023, and its official code (the modules, their initialisation and the
    deformable-attention semantics: no residual or dropout inside the
    attention, ``deform_ratio`` as the value-projection ratio).
"""
from typing import List, Sequence, Tuple

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmcv.ops import MultiScaleDeformableAttention
from mmcv.ops import multi_scale_deform_attn as msda
from torch import Tensor

from .weight_init import init_generic_weights

__all__ = [
    'DeformAttn', 'ConvFFN', 'Injector', 'Extractor', 'InteractionBlock',
    'SpatialPriorModule', 'deform_inputs', 'init_adapter_weights',
    'reset_deformable_attention'
]

Shapes = Sequence[Tuple[int, int]]


def _reference_points(shapes: Shapes, device) -> Tensor:
    """Pixel-centre reference points of every level, normalised to [0, 1],
    shape ``(1, sum(H*W), 1, 2)`` in (x, y) order."""
    points = []
    for h, w in shapes:
        ys, xs = torch.meshgrid(
            torch.linspace(0.5, h - 0.5, h, device=device) / h,
            torch.linspace(0.5, w - 0.5, w, device=device) / w,
            indexing='ij')
        points.append(torch.stack([xs.reshape(-1), ys.reshape(-1)], -1))
    return torch.cat(points, 0)[None, :, None]


def _level_starts(shapes: Tensor) -> Tensor:
    return torch.cat([shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]])


def deform_inputs(h: int, w: int, device) -> Tuple[List, List]:
    """Sampling inputs of the injector (ViT tokens query the 1/8, 1/16,
    1/32 spatial features) and of the extractor (the spatial features
    query the 1/16 ViT tokens), for an ``h x w`` image."""
    pyramid = [(h // 8, w // 8), (h // 16, w // 16), (h // 32, w // 32)]
    vit = [(h // 16, w // 16)]
    shapes3 = torch.as_tensor(pyramid, dtype=torch.long, device=device)
    shapes1 = torch.as_tensor(vit, dtype=torch.long, device=device)
    inj = [_reference_points(vit, device), shapes3, _level_starts(shapes3)]
    ext = [_reference_points(pyramid, device), shapes1, _level_starts(shapes1)]
    return inj, ext


def _maybe_checkpoint(fn, enabled: bool, query: Tensor,
                      feat: Tensor) -> Tensor:
    """``fn(query, feat)``, gradient-checkpointed when enabled and training
    needs gradients."""
    if enabled and query.requires_grad:
        return cp.checkpoint(fn, query, feat, use_reentrant=False)
    return fn(query, feat)


class DeformAttn(MultiScaleDeformableAttention):
    """mmcv's multi-scale deformable attention with ViT-Adapter semantics.

    Returns ``out``, not mmcv's ``dropout(out) + identity``: the residual
    belongs to the caller. The sampling runs in float32 with autocast off
    (the kernel takes no bfloat16); the projections run in the autocast
    dtype.

    Args:
        embed_dims (int): Channels.
        num_heads (int): Heads.
        num_levels (int): Feature levels.
        num_points (int): Sampling points per head and level.
        deform_ratio (float): Value projection ratio.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 num_levels: int,
                 num_points: int,
                 deform_ratio: float = 1.0) -> None:
        super().__init__(
            embed_dims=embed_dims,
            num_heads=num_heads,
            num_levels=num_levels,
            num_points=num_points,
            dropout=0.,
            batch_first=True,
            value_proj_ratio=deform_ratio)
        self.dropout = nn.Identity()

    def forward(self, query: Tensor, reference_points: Tensor, feat: Tensor,
                spatial_shapes: Tensor, level_start_index: Tensor) -> Tensor:
        """Sample ``feat`` around ``reference_points`` (normalised (x, y),
        ``(B, Q, 1 or levels, 2)``) for each of the ``B x Q`` queries."""
        b, q, _ = query.shape
        heads, levels, points = (self.num_heads, self.num_levels,
                                 self.num_points)
        value = self.value_proj(feat).view(b, feat.shape[1], heads, -1)
        offsets = self.sampling_offsets(query).view(b, q, heads, levels,
                                                    points, 2)
        weights = self.attention_weights(query).view(
            b, q, heads,
            levels * points).softmax(-1).view(b, q, heads, levels, points)
        # offsets are in pixels of each level: (x, y) over (W, H)
        size = spatial_shapes.flip(-1)[None, None, None, :, None, :]
        where = reference_points[:, :, None, :, None, :] + offsets / size
        with torch.autocast(value.device.type, enabled=False):
            out = _sample(value.float(), spatial_shapes, level_start_index,
                          where.float(), weights.float(), self.im2col_step)
        return self.output_proj(out.to(value.dtype))


def _sample(value: Tensor, shapes: Tensor, starts: Tensor, where: Tensor,
            weights: Tensor, im2col_step: int) -> Tensor:
    """mmcv's deformable sampling: its CUDA Function on GPU, its PyTorch
    implementation elsewhere (looked up when called)."""
    if value.is_cuda:
        return msda.MultiScaleDeformableAttnFunction.apply(
            value, shapes, starts, where, weights, im2col_step)
    return msda.multi_scale_deformable_attn_pytorch(value, shapes, where,
                                                    weights)


class DWConv(nn.Module):
    """Depth-wise 3x3 convolution over the three pyramid levels of the
    flattened 1/8, 1/16, 1/32 tokens."""

    def __init__(self, dims: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dims, dims, 3, 1, 1, groups=dims)

    def forward(self, x: Tensor, shapes: Shapes) -> Tensor:
        b, _, c = x.shape
        outs, start = [], 0
        for h, w in shapes:
            level = x[:, start:start + h * w].transpose(1, 2)
            level = self.dwconv(level.reshape(b, c, h, w))
            outs.append(level.flatten(2).transpose(1, 2))
            start += h * w
        return torch.cat(outs, dim=1)


class ConvFFN(nn.Module):
    """``fc2(drop(act(dwconv(fc1(x)))))``, the extractor's FFN."""

    def __init__(self, dims: int, hidden: int, drop: float = 0.) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dims, hidden)
        self.dwconv = DWConv(hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dims)
        self.drop = nn.Dropout(drop)

    def forward(self, x: Tensor, shapes: Shapes) -> Tensor:
        x = self.drop(self.act(self.dwconv(self.fc1(x), shapes)))
        return self.drop(self.fc2(x))


class Injector(nn.Module):
    """Spatial features into the ViT tokens:
    ``x + gamma * attn(LN(x), LN(c))``."""

    def __init__(self,
                 dims: int,
                 num_heads: int,
                 num_points: int,
                 deform_ratio: float,
                 init_values: float,
                 norm_cfg: dict,
                 with_cp: bool = False) -> None:
        super().__init__()
        self.with_cp = with_cp
        self.query_norm = build_norm_layer(norm_cfg, dims)[1]
        self.feat_norm = build_norm_layer(norm_cfg, dims)[1]
        self.attn = DeformAttn(dims, num_heads, 3, num_points, deform_ratio)
        self.gamma = nn.Parameter(init_values * torch.ones(dims))

    def forward(self, query: Tensor, feat: Tensor, inputs: List) -> Tensor:

        def inner(query, feat):
            attn = self.attn(
                self.query_norm(query), inputs[0], self.feat_norm(feat),
                inputs[1], inputs[2])
            return query + self.gamma * attn

        return _maybe_checkpoint(inner, self.with_cp, query, feat)


class Extractor(nn.Module):
    """ViT tokens into the spatial features:
    ``c + attn(LN(c), LN(x))``, then ``c + DP(ConvFFN(LN(c)))``."""

    def __init__(self,
                 dims: int,
                 num_heads: int,
                 num_points: int,
                 deform_ratio: float,
                 with_cffn: bool,
                 cffn_ratio: float,
                 drop: float,
                 drop_path: float,
                 norm_cfg: dict,
                 with_cp: bool = False) -> None:
        super().__init__()
        self.with_cp = with_cp
        self.query_norm = build_norm_layer(norm_cfg, dims)[1]
        self.feat_norm = build_norm_layer(norm_cfg, dims)[1]
        self.attn = DeformAttn(dims, num_heads, 1, num_points, deform_ratio)
        self.with_cffn = with_cffn
        if with_cffn:
            self.ffn = ConvFFN(dims, int(dims * cffn_ratio), drop)
            self.ffn_norm = build_norm_layer(norm_cfg, dims)[1]
            self.drop_path = (
                DropPath(drop_path) if drop_path > 0 else nn.Identity())

    def forward(self, query: Tensor, feat: Tensor, inputs: List,
                shapes: Shapes) -> Tensor:

        def inner(query, feat):
            query = query + self.attn(
                self.query_norm(query), inputs[0], self.feat_norm(feat),
                inputs[1], inputs[2])
            if self.with_cffn:
                query = query + self.drop_path(
                    self.ffn(self.ffn_norm(query), shapes))
            return query

        return _maybe_checkpoint(inner, self.with_cp, query, feat)


class InteractionBlock(nn.Module):
    """An injector, (the ViT blocks, run by the backbone), an extractor and,
    for the last interaction, two extra extractors."""

    def __init__(self,
                 dims: int,
                 num_heads: int,
                 num_points: int,
                 deform_ratio: float,
                 init_values: float,
                 with_cffn: bool,
                 cffn_ratio: float,
                 drop: float,
                 drop_path: float,
                 norm_cfg: dict,
                 extra_extractor: bool,
                 with_cp: bool = False) -> None:
        super().__init__()
        self.injector = Injector(dims, num_heads, num_points, deform_ratio,
                                 init_values, norm_cfg, with_cp)
        ext = dict(
            dims=dims,
            num_heads=num_heads,
            num_points=num_points,
            deform_ratio=deform_ratio,
            with_cffn=with_cffn,
            cffn_ratio=cffn_ratio,
            drop=drop,
            drop_path=drop_path,
            norm_cfg=norm_cfg,
            with_cp=with_cp)
        self.extractor = Extractor(**ext)
        self.extra_extractors = (
            nn.ModuleList([Extractor(**ext)
                           for _ in range(2)]) if extra_extractor else None)

    def extract(self, c: Tensor, x: Tensor, inputs: List,
                shapes: Shapes) -> Tensor:
        c = self.extractor(c, x, inputs, shapes)
        for extractor in self.extra_extractors or []:
            c = extractor(c, x, inputs, shapes)
        return c


class SpatialPriorModule(nn.Module):
    """A convolutional stem giving 1/4, 1/8, 1/16, 1/32 features projected
    to the ViT width (``c1`` as a map, ``c2..c4`` as token sequences).

    Args:
        inplanes (int): Width of the stem.
        embed_dims (int): ViT width.
        norm_cfg (dict): Norm of the convolutions (SyncBN in the GPU
            configs; BN/GN work too).
    """

    def __init__(self, inplanes: int, embed_dims: int, norm_cfg: dict) -> None:
        super().__init__()

        def conv(cin, cout, stride):
            return [
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                build_norm_layer(norm_cfg, cout)[1],
                nn.ReLU(inplace=True)
            ]

        self.stem = nn.Sequential(*conv(3, inplanes, 2),
                                  *conv(inplanes, inplanes, 1),
                                  *conv(inplanes, inplanes, 1),
                                  nn.MaxPool2d(3, 2, 1))
        self.conv2 = nn.Sequential(*conv(inplanes, 2 * inplanes, 2))
        self.conv3 = nn.Sequential(*conv(2 * inplanes, 4 * inplanes, 2))
        self.conv4 = nn.Sequential(*conv(4 * inplanes, 4 * inplanes, 2))
        self.fc1 = nn.Conv2d(inplanes, embed_dims, 1)
        self.fc2 = nn.Conv2d(2 * inplanes, embed_dims, 1)
        self.fc3 = nn.Conv2d(4 * inplanes, embed_dims, 1)
        self.fc4 = nn.Conv2d(4 * inplanes, embed_dims, 1)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        c1 = self.stem(x)
        c2 = self.conv2(c1)
        c3 = self.conv3(c2)
        c4 = self.conv4(c3)
        c1 = self.fc1(c1)
        c2, c3, c4 = (fc(c).flatten(2).transpose(1, 2)
                      for fc, c in ((self.fc2, c2), (self.fc3, c3), (self.fc4,
                                                                     c4)))
        return c1, c2, c3, c4


def reset_deformable_attention(module: nn.Module) -> None:
    """Give every :class:`DeformAttn` under ``module`` its starting values
    (mmcv's ``init_weights``, as ViT-Adapter's ``_reset_parameters``)."""
    for m in module.modules():
        if isinstance(m, DeformAttn):
            m.init_weights()


def init_adapter_weights(module: nn.Module) -> None:
    """ViT-Adapter's initialisation of its own (non-ViT) modules.

    The official order: :func:`~.weight_init.init_generic_weights` over
    every layer, then :func:`reset_deformable_attention` (last, or the
    generic pass would overwrite its linear children).

    Args:
        module (nn.Module): The adapter module to initialise (spatial prior
            module, interactions, up-sampling, output norms).
    """
    init_generic_weights(module, conv_fan_out=True)
    reset_deformable_attention(module)
