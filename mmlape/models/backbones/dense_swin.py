"""mmdet's and mmseg's ``SwinTransformer`` signature on :class:`LaPESwin`.

References:
    mmdet 3.3.0's and mmseg 1.2.2's ``SwinTransformer`` (one signature).
"""
from typing import Dict, Optional, Sequence, Union

from mmlape.registry import register_model
from .base import host_img_size, pretrained_init_cfg
from .swin import LaPESwin

__all__ = ['LaPEDenseSwin']


@register_model()
class LaPEDenseSwin(LaPESwin):
    """mmdet's and mmseg's ``SwinTransformer``, with a pluggable PE join.

    A drop-in for the hosts' ``type='SwinTransformer'`` (same outputs on
    the same weights) plus :class:`LaPESwin`'s PE options. What mmlape's
    Swin does not compute (block dropout, another activation, no qkv bias,
    a qk scale, other strides) is refused by name.

    Args:
        pretrain_img_size (int | tuple): Sets the PE grid. Defaults to 224.
        in_channels (int): Defaults to 3.
        embed_dims (int): Defaults to 96.
        patch_size (int): Defaults to 4.
        window_size (int): Defaults to 7.
        mlp_ratio (int): Defaults to 4.
        depths (Sequence[int]): Defaults to ``(2, 2, 6, 2)``.
        num_heads (Sequence[int]): Defaults to ``(3, 6, 12, 24)``.
        strides (Sequence[int]): ``patch_size``, then 2 per merging.
            Defaults to ``(4, 2, 2, 2)``.
        out_indices (Sequence[int]): Defaults to ``(0, 1, 2, 3)``.
        qkv_bias (bool): Must be True. Defaults to True.
        qk_scale (float, optional): Must be None. Defaults to None.
        patch_norm (bool): A norm in the patch embedding and in each patch
            merging. Defaults to True.
        drop_rate (float): Must be 0. Defaults to 0.
        attn_drop_rate (float): Must be 0. Defaults to 0.
        drop_path_rate (float): Defaults to 0.1.
        use_abs_pos_embed (bool, optional): See :class:`LaPESwin`; the
            hosts' default, False, is what the ``Default`` join gives.
            Defaults to None.
        act_cfg (dict): Must be GELU. Defaults to ``dict(type='GELU')``.
        norm_cfg (dict): Every norm. Defaults to ``dict(type='LN')``.
        with_cp (bool): Defaults to False.
        pretrained (str, optional): Deprecated: a checkpoint path.
            Defaults to None.
        convert_weights (bool): mmdet's flag for official checkpoints;
            mmlape reads every layout it knows. Defaults to False.
        frozen_stages (int): With 0 or more, the patch embedding and the
            absolute PE; then stages ``0..frozen_stages-1`` with their
            output norms. Defaults to -1.
        pe_join (dict | str, optional): See :class:`LaPESwin`.
        cache_pe_plan (bool): See :class:`LaPESwin`. Defaults to True.
        init_cfg (dict, optional): Defaults to None.

    Example:
        >>> import torch
        >>> swin = LaPEDenseSwin(embed_dims=16, depths=(2, 2),
        ...                      num_heads=(1, 2), strides=(4, 2),
        ...                      out_indices=(0, 1), pe_join='LaPE')
        >>> [tuple(o.shape) for o in swin(torch.randn(1, 3, 60, 44))]
        [(1, 16, 15, 11), (1, 32, 8, 6)]
    """

    def __init__(self,
                 pretrain_img_size: Union[int, Sequence[int]] = 224,
                 in_channels: int = 3,
                 embed_dims: int = 96,
                 patch_size: int = 4,
                 window_size: int = 7,
                 mlp_ratio: int = 4,
                 depths: Sequence[int] = (2, 2, 6, 2),
                 num_heads: Sequence[int] = (3, 6, 12, 24),
                 strides: Sequence[int] = (4, 2, 2, 2),
                 out_indices: Sequence[int] = (0, 1, 2, 3),
                 qkv_bias: bool = True,
                 qk_scale: Optional[float] = None,
                 patch_norm: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 use_abs_pos_embed: Optional[bool] = None,
                 act_cfg: Dict = dict(type='GELU'),
                 norm_cfg: Dict = dict(type='LN'),
                 with_cp: bool = False,
                 pretrained: Optional[str] = None,
                 convert_weights: bool = False,
                 frozen_stages: int = -1,
                 pe_join: Union[None, str, Dict] = None,
                 cache_pe_plan: bool = True,
                 init_cfg: Optional[Dict] = None) -> None:
        init_cfg = pretrained_init_cfg(pretrained, init_cfg)
        for name, value, want in (('qkv_bias', qkv_bias,
                                   True), ('qk_scale', qk_scale,
                                           None), ('drop_rate', drop_rate, 0),
                                  ('attn_drop_rate', attn_drop_rate, 0),
                                  ('act_cfg', act_cfg, dict(type='GELU'))):
            if value != want:
                raise ValueError(f'{name}={value!r}: mmlape\'s Swin computes '
                                 f'{name}={want!r} only')
        strides = list(strides)
        if strides != [patch_size] + [2] * (len(depths) - 1):
            raise ValueError(f'strides={strides}: mmlape\'s Swin embeds '
                             f'patch_size={patch_size} patches and merges '
                             f'2x2 patches between stages')
        if not -1 <= frozen_stages <= len(depths):
            raise ValueError(f'frozen_stages={frozen_stages} must be in '
                             f'[-1, {len(depths)}]')
        patch = dict(norm_cfg=norm_cfg if patch_norm else None)
        super().__init__(
            arch=dict(
                embed_dims=embed_dims,
                depths=list(depths),
                num_heads=list(num_heads)),
            img_size=host_img_size(pretrain_img_size, 'pretrain_img_size'),
            patch_size=patch_size,
            in_channels=in_channels,
            window_size=window_size,
            drop_path_rate=drop_path_rate,
            out_indices=out_indices,
            use_abs_pos_embed=use_abs_pos_embed,
            with_cp=with_cp,
            pad_small_map=True,
            norm_cfg=norm_cfg,
            stage_cfgs=dict(
                block_cfgs=dict(norm_cfg=norm_cfg), downsample_cfg=patch),
            patch_cfg=patch,
            mlp_ratio=mlp_ratio,
            pe_join=pe_join,
            cache_pe_plan=cache_pe_plan,
            init_cfg=init_cfg)
        self.pretrained = pretrained
        self.frozen_stages = frozen_stages
        self._freeze_stages()

    def _freeze_stages(self) -> None:
        """The hosts' freezing (see ``frozen_stages``); with every stage
        frozen, the join's norms too."""
        if self.frozen_stages < 0:
            return
        if self.pos_embed is not None:
            self.pos_embed.requires_grad = False
        frozen = [self.patch_embed, self.drop_after_pos]
        frozen.extend(self.layers[:self.frozen_stages])
        frozen.extend(
            getattr(self, f'norm{s}') for s in self.out_indices
            if s < self.frozen_stages)
        if self.frozen_stages == self.num_stages:
            frozen.append(self.pe_join)
        for m in frozen:
            m.eval()
            for p in m.parameters():
                p.requires_grad = False
