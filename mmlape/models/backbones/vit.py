"""The one Vision Transformer backbone of mmlape, with pluggable PE joins.

References:
    ViT (Dosovitskiy et al., 2021), DeiT (Touvron et al., 2021), LaPE
    (Yu et al., ICCV 2023), PVG/MPVG (Lee, Ham, Kim, AAAI 2025); mmpretrain's
    ``VisionTransformer`` for the output types, ``out_indices`` and
    ``get_layer_depth`` conventions that OpenMMLab tools expect.

DeiT (classification, mmpretrain) and Segmenter (segmentation, mmseg) are this
backbone with different outputs; ViT-Adapter subclasses it. The only loop over
encoder blocks is :meth:`LaPEViT.forward_blocks`.
"""
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmcv.cnn import build_norm_layer
from mmengine.logging import print_log
from mmengine.model import BaseModule
from torch import Tensor

from mmlape.registry import register_model
from mmlape.utils.checkpoint import (BackboneSpec, fit_state_dict,
                                     load_backbone_checkpoint)
from ..layers.block import TransformerBlock
from ..layers.pe_join import PEPlan, build_pe_join
from ..layers.pos_embed import (PE_TYPES, build_1d_sincos, build_2d_sincos,
                                resize_pos_embed)

__all__ = ['LaPEViT', 'PatchEmbed']


def _to_2tuple(x: Union[int, Sequence[int]]) -> Tuple[int, int]:
    if isinstance(x, int):
        return (x, x)
    x = tuple(int(v) for v in x)
    if len(x) != 2:
        raise ValueError(f'expected an int or a pair, got {x}')
    return x


class PatchEmbed(nn.Module):
    """Non-overlapping patches through a strided convolution (``proj``).

    Args:
        in_channels (int): Image channels.
        embed_dims (int): Channels ``C``.
        patch_size (int): Patch side.
        bias (bool): Bias of the projection. Defaults to True.

    Raises:
        ValueError: When the image is not a whole number of patches.
    """

    def __init__(self,
                 in_channels: int,
                 embed_dims: int,
                 patch_size: int,
                 bias: bool = True) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(
            in_channels,
            embed_dims,
            kernel_size=patch_size,
            stride=patch_size,
            bias=bias)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tuple[int, int]]:
        h, w = x.shape[-2:]
        p = self.patch_size
        if h % p or w % p:
            raise ValueError(
                f'input of {h}x{w} pixels is not divisible by patch_size={p}:'
                f' pad or resize it to a multiple of {p} (e.g. '
                f'size_divisor={p} in the data preprocessor)')
        x = self.proj(x)
        hw = (x.shape[2], x.shape[3])
        return x.flatten(2).transpose(1, 2), hw


@register_model()
class LaPEViT(BaseModule):
    """Vision Transformer whose position embedding join comes from config.

    Args:
        arch (str | dict): ``'deit-tiny'``, ``'deit-small'``, ``'deit-base'``,
            ``'test-tiny'`` (64 dims, 4 layers, for tests), or a dict with
            ``embed_dims``, ``num_layers``, ``num_heads``,
            ``feedforward_channels``. Defaults to ``'deit-tiny'``.
        img_size (int | tuple): Pretraining size; sets the PE grid.
            Defaults to 224.
        patch_size (int): Defaults to 16.
        in_channels (int): Defaults to 3.
        patch_bias (bool): Bias of the patch projection (DeiT has one,
            mmseg's ViT not). Defaults to True.
        pe_join (dict | str, optional): The join, e.g.
            ``dict(type='LaPE', hierarchical=True)``; one of ``Default``,
            ``Share``, ``Unshare``, ``LaPE``, ``PVG``, ``MPVG``. Defaults to
            ``Default``.
        pe_type (str): ``learnable``, ``sincos1d``, ``sincos2d`` or
            ``relative``. Defaults to ``learnable``.
        with_cls_token (bool): Prepend a class token. Defaults to True.
        out_type (str): ``'cls_token'`` (B, C), ``'avg_featmap'`` (GAP,
            B, C), ``'featmap'`` (B, C, H, W) or ``'raw'`` (B, N', C).
            Defaults to ``'cls_token'``.
        out_indices (int | Sequence[int]): Layers whose output is returned.
            Defaults to -1 (the last).
        final_norm (bool): Apply the final norm (``norm``) to the last
            layer's output. Defaults to True.
        qkv_bias (bool): Defaults to True.
        drop_rate (float): Dropout after the PE and in blocks.
            Defaults to 0.
        attn_drop_rate (float): Defaults to 0.
        drop_path_rate (float): Stochastic depth, linearly increasing over
            layers. Defaults to 0.
        norm_cfg (dict): Norm of blocks, final norm and PE norms.
            Defaults to ``dict(type='LN', eps=1e-6)``.
        layer_scale_init_value (float): 0 disables layer scale.
            Defaults to 0.
        window_size (int | Sequence[int]): Window attention size per layer
            (0 = global). Defaults to 0.
        interpolate_mode (str): How the raw PE is resized for another grid.
            Defaults to ``'bicubic'``.
        frozen_stages (int): Freeze the embeddings and the first
            ``frozen_stages`` layers; -1 freezes nothing. Defaults to -1.
        with_cp (bool): Gradient checkpointing of blocks. Defaults to False.
        cache_pe_plan (bool): In eval mode without autograd, compute the PE
            plan once per grid and reuse it until weights change.
            Defaults to True.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=...,
            prefix='backbone.')`` loads, converts and fits a checkpoint (see
            :meth:`load_pretrained`). Defaults to None.

    Example:
        >>> vit = LaPEViT('test-tiny', img_size=64, pe_join=dict(type='LaPE'))
        >>> vit(torch.randn(2, 3, 64, 64))[0].shape
        torch.Size([2, 64])
        >>> vit = LaPEViT('test-tiny', img_size=64, pe_join='MPVG',
        ...               with_cls_token=False, out_type='featmap')
        >>> vit(torch.randn(2, 3, 96, 64))[0].shape
        torch.Size([2, 64, 6, 4])
    """
    arch_zoo = {
        'deit-tiny':
        dict(
            embed_dims=192,
            num_layers=12,
            num_heads=3,
            feedforward_channels=768),
        'deit-small':
        dict(
            embed_dims=384,
            num_layers=12,
            num_heads=6,
            feedforward_channels=1536),
        'deit-base':
        dict(
            embed_dims=768,
            num_layers=12,
            num_heads=12,
            feedforward_channels=3072),
        'test-tiny':
        dict(
            embed_dims=64, num_layers=4, num_heads=2,
            feedforward_channels=256),
    }
    OUT_TYPES = ('raw', 'cls_token', 'featmap', 'avg_featmap')
    #: Keys that a ViT checkpoint cannot have (modules a subclass adds);
    #: they are summarised, not warned about, when a checkpoint loads.
    new_key_pattern: Optional[str] = None
    #: How many patch grids keep a cached PE plan in eval mode.
    plan_cache_size: int = 8

    def __init__(self,
                 arch: Union[str, Dict] = 'deit-tiny',
                 img_size: Union[int, Sequence[int]] = 224,
                 patch_size: int = 16,
                 in_channels: int = 3,
                 patch_bias: bool = True,
                 pe_join: Union[None, str, Dict] = None,
                 pe_type: str = 'learnable',
                 with_cls_token: bool = True,
                 out_type: str = 'cls_token',
                 out_indices: Union[int, Sequence[int]] = -1,
                 final_norm: bool = True,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 norm_cfg: Dict = dict(type='LN', eps=1e-6),
                 layer_scale_init_value: float = 0.,
                 window_size: Union[int, Sequence[int]] = 0,
                 interpolate_mode: str = 'bicubic',
                 frozen_stages: int = -1,
                 with_cp: bool = False,
                 cache_pe_plan: bool = True,
                 init_cfg: Optional[Dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.arch_settings = self._parse_arch(arch)
        self.embed_dims = self.arch_settings['embed_dims']
        self.num_layers = self.arch_settings['num_layers']
        self.patch_size = patch_size
        self.img_size = _to_2tuple(img_size)
        if self.img_size[0] % patch_size or self.img_size[1] % patch_size:
            raise ValueError(f'img_size={self.img_size} is not divisible by '
                             f'patch_size={patch_size}')
        self.grid_size = (self.img_size[0] // patch_size,
                          self.img_size[1] // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        if pe_type not in PE_TYPES:
            raise ValueError(f'Unknown pe_type={pe_type!r}; choose one of '
                             f'{list(PE_TYPES)}')
        self.pe_type = pe_type
        if out_type not in self.OUT_TYPES:
            raise ValueError(f'Unknown out_type={out_type!r}; choose one of '
                             f'{list(self.OUT_TYPES)}')
        if out_type == 'cls_token' and not with_cls_token:
            raise ValueError("out_type='cls_token' needs with_cls_token=True")
        self.out_type = out_type
        self.with_cls_token = with_cls_token
        self.num_extra_tokens = 1 if with_cls_token else 0
        self.final_norm = final_norm
        self.interpolate_mode = interpolate_mode
        self.frozen_stages = frozen_stages
        self.with_cp = with_cp
        self.cache_pe_plan = cache_pe_plan
        self._plan_cache: OrderedDict = OrderedDict()

        self.pe_join = build_pe_join(
            pe_join,
            num_layers=self.num_layers,
            embed_dims=self.embed_dims,
            with_cls_token=with_cls_token,
            pe_type=pe_type,
            num_patches=self.num_patches,
            norm_cfg=norm_cfg)

        self.patch_embed = PatchEmbed(in_channels, self.embed_dims, patch_size,
                                      patch_bias)
        if with_cls_token:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, self.embed_dims))
        num_rows = self.num_patches + self.num_extra_tokens
        if pe_type == 'learnable':
            self.pos_embed = nn.Parameter(
                torch.zeros(self.pe_join.num_pos_embeds, num_rows,
                            self.embed_dims))
        elif pe_type == 'sincos1d':
            self.register_buffer(
                'pos_embed',
                build_1d_sincos(num_rows, self.embed_dims),
                persistent=False)
        elif pe_type == 'sincos2d':
            self.register_buffer(
                'pos_embed',
                build_2d_sincos(self.grid_size, self.embed_dims,
                                with_cls_token),
                persistent=False)
        else:
            self.pos_embed = None
        self.drop_after_pos = nn.Dropout(drop_rate)

        windows = self._per_layer(window_size, 'window_size')
        if any(windows) and (with_cls_token or pe_type == 'relative'):
            raise ValueError('window attention needs with_cls_token=False '
                             "and an absolute pe_type")
        self.out_indices = self._parse_out_indices(out_indices)
        dpr = torch.linspace(0, drop_path_rate, self.num_layers).tolist()
        rel_grid = self.grid_size if pe_type == 'relative' else None
        self.blocks = nn.ModuleList()
        for i in range(self.num_layers):
            block = TransformerBlock(
                self.embed_dims,
                self.arch_settings['num_heads'],
                self.arch_settings['feedforward_channels'],
                qkv_bias=qkv_bias,
                drop_rate=drop_rate,
                attn_drop_rate=attn_drop_rate,
                drop_path_rate=dpr[i],
                norm_cfg=norm_cfg,
                layer_scale_init_value=layer_scale_init_value,
                window_size=windows[i],
                rel_pos_grid=rel_grid)
            pe_norm = self.pe_join.build_layer_norm(i)
            if pe_norm is not None:
                block.pe_norm = pe_norm
            self.blocks.append(block)
        if final_norm:
            self.norm = build_norm_layer(norm_cfg, self.embed_dims)[1]
        self._init_default_weights()
        self._register_load_state_dict_pre_hook(self._fit_state_dict)
        self._freeze_stages()

    # ------------------------------------------------------------------
    # construction helpers
    def _parse_arch(self, arch: Union[str, Dict]) -> Dict:
        if isinstance(arch, str):
            if arch not in self.arch_zoo:
                raise ValueError(f'Unknown arch={arch!r}; choose one of '
                                 f'{sorted(self.arch_zoo)} or pass a dict')
            return dict(self.arch_zoo[arch])
        keys = {
            'embed_dims', 'num_layers', 'num_heads', 'feedforward_channels'
        }
        if not isinstance(arch, dict) or set(arch) != keys:
            raise ValueError(f'A custom arch must be a dict with keys '
                             f'{sorted(keys)}, got {arch!r}')
        return dict(arch)

    def _per_layer(self, value: Union[int, Sequence[int]],
                   name: str) -> List[int]:
        if isinstance(value, int):
            return [value] * self.num_layers
        value = [int(v or 0) for v in value]
        if len(value) != self.num_layers:
            raise ValueError(f'{name} has {len(value)} entries for '
                             f'{self.num_layers} layers')
        return value

    def _parse_out_indices(self, out_indices) -> List[int]:
        if isinstance(out_indices, int):
            out_indices = [out_indices]
        parsed = []
        for idx in out_indices:
            real = idx + self.num_layers if idx < 0 else idx
            if not 0 <= real < self.num_layers:
                raise ValueError(f'out_indices contains {idx}, outside '
                                 f'[-{self.num_layers}, {self.num_layers})')
            parsed.append(real)
        return sorted(set(parsed))

    def _init_default_weights(self) -> None:
        """DeiT's initialisation: truncated normal (std 0.02) for linear
        layers, PE and class token; ones/zeros for norms."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if isinstance(self.pos_embed, nn.Parameter):
            nn.init.trunc_normal_(self.pos_embed, std=.02)
        if self.with_cls_token:
            nn.init.trunc_normal_(self.cls_token, std=.02)

    # ------------------------------------------------------------------
    # the PE plan
    def _pe_tensors(self) -> List[Tensor]:
        """Every tensor a plan depends on (for cache invalidation)."""
        tensors = list(self.pe_join.parameters())
        if self.pos_embed is not None:
            tensors.append(self.pos_embed)
        for blk in self.blocks:
            pe_norm = getattr(blk, 'pe_norm', None)
            if pe_norm is not None:
                tensors.extend(pe_norm.parameters())
            if blk.attn.rel_pos_grid is not None:
                tensors.append(blk.attn.relative_position_bias_table)
        return tensors

    def resized_pos_embed(self, hw: Tuple[int, int]) -> Optional[Tensor]:
        """The raw PE resized (once) to the patch grid ``hw``."""
        if self.pos_embed is None:
            return None
        return resize_pos_embed(
            self.pos_embed,
            self.grid_size,
            hw,
            mode=self.interpolate_mode,
            num_extra_tokens=self.num_extra_tokens)

    def pe_plan(self, hw: Tuple[int, int]) -> PEPlan:
        """The PE plan for a patch grid ``hw``.

        In eval mode with autograd off, plans are cached per grid (the
        ``plan_cache_size`` most recent grids, for test sets of many image
        sizes) and recomputed only when a PE weight changes (in-place
        updates bump a tensor's version; replacing it changes its storage)
        or after :meth:`train`. Under ``torch.compile`` the cache is
        bypassed: its pointer comparison would break the graph, and a
        compiled graph computes the plan as part of itself.
        """
        hw = tuple(hw)
        use_cache = (
            self.cache_pe_plan and not self.training
            and not torch.is_grad_enabled()
            and not torch.compiler.is_compiling())
        if use_cache:
            weights = tuple(
                (t.data_ptr(), t._version) for t in self._pe_tensors())
            hit = self._plan_cache.get(hw)
            if hit is not None and hit[0] == weights:
                self._plan_cache.move_to_end(hw)
                return hit[1]
        rel = None
        if self.pe_type == 'relative':
            if hw != self.grid_size:
                raise ValueError(
                    f'pe_type="relative" is defined for the {self.grid_size}'
                    f' patch grid only; got an input grid of {hw}')
            rel = [blk.attn.relative_bias() for blk in self.blocks]
        pe_norms = [getattr(blk, 'pe_norm', None) for blk in self.blocks]
        plan = self.pe_join.plan(self.resized_pos_embed(hw), rel, pe_norms)
        if use_cache:
            self._plan_cache[hw] = (weights, plan)
            if len(self._plan_cache) > self.plan_cache_size:
                self._plan_cache.popitem(last=False)
        return plan

    def train(self, mode: bool = True) -> 'LaPEViT':
        self._plan_cache.clear()
        super().train(mode)
        self._freeze_stages()
        return self

    # ------------------------------------------------------------------
    # forward
    def embed(self, x: Tensor, plan: PEPlan) -> Tensor:
        """Patch tokens (B, N, C) to the input of layer 0: the class token
        and, when the join says so, the PE."""
        if self.with_cls_token:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x],
                          dim=1)
        else:
            # The patch embedding is a transposed view; without the copy
            # that `cat` makes, every later op would run on strided memory.
            x = x.contiguous()
        if plan.input is not None:
            x = x + plan.input
        return self.drop_after_pos(x)

    def forward_blocks(self, x: Tensor, plan: PEPlan, start: int, end: int,
                       hw: Tuple[int, int]) -> Tensor:
        """Run blocks ``start .. end-1`` under the PE plan.

        This is the only loop over encoder blocks; ViT-Adapter calls it once
        per interaction.
        """
        for i in range(start, end):
            if plan.residual[i] is not None:
                x = x + plan.residual[i]
            blk = self.blocks[i]
            args = (x, plan.attn[i], plan.bias[i], hw)
            if self.with_cp and x.requires_grad:
                x = cp.checkpoint(blk, *args, use_reentrant=False)
            else:
                x = blk(*args)
        return x

    def final(self, x: Tensor, plan: PEPlan) -> Tensor:
        """The final norm, plus the join's final term (MPVG), per token."""
        x = self.norm(x)
        if plan.final is not None:
            x = x + plan.final
        return x

    def _format_output(self, x: Tensor, hw: Tuple[int, int], plan: PEPlan,
                       last: bool) -> Tensor:
        if last and self.final_norm:
            if self.out_type == 'avg_featmap' and plan.final is not None:
                # GAP of (LN(x) + f) is GAP(LN(x)) + mean(f): add the
                # input-independent (1, C) vector instead of (B, N, C).
                pooled = self.norm(x)[:, self.num_extra_tokens:].mean(dim=1)
                return pooled + plan.final_mean
            x = self.final(x, plan)
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return x[:, 0]
        patches = x[:, self.num_extra_tokens:]
        if self.out_type == 'avg_featmap':
            return patches.mean(dim=1)
        b, _, c = patches.shape
        return patches.transpose(1, 2).reshape(b, c, *hw)

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        x, hw = self.patch_embed(x)
        plan = self.pe_plan(hw)
        x = self.embed(x, plan)
        outs, start = [], 0
        for idx in self.out_indices:
            x = self.forward_blocks(x, plan, start, idx + 1, hw)
            start = idx + 1
            last = idx == self.num_layers - 1
            outs.append(self._format_output(x, hw, plan, last))
        return tuple(outs)

    # ------------------------------------------------------------------
    # training utilities
    def _freeze_stages(self) -> None:
        if self.frozen_stages < 0:
            return
        frozen = [self.patch_embed]
        for name in ('cls_token', 'pos_embed'):
            t = getattr(self, name, None)
            if isinstance(t, nn.Parameter):
                t.requires_grad = False
        frozen.extend(self.blocks[:self.frozen_stages])
        if self.frozen_stages >= self.num_layers:
            frozen.append(self.pe_join)
            if self.final_norm:
                frozen.append(self.norm)
        for m in frozen:
            m.eval()
            for p in m.parameters():
                p.requires_grad = False

    def get_layer_depth(self,
                        param_name: str,
                        prefix: str = '') -> Tuple[int, int]:
        """Layer depth of a parameter, for layer-wise lr decay.

        Embeddings are depth 0, ``blocks.{i}.*`` (PE norms included) depth
        ``i + 1``, everything else (final norm, MPVG's last PE norm)
        ``num_layers + 1``.

        Returns:
            tuple[int, int]: ``(layer_depth, num_layers + 2)``.
        """
        total = self.num_layers + 2
        if not param_name.startswith(prefix):
            return total - 1, total
        name = param_name[len(prefix):]
        if name in ('cls_token',
                    'pos_embed') or name.startswith('patch_embed'):
            return 0, total
        if name.startswith('blocks.'):
            return int(name.split('.')[1]) + 1, total
        return total - 1, total

    # ------------------------------------------------------------------
    # checkpoints (the logic lives in mmlape.utils.checkpoint)
    def checkpoint_spec(self) -> BackboneSpec:
        """What this backbone expects of a checkpoint (PE shape, extra
        tokens, grid, join), for :mod:`mmlape.utils.checkpoint`."""
        pe = self.pos_embed
        return BackboneSpec(
            pos_embed_shape=tuple(pe.shape)
            if isinstance(pe, nn.Parameter) else None,
            num_extra_tokens=self.num_extra_tokens,
            grid_size=self.grid_size,
            interpolate_mode=self.interpolate_mode,
            join=self.pe_join.name,
            pe_norm_layers=tuple(i for i, blk in enumerate(self.blocks)
                                 if hasattr(blk, 'pe_norm')))

    def _fit_state_dict(self, state_dict: Dict, prefix: str, *args,
                        **kwargs) -> None:
        """``load_state_dict`` pre-hook: fit the checkpoint's PE to this
        model (see :func:`~mmlape.utils.checkpoint.fit_state_dict`)."""
        for note in fit_state_dict(state_dict, prefix, self.checkpoint_spec()):
            print_log(note, logger='current')

    def init_weights(self) -> None:
        """Load ``init_cfg=dict(type='Pretrained', ...)`` through
        :meth:`load_pretrained`; any other init_cfg as mmengine does."""
        cfg = self.init_cfg
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            self.load_pretrained(cfg['checkpoint'], cfg.get('prefix'))
            self._is_init = True
            return
        super().init_weights()

    def load_pretrained(self,
                        checkpoint: str,
                        prefix: Optional[str] = None) -> None:
        """Load a ViT checkpoint of any known layout into this backbone
        (see :func:`~mmlape.utils.checkpoint.load_backbone_checkpoint`).

        Args:
            checkpoint (str): Path of the checkpoint.
            prefix (str, optional): Keep only keys under this prefix and
                strip it. Defaults to None (a ``backbone.`` prefix is then
                detected).
        """
        load_backbone_checkpoint(self, checkpoint, prefix,
                                 self.checkpoint_spec(), self.new_key_pattern)
