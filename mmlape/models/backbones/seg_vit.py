"""mmseg's ``VisionTransformer`` signature on :class:`LaPEViT`.

References:
    mmseg 1.2.2's ``VisionTransformer``; Segmenter (Strudel et al., ICCV
    2021).
"""
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch.nn as nn
from torch import Tensor

from mmlape.registry import register_model
from ..checkpoint.vit import mmseg_vit_name
from ..layers.pe_plan import PEPlan
from ..layers.pos_embed import resize_pos_embed
from ..layers.tokenizers import tokens_to_map
from .base import host_img_size, pretrained_init_cfg
from .vit import LaPEViT

__all__ = ['LaPESegViT']


@register_model()
class LaPESegViT(LaPEViT):
    """mmseg's ``VisionTransformer``, with a pluggable PE join.

    A drop-in for ``type='VisionTransformer'`` in mmseg configs: mmseg
    1.2.2's arguments and defaults, the same outputs on the same weights
    (mmseg checkpoints are converted on load), plus :class:`LaPEViT`'s PE
    options.

    Args:
        img_size (int | tuple): Pretraining size (sets the PE grid).
            Defaults to 224.
        patch_size (int): Defaults to 16.
        patch_pad (str | int | None): ``'corner'`` or ``'same'`` pads
            inputs that are not whole patches (mmcv's adaptive padding), an
            int pads the projection, None refuses such inputs. Defaults to
            ``'corner'``.
        in_channels (int): Defaults to 3.
        embed_dims (int): Defaults to 768.
        num_layers (int): Defaults to 12.
        num_heads (int): Defaults to 12.
        mlp_ratio (int): Feed-forward width over ``embed_dims``.
            Defaults to 4.
        out_origin (bool): Also return the embedding before the first layer
            (after the PE and ``pre_norm``), first. Defaults to False.
        out_indices (int | list | tuple): Layers whose feature map is
            returned. Defaults to -1.
        qkv_bias (bool): Biases of the attention's input and output
            projections (as mmseg's ``nn.MultiheadAttention``). Defaults to
            True.
        drop_rate (float): Defaults to 0.
        attn_drop_rate (float): Defaults to 0.
        drop_path_rate (float): Stochastic depth, on the FFN residual only
            (as mmseg). Defaults to 0.
        with_cls_token (bool): Defaults to True.
        output_cls_token (bool): Return ``[featmap, cls_token]`` per output;
            needs ``with_cls_token``. Defaults to False.
        norm_cfg (dict): Defaults to ``dict(type='LN')`` (eps 1e-5).
        act_cfg (dict): The MLP's activation. Defaults to GELU.
        patch_norm (bool): A norm after the patch projection.
            Defaults to False.
        patch_bias (bool): Bias of the patch projection. Defaults to False.
        pre_norm (bool): A norm before the first layer. Defaults to False.
        final_norm (bool): Defaults to False.
        interpolate_mode (str): How the PE is resized. Defaults to
            ``'bicubic'``.
        num_fcs (int): Linear layers of the MLP; must be 2. Defaults to 2.
        norm_eval (bool): Keep norm layers in eval mode while training.
            Defaults to False.
        with_cp (bool): Defaults to False.
        frozen_exclude (list[str]): Parameters whose name (mmlape's or
            mmseg's) contains none of these are frozen; ``'all'`` freezes
            nothing. Defaults to ``['all']``.
        pretrained (str, optional): Deprecated: a checkpoint path, the same
            as ``init_cfg=dict(type='Pretrained', checkpoint=pretrained)``.
            Defaults to None.
        pe_join (dict | str, optional): See :class:`LaPEViT`. Defaults to
            ``Default``.
        pe_type (str, optional): See :class:`LaPEViT`. Defaults to
            ``learnable``.
        ape_type (str, optional): See :class:`LaPEViT`. Defaults to None.
        rope_theta (float, optional): See :class:`LaPEViT`. Defaults to
            None.
        cache_pe_plan (bool): See :class:`LaPEViT`. Defaults to True.
        init_cfg (dict, optional): Defaults to None.

    Raises:
        TypeError: ``img_size``, ``out_indices`` or ``pretrained`` of a
            wrong type (as mmseg).
        ValueError: ``output_cls_token`` without a class token, both
            ``pretrained`` and ``init_cfg``, an ``img_size`` of three
            entries, and :class:`LaPEViT`'s refusals.

    Example:
        >>> import torch
        >>> vit = LaPESegViT(img_size=64, embed_dims=64, num_layers=2,
        ...                  num_heads=2, out_indices=(0, 1))
        >>> [o.shape for o in vit(torch.randn(1, 3, 70, 64))]
        [torch.Size([1, 64, 5, 4]), torch.Size([1, 64, 5, 4])]
    """

    def __init__(self,
                 img_size: Union[int, Sequence[int]] = 224,
                 patch_size: int = 16,
                 patch_pad: Union[None, str, int] = 'corner',
                 in_channels: int = 3,
                 embed_dims: int = 768,
                 num_layers: int = 12,
                 num_heads: int = 12,
                 mlp_ratio: int = 4,
                 out_origin: bool = False,
                 out_indices: Union[int, Sequence[int]] = -1,
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 with_cls_token: bool = True,
                 output_cls_token: bool = False,
                 norm_cfg: Dict = dict(type='LN'),
                 act_cfg: Dict = dict(type='GELU'),
                 patch_norm: bool = False,
                 patch_bias: bool = False,
                 pre_norm: bool = False,
                 final_norm: bool = False,
                 interpolate_mode: str = 'bicubic',
                 num_fcs: int = 2,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 frozen_exclude: Sequence[str] = ('all', ),
                 pretrained: Optional[str] = None,
                 pe_join: Union[None, str, Dict] = None,
                 pe_type: Optional[str] = None,
                 ape_type: Optional[str] = None,
                 rope_theta: Optional[float] = None,
                 cache_pe_plan: bool = True,
                 init_cfg: Optional[Dict] = None) -> None:
        img_size = host_img_size(img_size)
        if output_cls_token and not with_cls_token:
            raise ValueError('output_cls_token=True needs '
                             'with_cls_token=True')
        init_cfg = pretrained_init_cfg(pretrained, init_cfg)
        if not isinstance(out_indices,
                          (int, list, tuple)) or isinstance(out_indices, bool):
            raise TypeError(f'out_indices must be an int, list or tuple, got '
                            f'{out_indices!r}')
        super().__init__(
            arch=dict(
                embed_dims=embed_dims,
                num_layers=num_layers,
                num_heads=num_heads,
                feedforward_channels=int(mlp_ratio * embed_dims)),
            img_size=img_size,
            patch_size=patch_size,
            in_channels=in_channels,
            patch_bias=patch_bias,
            pe_join=pe_join,
            pe_type=pe_type,
            ape_type=ape_type,
            rope_theta=rope_theta,
            with_cls_token=with_cls_token,
            out_type='featmap',
            out_indices=out_indices,
            final_norm=final_norm,
            qkv_bias=qkv_bias,
            drop_rate=drop_rate,
            attn_drop_rate=attn_drop_rate,
            drop_path_rate=drop_path_rate,
            norm_cfg=norm_cfg,
            interpolate_mode=interpolate_mode,
            with_cp=with_cp,
            cache_pe_plan=cache_pe_plan,
            tokenizer=dict(
                type='Patch',
                padding=patch_pad,
                norm_cfg=norm_cfg if patch_norm else None),
            # mmseg: no drop path on the attention residual, and without
            # a qkv bias no output-projection bias (nn.MultiheadAttention)
            layer_cfgs=dict(
                act_cfg=act_cfg,
                num_fcs=num_fcs,
                attn_drop_path=False,
                proj_bias=qkv_bias),
            pre_norm=pre_norm,
            init_cfg=init_cfg)
        self.pretrained = pretrained
        self.out_origin = out_origin
        self.output_cls_token = output_cls_token
        self.norm_eval = norm_eval
        self.frozen_exclude = list(frozen_exclude)
        self._freeze_excluded()

    @staticmethod
    def resize_pos_embed(pos_embed: Tensor, input_shape: Tuple[int, int],
                         pos_shape: Tuple[int, int], mode: str) -> Tensor:
        """mmseg's static helper: a ``(1, 1 + h*w, C)`` PE (class row
        first) resized from the ``pos_shape`` grid to ``input_shape``."""
        if pos_embed.ndim != 3:
            raise ValueError(f'pos_embed must be (1, L, C), got '
                             f'{tuple(pos_embed.shape)}')
        return resize_pos_embed(
            pos_embed,
            tuple(pos_shape),
            tuple(input_shape),
            mode=mode,
            num_extra_tokens=1)

    def _freeze_excluded(self) -> None:
        """mmseg's ``frozen_exclude``: freeze what no entry names."""
        if 'all' in self.frozen_exclude:
            return
        for name, param in self.named_parameters():
            names = (name, mmseg_vit_name(name))
            if not any(ex in n for ex in self.frozen_exclude for n in names):
                param.requires_grad = False

    def train(self, mode: bool = True) -> 'LaPESegViT':
        super().train(mode)
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.eval()
        return self

    # ------------------------------------------------------------------
    # mmseg's outputs
    def _seg_output(self, x: Tensor, hw: Tuple[int,
                                               int]) -> Union[Tensor, List]:
        featmap = tokens_to_map(x[:, self.num_extra_tokens:], hw)
        if self.output_cls_token:
            return [featmap, x[:, 0]]
        return featmap

    def _origin_outputs(self, x: Tensor, hw: Tuple[int, int]) -> List:
        return [self._seg_output(x, hw)] if self.out_origin else []

    def _format_output(
            self,
            x: Tensor,
            hw: Tuple[int, int],
            plan: PEPlan,
            last: bool,
            cls_tokens: Optional[List[Tensor]] = None) -> Union[Tensor, List]:
        if last and self.final_norm:
            x = self.final(x, plan)
        return self._seg_output(x, hw)
