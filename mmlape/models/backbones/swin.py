"""Swin Transformer with pluggable PE joins.

References:
    Liu et al., "Swin Transformer", ICCV 2021, and its official code;
    mmpretrain's ``SwinTransformer`` (arguments, ``pad_small_map``, the
    absolute PE of MPVG's Swin-Ti); LaPE and PVG/MPVG for the joins.

The backbone owns no join logic: it describes its stages to the join and
hands it :meth:`LaPESwin.carry_pe`, which takes a PE across a stage
boundary through that stage's patch merging, as the tokens cross it.
"""
import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from mmcv.cnn import build_norm_layer
from torch import Tensor
from torch.nn.modules.batchnorm import _BatchNorm

from mmlape.registry import register_model
from ..checkpoint import SWIN, SwinSpec
from ..layers.block import SwinBlock, WindowAttention, pad_grid
from ..layers.pe_join import build_pe_join
from ..layers.pe_plan import PEPlan
from ..layers.pos_embed import resize_pos_embed
from ..layers.tokenizers import tokens_to_map
from .base import LaPEBackbone, parse_out_indices
from .swin_arch import (SWIN_ARCH_ZOO, check_patch_cfg, common_window,
                        image_size, parse_swin_arch, stage_settings)

__all__ = ['LaPESwin', 'PatchMerging']

LN = dict(type='LN')


class PatchMerging(nn.Module):
    """Swin's patch merging: 2x2 neighbours concatenated in the official
    order (0, 0), (1, 0), (0, 1), (1, 1), LN, linear; an odd side is
    zero-padded bottom/right first.

    Args:
        in_channels (int): ``C``; the output has ``2C``.
        norm_cfg (dict, optional): Norm over the ``4C`` channels; None for
            none. Defaults to LN.
    """

    def __init__(self,
                 in_channels: int,
                 norm_cfg: Optional[Dict] = LN) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = 2 * in_channels
        self.norm = (
            build_norm_layer(norm_cfg, 4 * in_channels)[1]
            if norm_cfg is not None else nn.Identity())
        self.reduction = nn.Linear(
            4 * in_channels, 2 * in_channels, bias=False)

    def forward(self, x: Tensor,
                hw: Tuple[int, int]) -> Tuple[Tensor, Tuple[int, int]]:
        """``(B, H*W, C)`` to ``(B, ceil(H/2)*ceil(W/2), 2C)``."""
        b, n, c = x.shape
        x = pad_grid(x.view(b, hw[0], hw[1], c), 2)
        h2, w2 = x.shape[1] // 2, x.shape[2] // 2
        # (B, h2, dy, w2, dx, C) -> (B, h2, w2, dx, dy, C): dy varies fastest
        # among the four neighbours, as in the official concatenation.
        x = x.view(b, h2, 2, w2, 2, c).permute(0, 1, 3, 4, 2, 5)
        x = x.reshape(b, h2 * w2, 4 * c)
        return self.reduction(self.norm(x)), (h2, w2)


class SwinStage(nn.Module):
    """A container: the stage's ``blocks`` and its ``downsample`` (patch
    merging into the next stage, or None). The backbone runs them."""

    def __init__(self, blocks: List[SwinBlock],
                 downsample: Optional[PatchMerging]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.downsample = downsample


class SwinPatchEmbed(nn.Module):
    """Patches by a strided convolution (``proj``), then LN (``norm``;
    None for none); partial patches are zero-padded bottom/right."""

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 patch_size: int,
                 norm_cfg: Optional[Dict] = LN) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(
            in_channels, embed_dims, kernel_size=patch_size, stride=patch_size)
        self.norm = (
            build_norm_layer(norm_cfg, embed_dims)[1]
            if norm_cfg is not None else nn.Identity())

    def forward(self, x: Tensor) -> Tuple[Tensor, Tuple[int, int]]:
        p = self.patch_size
        h, w = x.shape[-2:]
        if h % p or w % p:
            x = F.pad(x, (0, (-w) % p, 0, (-h) % p))
        x = self.proj(x)
        hw = (x.shape[2], x.shape[3])
        return self.norm(x.flatten(2).transpose(1, 2)), hw


@register_model()
class LaPESwin(LaPEBackbone):
    """Swin Transformer whose absolute-PE join comes from config.

    mmpretrain 1.2.0's ``SwinTransformer`` signature (same outputs on the
    same weights) plus ``pe_join`` and ``cache_pe_plan``. A join that needs
    a PE turns the stage-1 absolute PE on; PE norms have their stage's
    width (``layers.{s}.blocks.{j}.pe_norm``). No class token; the
    windows' relative bias is kept under every join.

    Args:
        arch (str | dict): ``'t'``/``'tiny'``, ``'s'``/``'small'``,
            ``'b'``/``'base'``, ``'l'``/``'large'`` (any case),
            ``'test-tiny'`` (for tests), or a dict with ``embed_dims``,
            ``depths``, ``num_heads``. Defaults to ``'tiny'``.
        img_size (int | tuple): Pretraining size; sets the PE grid.
            Defaults to 224.
        patch_size (int): Defaults to 4.
        in_channels (int): Defaults to 3.
        window_size (int): Window side of every block (``stage_cfgs`` may
            set it per stage or block). Defaults to 7.
        drop_rate (float): Dropout after the PE. Defaults to 0.
        drop_path_rate (float): Stochastic depth, linear over all blocks.
            Defaults to 0.1.
        out_indices (Sequence[int]): Stages whose (normed) output map is
            returned, ``(B, C_s, H_s, W_s)``. Defaults to ``(3, )``.
        out_after_downsample (bool): Output a stage's map after its patch
            merging (twice the channels, half the grid). Defaults to False.
        use_abs_pos_embed (bool, optional): Own a learnable absolute PE;
            False allows only a join that needs none. Defaults to None
            (the join's ``needs_pe``).
        interpolate_mode (str): How the raw PE is resized to another grid.
            Defaults to ``'bicubic'``.
        with_cp (bool): Gradient checkpointing of blocks. Defaults to False.
        frozen_stages (int): Freeze (no gradient, eval mode) the patch
            embedding and stages ``0..frozen_stages`` with their output
            norms; -1 freezes nothing. Defaults to -1.
        norm_eval (bool): Keep BatchNorm layers in eval mode while training.
            Defaults to False.
        pad_small_map (bool): Pad maps no larger than a window and keep the
            shift (dense tasks). Defaults to False.
        norm_cfg (dict, optional): The output norms ``norm{s}``; None for
            none. Defaults to ``dict(type='LN')``.
        stage_cfgs (dict | Sequence[dict]): mmpretrain's ``stage_cfgs``
            (see :func:`~.swin_arch.stage_settings`); the PE norms take the
            blocks' norm. Defaults to an empty dict.
        patch_cfg (dict): The patch embedding's ``norm_cfg`` (None for
            none); ``kernel_size``/``stride`` may repeat ``patch_size``.
            Defaults to an empty dict.
        mlp_ratio (float): MLP hidden channels over channels (``ffn_ratio``
            of a block config overrides it). Defaults to 4.
        pe_join (dict | str, optional): ``Default``, ``LaPE``, ``PVG`` or
            ``MPVG`` (with their options). Defaults to None (``Default``,
            see ``use_abs_pos_embed``).
        cache_pe_plan (bool): See :class:`LaPEBackbone`. Defaults to True.
        init_cfg (dict, optional): ``dict(type='Pretrained', ...)`` loads
            an mmlape, official or mmpretrain Swin checkpoint. Defaults to
            None.

    Example:
        >>> swin = LaPESwin('test-tiny', img_size=64, window_size=4,
        ...                 pe_join='MPVG', out_indices=(0, 1, 2, 3),
        ...                 pad_small_map=True)
        >>> [tuple(o.shape[1:]) for o in swin(torch.randn(1, 3, 72, 64))]
        [(16, 18, 16), (32, 9, 8), (64, 5, 4), (128, 3, 2)]
    """
    arch_zoo = SWIN_ARCH_ZOO
    checkpoint_family = SWIN
    plan_settings = ('interpolate_mode', )

    def __init__(self,
                 arch: Union[str, Dict] = 'tiny',
                 img_size: Union[int, Sequence[int]] = 224,
                 patch_size: int = 4,
                 in_channels: int = 3,
                 window_size: int = 7,
                 drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 out_indices: Sequence[int] = (3, ),
                 out_after_downsample: bool = False,
                 use_abs_pos_embed: Optional[bool] = None,
                 interpolate_mode: str = 'bicubic',
                 with_cp: bool = False,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 pad_small_map: bool = False,
                 norm_cfg: Optional[Dict] = dict(type='LN'),
                 stage_cfgs: Union[Dict, Sequence[Dict]] = dict(),
                 patch_cfg: Dict = dict(),
                 mlp_ratio: float = 4.,
                 pe_join: Union[None, str, Dict] = None,
                 cache_pe_plan: bool = True,
                 init_cfg: Optional[Dict] = None) -> None:
        super().__init__(cache_pe_plan=cache_pe_plan, init_cfg=init_cfg)
        settings = parse_swin_arch(arch, self.arch_zoo)
        self.arch_settings = settings
        self.embed_dims = settings['embed_dims']
        self.depths = list(settings['depths'])
        self.num_heads = list(settings['num_heads'])
        self.num_stages = len(self.depths)
        self.num_layers = sum(self.depths)
        self.stage_dims = [
            self.embed_dims * 2**s for s in range(self.num_stages)
        ]
        patch_cfg = check_patch_cfg(patch_cfg, patch_size)
        in_channels = patch_cfg.get('in_channels', in_channels)
        img_size = patch_cfg.get('input_size', img_size)
        size = image_size(img_size, patch_size, window_size)
        if frozen_stages < -1 or frozen_stages >= self.num_stages:
            raise ValueError(f'frozen_stages={frozen_stages} must be in '
                             f'[-1, {self.num_stages})')
        self.img_size = size
        self.patch_size = patch_size
        self.grid_size = (size[0] // patch_size, size[1] // patch_size)
        self.interpolate_mode = interpolate_mode
        self.with_cp = with_cp
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.out_after_downsample = out_after_downsample
        self.out_indices = parse_out_indices(out_indices, self.num_stages,
                                             'stages')
        stages, blocks = stage_settings(stage_cfgs, self.depths,
                                        self.stage_dims, window_size,
                                        mlp_ratio, pad_small_map,
                                        drop_path_rate, with_cp)
        self.window_size = common_window(blocks)

        self.pe_join = build_pe_join(
            pe_join,
            num_layers=self.num_layers,
            embed_dims=self.embed_dims,
            with_cls_token=False,
            pe_type='learnable',
            num_patches=self.grid_size[0] * self.grid_size[1],
            norm_cfg=blocks[0]['norm_cfg'],
            stages=list(zip(self.depths, self.stage_dims)))
        join = self.pe_join
        if use_abs_pos_embed is None:
            use_abs_pos_embed = join.needs_pe
        if join.needs_pe and not use_abs_pos_embed:
            raise ValueError(
                f'pe_join.type={join.name!r} needs an absolute PE: set '
                f'use_abs_pos_embed=True (only a join that needs no PE, such '
                f'as Default, runs without one)')
        terms = set(join.attention_terms) - {'attn'}
        if terms:
            raise ValueError(f'pe_join.type={join.name!r} adds '
                             f'{sorted(terms)} to attention; a Swin block '
                             f'takes a PE added to its input only')
        self.use_abs_pos_embed = use_abs_pos_embed

        self.patch_embed = SwinPatchEmbed(
            in_channels, self.embed_dims, patch_size,
            patch_cfg.get('norm_cfg', dict(type='LN')))
        if use_abs_pos_embed:
            self.pos_embed = nn.Parameter(
                torch.zeros(1, self.grid_size[0] * self.grid_size[1],
                            self.embed_dims))
        else:
            self.pos_embed = None
        self.drop_after_pos = nn.Dropout(drop_rate)

        self.layers = nn.ModuleList()
        index = 0
        for s, (depth, dims) in enumerate(zip(self.depths, self.stage_dims)):
            stage_blocks = []
            for _ in range(depth):
                cfg = blocks[index]
                block = SwinBlock(
                    dims,
                    self.num_heads[s],
                    cfg['window_size'],
                    shift=cfg['shift'],
                    mlp_ratio=cfg['ffn_ratio'],
                    drop_path_rate=cfg['drop_path'],
                    pad_small_map=cfg['pad_small_map'],
                    norm_cfg=cfg['norm_cfg'])
                block.with_cp = cfg['with_cp']
                pe_norm = self.pe_join.build_layer_norm(index)
                if pe_norm is not None:
                    block.pe_norm = pe_norm
                stage_blocks.append(block)
                index += 1
            merge = (
                PatchMerging(dims, stages[s]['norm_cfg'])
                if s < self.num_stages - 1 else None)
            self.layers.append(SwinStage(stage_blocks, merge))
        self.num_features = [
            self.stage_dims[min(s + 1, self.num_stages - 1)]
            if out_after_downsample else self.stage_dims[s]
            for s in range(self.num_stages)
        ]
        for s in self.out_indices:
            self.add_module(
                f'norm{s}',
                build_norm_layer(norm_cfg, self.num_features[s])[1]
                if norm_cfg is not None else nn.Identity())
        self._init_default_weights()
        self._freeze_stages()

    def _init_special_weights(self) -> None:
        """After the generic pass: truncated normal (std 0.02) for the
        relative bias tables and the absolute PE."""
        for m in self.modules():
            if isinstance(m, WindowAttention):
                nn.init.trunc_normal_(m.relative_position_bias_table, std=.02)
        if self.pos_embed is not None:
            nn.init.trunc_normal_(self.pos_embed, std=.02)

    @property
    def blocks(self) -> List[SwinBlock]:
        """All blocks in order (layer ``l`` of the join is ``blocks[l]``)."""
        return [blk for stage in self.layers for blk in stage.blocks]

    # ------------------------------------------------------------------
    # the PE plan
    def stage_grids(self, hw: Tuple[int, int]) -> List[Tuple[int, int]]:
        """The patch grid of every stage for a stage-1 grid ``hw``."""
        grids = [tuple(hw)]
        for _ in range(self.num_stages - 1):
            h, w = grids[-1]
            grids.append((math.ceil(h / 2), math.ceil(w / 2)))
        return grids

    def carry_pe(self, pe: Tensor, stage: int,
                 grids: Sequence[Tuple[int, int]]) -> Tensor:
        """The join's hook: a PE on stage ``stage - 1``'s grid, through that
        stage's patch merging, onto stage ``stage``'s grid and width."""
        return self.layers[stage - 1].downsample(pe, grids[stage - 1])[0]

    def _pe_tensors(self) -> List[Tensor]:
        """Every tensor a plan depends on (for cache invalidation)."""
        tensors = list(self.pe_join.parameters())
        if self.pos_embed is not None:
            tensors.append(self.pos_embed)
        for blk in self.blocks:
            if hasattr(blk, 'pe_norm'):
                tensors.extend(blk.pe_norm.parameters())
        for stage in self.layers[:-1]:
            tensors.extend(stage.downsample.parameters())
        return tensors

    def _build_plan(self, hw: Tuple[int, int]) -> PEPlan:
        pos = None
        if self.pos_embed is not None:
            pos = resize_pos_embed(
                self.pos_embed,
                self.grid_size,
                hw,
                mode=self.interpolate_mode,
                num_extra_tokens=0)
        grids = self.stage_grids(hw)
        pe_norms = [getattr(blk, 'pe_norm', None) for blk in self.blocks]
        return self.pe_join.plan(
            pos,
            None,
            pe_norms,
            carry=lambda pe, stage: self.carry_pe(pe, stage, grids))

    # ------------------------------------------------------------------
    # forward
    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        x, hw = self.patch_embed(x)
        plan = self.pe_plan(hw)
        if plan.input is not None:
            x = x + plan.input
        x = self.drop_after_pos(x)
        outs, index = [], 0
        for s, stage in enumerate(self.layers):
            for blk in stage.blocks:
                args = (x, hw, plan.layer(index))
                if blk.with_cp and x.requires_grad:
                    x = cp.checkpoint(blk, *args, use_reentrant=False)
                else:
                    x = blk(*args)
                index += 1
            merge_first = (
                self.out_after_downsample and stage.downsample is not None)
            if merge_first:
                x, hw = stage.downsample(x, hw)
            if s in self.out_indices:
                out = getattr(self, f'norm{s}')(x)
                if s == self.num_stages - 1 and plan.final is not None:
                    out = out + plan.final  # MPVG: LN(x_L) + LN'(pos)
                outs.append(tokens_to_map(out, hw))
            if stage.downsample is not None and not merge_first:
                x, hw = stage.downsample(x, hw)
        return tuple(outs)

    # ------------------------------------------------------------------
    # training utilities
    def _freeze_stages(self) -> None:
        """mmpretrain's freezing (the absolute PE stays trainable); with
        every stage frozen, the join's norms too."""
        if self.frozen_stages < 0:
            return
        frozen = [self.patch_embed]
        frozen.extend(self.layers[:self.frozen_stages + 1])
        frozen.extend(
            getattr(self, f'norm{s}') for s in self.out_indices
            if s <= self.frozen_stages)
        if self.frozen_stages == self.num_stages - 1:
            frozen.append(self.pe_join)
        for m in frozen:
            m.eval()
            for p in m.parameters():
                p.requires_grad = False

    def train(self, mode: bool = True) -> 'LaPESwin':
        """Train mode, keeping frozen stages (and, with ``norm_eval``, every
        BatchNorm) in eval mode."""
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
        return self

    def get_layer_depth(self,
                        param_name: str,
                        prefix: str = '') -> Tuple[int, int]:
        """Layer depth of a parameter, for layer-wise lr decay.

        Patch embedding and PE: 0; block ``j`` of stage ``s`` (its PE norm
        included): ``sum(depths[:s]) + j + 1``; the patch merging after
        stage ``s``: ``sum(depths[:s + 1])``; the rest (output norms, MPVG's
        last PE norm): ``L + 1``.

        Returns:
            tuple[int, int]: ``(layer_depth, L + 2)``.
        """
        total = self.num_layers + 2
        if not param_name.startswith(prefix):
            return total - 1, total
        name = param_name[len(prefix):]
        if name == 'pos_embed' or name.startswith('patch_embed'):
            return 0, total
        if name.startswith('layers.'):
            parts = name.split('.')
            s = int(parts[1])
            if parts[2] == 'downsample':
                return sum(self.depths[:s + 1]), total
            return sum(self.depths[:s]) + int(parts[3]) + 1, total
        return total - 1, total

    # ------------------------------------------------------------------
    # checkpoints
    def checkpoint_spec(self) -> SwinSpec:
        """What this backbone expects of a checkpoint."""
        return SwinSpec(
            pos_embed_shape=None
            if self.pos_embed is None else tuple(self.pos_embed.shape),
            grid_size=tuple(self.grid_size),
            window_size=self.window_size,
            interpolate_mode=self.interpolate_mode,
            join=self.pe_join.name,
            pe_norm_blocks=tuple(f'layers.{s}.blocks.{j}'
                                 for s, stage in enumerate(self.layers)
                                 for j, blk in enumerate(stage.blocks)
                                 if hasattr(blk, 'pe_norm')))
