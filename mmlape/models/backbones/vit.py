"""The one Vision Transformer of mmlape, with pluggable PE joins.

References:
    ViT (Dosovitskiy et al., 2021), DeiT (Touvron et al., 2021), LaPE (Yu
    et al., ICCV 2023), PVG/MPVG (Lee, Ham, Kim, AAAI 2025), RoPE-ViT (Heo
    et al., ECCV 2024) for the rotary PE types; mmpretrain's
    ``VisionTransformer`` (arguments, output types, ``get_layer_depth``);
    T2T-ViT, CeiT, ViT-Lite and CCT for the other archs (:mod:`.vit_arch`).

DeiT, Segmenter, ViT-Adapter and the other archs are this backbone with
other outputs or parts. The only loop over encoder blocks is
:meth:`LaPEViT.forward_blocks`.
"""
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmcv.cnn import build_norm_layer
from mmengine.utils import to_2tuple
from torch import Tensor

from mmlape.registry import POOLINGS, register_model
from ..checkpoint import VIT, ViTSpec
from ..layers.block import TransformerBlock
from ..layers.parts import build_part
from ..layers.pe_join import resolve_pe_join
from ..layers.pe_plan import PEPlan
from ..layers.pos_embed import (check_pe_setting, pe_setting_name,
                                pe_type_part, resize_pos_embed)
from ..layers.tokenizers import PatchEmbed, tokens_to_map
from .base import LaPEBackbone, parse_out_indices
from .vit_arch import (VIT_ARCH_ZOO, VIT_OPTION_DEFAULTS, block_cfgs,
                       build_tokenizer, gap_norm_applies, parse_vit_arch,
                       per_layer, pooling_cfg)

__all__ = ['LaPEViT', 'PatchEmbed']


@register_model()
class LaPEViT(LaPEBackbone):
    """Vision Transformer whose position embedding join comes from config.

    Arguments left at None take the arch's value, else the default below.
    It accepts every argument of mmpretrain 1.2.0's ``VisionTransformer``,
    so with the default join ``type='LaPEViT'`` is a drop-in replacement.

    Args:
        arch (str | dict): A name in ``arch_zoo`` (mmpretrain's, any
            case, plus ``'t2t-vit-7'``, ``'ceit-tiny'``, ``'vit-lite-7/4'``,
            ``'cct-7/3x1'`` and ``'test-tiny'``: 64 dims, 4 layers, whole
            patches only), or a dict with ``embed_dims``, ``num_layers``,
            ``num_heads``, ``feedforward_channels`` and any of
            :data:`~mmlape.models.backbones.vit_arch.ARCH_OPTIONS`.
            Defaults to ``'base'``.
        img_size (int | tuple, optional): Pretraining size; sets the PE grid
            through the tokenizer. Defaults to 224.
        patch_size (int, optional): Patch side of the ``Patch`` tokenizer.
            Defaults to 16.
        in_channels (int): Defaults to 3.
        patch_bias (bool, optional): Bias of the ``Patch`` tokenizer's
            projection (DeiT has one, mmseg's ViT not). Defaults to
            ``not pre_norm`` (mmpretrain's rule).
        patch_cfg (dict, optional): mmpretrain's ``patch_cfg`` (mmcv
            ``PatchEmbed`` arguments overriding the ``Patch`` tokenizer's;
            partial patches are padded bottom/right). Defaults to None.
        pre_norm (bool): A norm (``pre_norm``) on the tokens after the PE
            and before the first layer (CLIP). Defaults to False.
        layer_cfgs (dict | Sequence[dict], optional): mmpretrain's
            ``layer_cfgs`` (one dict for every layer, or one each).
            Defaults to None.
        pe_join (dict | str | type, optional): The join: a config such as
            ``dict(type='LaPE', hierarchical=True)``, a name (any case) or
            a class (see
            :func:`~mmlape.models.layers.pe_join.resolve_pe_join`).
            Defaults to ``Default``.
        pe_type (str, optional): ``learnable``, ``sincos1d``, ``sincos2d``,
            ``relative``, ``rope_axial`` or ``rope_mixed`` (rotary; the
            class token is not rotated). Defaults to ``learnable``.
        ape_type (str, optional): With a rotary ``pe_type``, an absolute PE
            beside it (stored as ``pos_embed``) for the join to act on.
            Defaults to None.
        rope_theta (float, optional): The rotary PE's ``theta``. Defaults to
            the type's: 100 (axial), 10 (mixed).
        with_cls_token (bool, optional): Prepend a class token. Defaults to
            the arch's, else True, or False with a join that has no
            class-token position (PVG, MPVG).
        out_type (str, optional): ``'cls_token'`` (B, C),
            ``'avg_featmap'`` (GAP, then ``fc_norm`` except for PVG/MPVG
            and T2T-ViT; B, C), ``'pooled'`` (the ``pooling`` part; B, C),
            ``'featmap'`` (B, C, H, W) or ``'raw'`` (B, N', C). Defaults to
            the arch's, else ``'cls_token'``, or ``'avg_featmap'`` with a
            join that has no class-token position: the papers' PVG and
            MPVG models read out by GAP.
        out_indices (int | Sequence[int]): Layers whose output is returned.
            Defaults to -1 (the last).
        final_norm (bool): Apply the final norm (``norm``) to the last
            layer's output. Defaults to True.
        qkv_bias (bool, optional): Defaults to True.
        drop_rate (float): Dropout after the PE and in blocks.
            Defaults to 0.
        attn_drop_rate (float): Defaults to 0.
        drop_path_rate (float): Stochastic depth, linearly increasing over
            layers. Defaults to 0.
        norm_cfg (dict, optional): Norm of blocks, final norm and PE norms.
            Defaults to ``dict(type='LN', eps=1e-6)``.
        layer_scale_init_value (float): 0 disables layer scale.
            Defaults to 0.
        window_size (int | Sequence[int]): Window attention size per layer
            (0 = global). Defaults to 0.
        interpolate_mode (str): How the raw PE is resized for another grid.
            Defaults to ``'bicubic'``.
        interpolate_antialias (bool): Resize it with antialiasing (as
            timm; matters where the grid shrinks). Defaults to False.
        frozen_stages (int): When positive, freeze the embeddings and the
            first ``frozen_stages`` layers (with all of them, the final
            norms and the join too), as mmpretrain. Defaults to -1.
        with_cp (bool): Gradient checkpointing of blocks. Defaults to False.
        cache_pe_plan (bool): In eval mode without autograd, compute the PE
            plan once per grid and reuse it until weights change.
            Defaults to True.
        tokenizer (dict | str, optional): ``dict(type='Patch' | 'T2T' |
            'I2T' | 'Conv', ...)``, stored as ``patch_embed``. Defaults to
            ``Patch``.
        ffn (dict | str, optional): The FFN of every block,
            ``dict(type='MLP' | 'LeFF', ...)``. Defaults to ``MLP``.
        pooling (dict | str, optional): With ``out_type='pooled'``:
            ``dict(type='ClsToken' | 'GAP' | 'SeqPool' | 'LCA')``; stored as
            ``pool``. ``'cls_token'`` and ``'avg_featmap'`` are the
            ``ClsToken`` and ``GAP`` poolings. Defaults to None.
        init_cfg (dict, optional): ``dict(type='Pretrained', ...)`` loads
            via :meth:`load_pretrained`. Defaults to None.

    Raises:
        ValueError: A bad option, or a join that cannot apply to a part
            (e.g. PVG with CeiT's LCA pooling, which needs a class token).

    Example:
        >>> vit = LaPEViT('test-tiny', img_size=64, pe_join=dict(type='LaPE'))
        >>> vit(torch.randn(2, 3, 64, 64))[0].shape
        torch.Size([2, 64])
        >>> vit = LaPEViT('test-tiny', img_size=64, pe_join='MPVG',
        ...               with_cls_token=False, out_type='featmap')
        >>> vit(torch.randn(2, 3, 96, 64))[0].shape
        torch.Size([2, 64, 6, 4])
        >>> cct = LaPEViT('cct-7/3x1', pe_join='LaPE')  # SeqPool, 32x32
        >>> cct(torch.randn(2, 3, 32, 32))[0].shape
        torch.Size([2, 256])
    """
    option_defaults = VIT_OPTION_DEFAULTS
    arch_zoo = VIT_ARCH_ZOO
    OUT_TYPES = ('raw', 'cls_token', 'featmap', 'avg_featmap', 'pooled')
    checkpoint_family = VIT
    plan_settings = ('interpolate_mode', 'interpolate_antialias')

    def __init__(self,
                 arch: Union[str, Dict] = 'base',
                 img_size: Union[None, int, Sequence[int]] = None,
                 patch_size: Optional[int] = None,
                 in_channels: int = 3,
                 patch_bias: Optional[bool] = None,
                 pe_join: Union[None, str, Dict] = None,
                 pe_type: Optional[str] = None,
                 with_cls_token: Optional[bool] = None,
                 out_type: Optional[str] = None,
                 out_indices: Union[int, Sequence[int]] = -1,
                 final_norm: bool = True,
                 qkv_bias: Optional[bool] = None,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 norm_cfg: Optional[Dict] = None,
                 layer_scale_init_value: float = 0.,
                 window_size: Union[int, Sequence[int]] = 0,
                 interpolate_mode: str = 'bicubic',
                 frozen_stages: int = -1,
                 with_cp: bool = False,
                 cache_pe_plan: bool = True,
                 tokenizer: Union[None, str, Dict] = None,
                 ffn: Union[None, str, Dict] = None,
                 pooling: Union[None, str, Dict] = None,
                 patch_cfg: Optional[Dict] = None,
                 layer_cfgs: Union[None, Dict, Sequence[Dict]] = None,
                 pre_norm: bool = False,
                 ape_type: Optional[str] = None,
                 rope_theta: Optional[float] = None,
                 interpolate_antialias: bool = False,
                 init_cfg: Optional[Dict] = None) -> None:
        super().__init__(cache_pe_plan=cache_pe_plan, init_cfg=init_cfg)
        self.arch_settings = arch = parse_vit_arch(arch, self.arch_zoo)

        def pick(name, value, default):
            return self.pick_option(name, value, arch, default)

        defaults = self.option_defaults

        self.embed_dims = arch['embed_dims']
        self.num_layers = arch['num_layers']
        self.img_size = tuple(
            to_2tuple(pick('img_size', img_size, defaults['img_size'])))
        pe_type = pick('pe_type', pe_type, defaults['pe_type'])
        check_pe_setting(pe_type, ape_type, rope_theta)
        self.pe_type = pe_type
        self.ape_type = ape_type
        #: The declaration of ``pe_type`` (:mod:`..layers.pos_embed`).
        self.pe_part = pe_type_part(pe_type)
        #: The rotary type, or None.
        self.rope_type = pe_type if self.pe_part.kind == 'rotary' else None
        #: The PE the join acts on: the absolute one beside a rotary PE,
        #: else ``pe_type`` itself.
        join_pe_type = ape_type or pe_type
        join_cls, join_options = resolve_pe_join(pe_join)
        gap_join = not join_cls.allows_cls_token
        out_type = pick('out_type', out_type,
                        'avg_featmap' if gap_join else defaults['out_type'])
        if out_type not in self.OUT_TYPES:
            raise ValueError(f'Unknown out_type={out_type!r}; choose one of '
                             f'{list(self.OUT_TYPES)}')
        with_cls_token = pick(
            'with_cls_token', with_cls_token, False if gap_join
            and out_type != 'cls_token' else defaults['with_cls_token'])
        if out_type == 'cls_token' and not with_cls_token:
            raise ValueError("out_type='cls_token' needs with_cls_token=True")
        self.out_type = out_type
        self.with_cls_token = with_cls_token
        self.num_extra_tokens = 1 if with_cls_token else 0
        self.final_norm = final_norm
        self.interpolate_mode = interpolate_mode
        self.interpolate_antialias = interpolate_antialias
        self.frozen_stages = frozen_stages
        self.with_cp = with_cp
        norm_cfg = pick('norm_cfg', norm_cfg, defaults['norm_cfg'])
        qkv_bias = pick('qkv_bias', qkv_bias, defaults['qkv_bias'])
        self.pos_embed_std = arch.get('pos_embed_std', .02)
        self.cls_token_std = arch.get('cls_token_std', .02)

        if patch_bias is None and pre_norm:
            patch_bias = False
        self.patch_embed, input_size = build_tokenizer(
            pick('tokenizer', tokenizer, None), patch_size, patch_bias,
            in_channels, self.embed_dims, patch_cfg)
        self.patch_size = self.patch_embed.stride
        self.grid_size = tuple(
            self.patch_embed.out_grid(input_size or self.img_size))
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        pool_cfg = pooling_cfg(out_type, pooling, arch.get('pooling'),
                               join_cls, with_cls_token)
        self.pe_join = join_cls(
            **join_options,
            num_layers=self.num_layers,
            embed_dims=self.embed_dims,
            with_cls_token=with_cls_token,
            pe_type=join_pe_type,
            num_patches=self.num_patches,
            norm_cfg=norm_cfg)
        if self.rope_type and 'qk' in self.pe_join.attention_terms:
            raise ValueError(
                f'pe_join.type={self.pe_join.name!r} maps the queries and '
                f'keys itself, and so does pe_type={pe_type!r}: choose one')

        if with_cls_token:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, self.embed_dims))
        table = pe_type_part(join_pe_type).table(
            self.pe_join.num_pos_embeds,
            self.num_patches + self.num_extra_tokens, self.grid_size,
            self.embed_dims, with_cls_token)
        if table is None:
            self.pos_embed = None
        elif pe_type_part(join_pe_type).learnable:
            self.pos_embed = nn.Parameter(table)
        else:
            self.register_buffer('pos_embed', table, persistent=False)
        self.drop_after_pos = nn.Dropout(drop_rate)
        self.pre_norm = (
            build_norm_layer(norm_cfg, self.embed_dims)[1]
            if pre_norm else nn.Identity())

        windows = per_layer(window_size, self.num_layers, 'window_size')
        if any(windows) and self.rope_type:
            raise ValueError(f'window attention takes no rotary PE '
                             f'(pe_type={pe_type!r}): its windows do not '
                             f'map the queries and keys')
        terms = set(self.pe_join.attention_terms) - {'attn'}
        if any(windows) and (with_cls_token or terms):
            raise ValueError(
                f'window attention needs with_cls_token=False and a join '
                f'that adds nothing but a PE to attention; '
                f'pe_join.type={self.pe_join.name!r} adds {sorted(terms)}')
        self.out_indices = parse_out_indices(out_indices, self.num_layers,
                                             'layers')
        dpr = torch.linspace(
            0, drop_path_rate, self.num_layers, device='cpu').tolist()
        ffn_cfg = pick('ffn', ffn, None)
        layer_args = block_cfgs(layer_cfgs, [
            dict(
                embed_dims=self.embed_dims,
                num_heads=arch['num_heads'],
                feedforward_channels=arch['feedforward_channels'],
                qkv_bias=qkv_bias,
                drop_rate=drop_rate,
                attn_drop_rate=attn_drop_rate,
                drop_path_rate=dpr[i],
                norm_cfg=norm_cfg,
                layer_scale_init_value=layer_scale_init_value,
                window_size=windows[i],
                pe_type=pe_type,
                pe_grid=self.grid_size,
                qk_scale=arch.get('qk_scale'),
                ffn_cfg=ffn_cfg,
                norm2_in_residual=arch.get('norm2_in_residual', False),
                rope_theta=rope_theta) for i in range(self.num_layers)
        ])
        self.blocks = nn.ModuleList()
        for i, args in enumerate(layer_args):
            block = TransformerBlock(**args)
            pe_norm = self.pe_join.build_layer_norm(i)
            if pe_norm is not None:
                block.pe_norm = pe_norm
            self.blocks.append(block)
        self.pool = None
        if pool_cfg is not None:
            self.pool = build_part(
                POOLINGS,
                'pooling',
                pool_cfg,
                embed_dims=self.embed_dims,
                num_layers=self.num_layers,
                num_heads=arch['num_heads'],
                feedforward_channels=arch['feedforward_channels'],
                qkv_bias=qkv_bias,
                drop_rate=drop_rate,
                attn_drop_rate=attn_drop_rate,
                norm_cfg=norm_cfg)
            if (self.pool.last_layer_only
                    and self.out_indices != [self.num_layers - 1]):
                raise ValueError(
                    f'pooling.type={pool_cfg["type"]!r} pools the last '
                    f'layer only: out_indices must be -1, got '
                    f'{out_indices!r}')
        if final_norm:
            self.norm = build_norm_layer(norm_cfg, self.embed_dims)[1]
        self.fc_norm = None
        if gap_norm_applies(out_type, arch, self.pe_join):
            self.fc_norm = build_norm_layer(norm_cfg, self.embed_dims)[1]
        self._init_default_weights()
        self._freeze_stages()

    # ------------------------------------------------------------------
    # initialisation
    def _init_special_weights(self) -> None:
        """After the generic pass: the arch's truncated normal for PE and
        class token (0 std: zeros), then every part's
        ``init_part_weights``."""
        if isinstance(self.pos_embed, nn.Parameter):
            nn.init.trunc_normal_(self.pos_embed, std=self.pos_embed_std)
        if self.with_cls_token:
            if self.cls_token_std > 0:
                nn.init.trunc_normal_(self.cls_token, std=self.cls_token_std)
            else:
                nn.init.zeros_(self.cls_token)
        for m in self.modules():
            if m is not self and hasattr(m, 'init_part_weights'):
                m.init_part_weights()

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
            tensors.extend(self.pe_part.layer_tensors(blk.attn))
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
            num_extra_tokens=self.num_extra_tokens,
            antialias=self.interpolate_antialias)

    def _build_plan(self, hw: Tuple[int, int]) -> PEPlan:
        terms = self.pe_part.plan_terms([blk.attn for blk in self.blocks], hw,
                                        self.grid_size, self.num_extra_tokens)
        pe_norms = [getattr(blk, 'pe_norm', None) for blk in self.blocks]
        plan = self.pe_join.plan(
            self.resized_pos_embed(hw), terms.get('bias'), pe_norms)
        if 'qk' in terms:
            plan.qk = terms['qk']
        return plan

    @property
    def pe_setting(self) -> str:
        """``pe_type``, or ``'{pe_type}+{ape_type}'``."""
        return pe_setting_name(self.pe_type, self.ape_type)

    def train(self, mode: bool = True) -> 'LaPEViT':
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
        return self.pre_norm(self.drop_after_pos(x))

    def forward_blocks(self,
                       x: Tensor,
                       plan: PEPlan,
                       start: int,
                       end: int,
                       hw: Tuple[int, int],
                       cls_tokens: Optional[List[Tensor]] = None) -> Tensor:
        """Run blocks ``start .. end-1`` under the PE plan.

        This is the only loop over encoder blocks; ViT-Adapter calls it once
        per interaction.

        Args:
            cls_tokens (list, optional): When given, the token of each
                block's output that the pooling pools (``(B, C)``, the
                class token or the GAP token) is appended to it (for
                CeiT's LCA).
        """
        for i in range(start, end):
            if plan.residual[i] is not None:
                x = x + plan.residual[i]
            blk = self.blocks[i]
            args = (x, hw, plan.layer(i))
            if self.with_cp and x.requires_grad:
                x = cp.checkpoint(blk, *args, use_reentrant=False)
            else:
                x = blk(*args)
            if cls_tokens is not None:
                cls_tokens.append(
                    self.pool.layer_token(x, self.num_extra_tokens))
        return x

    def final(self, x: Tensor, plan: PEPlan) -> Tensor:
        """The final norm, plus the join's final term (MPVG), per token."""
        x = self.norm(x)
        if plan.final is not None:
            x = x + plan.final
        return x

    def _format_output(self,
                       x: Tensor,
                       hw: Tuple[int, int],
                       plan: PEPlan,
                       last: bool,
                       cls_tokens: Optional[List[Tensor]] = None) -> Tensor:
        pool = self.pool
        if pool is not None and pool.layer_cls_tokens:
            # LCA: one token of every layer; the final norm after it, and
            # MPVG's last PE term as GAP would add it (its token mean).
            y = pool(torch.stack(cls_tokens, dim=1), self.num_extra_tokens)
            if not self.final_norm:
                return y
            y = self.norm(y)
            return y if plan.final is None else y + plan.final_mean
        if last and self.final_norm:
            if pool is not None and pool.gap and plan.final is not None:
                # GAP of (LN(x) + f) is GAP(LN(x)) + mean(f): add the
                # input-independent (1, C) vector instead of (B, N, C).
                pooled = pool(self.norm(x), self.num_extra_tokens)
                return pooled + plan.final_mean
            x = self.final(x, plan)
        if pool is not None:
            return pool(x, self.num_extra_tokens)
        if self.out_type == 'raw':
            return x
        return tokens_to_map(x[:, self.num_extra_tokens:], hw)

    def _origin_outputs(self, x: Tensor, hw: Tuple[int, int]) -> List:
        """Outputs before the first layer (see ``LaPESegViT``)."""
        return []

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        x, hw = self.patch_embed(x)
        plan = self.pe_plan(hw)
        x = self.embed(x, plan)
        cls_tokens = ([] if self.pool is not None
                      and self.pool.layer_cls_tokens else None)
        outs, start = self._origin_outputs(x, hw), 0
        for idx in self.out_indices:
            x = self.forward_blocks(x, plan, start, idx + 1, hw, cls_tokens)
            start = idx + 1
            last = idx == self.num_layers - 1
            out = self._format_output(x, hw, plan, last, cls_tokens)
            if self.fc_norm is not None:
                out = self.fc_norm(out)
            outs.append(out)
        return tuple(outs)

    # ------------------------------------------------------------------
    # training utilities
    def _freeze_stages(self) -> None:
        if self.frozen_stages <= 0:
            return
        self.drop_after_pos.eval()
        frozen = [self.patch_embed, self.pre_norm]
        for name in ('cls_token', 'pos_embed'):
            t = getattr(self, name, None)
            if isinstance(t, nn.Parameter):
                t.requires_grad = False
        frozen.extend(self.blocks[:self.frozen_stages])
        if self.frozen_stages >= self.num_layers:
            frozen.append(self.pe_join)
            if self.final_norm:
                frozen.append(self.norm)
            if self.fc_norm is not None:
                frozen.append(self.fc_norm)
        for m in frozen:
            m.eval()
            for p in m.parameters():
                p.requires_grad = False

    def get_layer_depth(self,
                        param_name: str,
                        prefix: str = '') -> Tuple[int, int]:
        """Layer depth of a parameter, for layer-wise lr decay.

        Embeddings (tokenizer included) are depth 0, ``blocks.{i}.*`` (PE
        norms included) depth ``i + 1``, everything else (final norm,
        pooling, MPVG's last PE norm) ``num_layers + 1``.

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
    # checkpoints (the logic lives in mmlape.models.checkpoint.vit)
    def checkpoint_spec(self) -> ViTSpec:
        """What this backbone expects of a checkpoint."""
        pe = self.pos_embed
        proj = getattr(getattr(self, 'patch_embed', None), 'proj', None)
        return ViTSpec(
            pos_embed_shape=tuple(pe.shape)
            if isinstance(pe, nn.Parameter) else None,
            num_extra_tokens=self.num_extra_tokens,
            grid_size=self.grid_size,
            interpolate_mode=self.interpolate_mode,
            join=self.pe_join.name,
            pe_norm_layers=tuple(i for i, blk in enumerate(self.blocks)
                                 if hasattr(blk, 'pe_norm')),
            patch_weight_shape=tuple(proj.weight.shape) if isinstance(
                proj, nn.Conv2d) else None,
            num_layers=len(self.blocks),
            layer_scale=any(
                getattr(blk, 'layer_scale', False) for blk in self.blocks))
