"""ViT-Adapter on mmlape's ViT: one backbone for mmdet and mmseg.

The ViT blocks run through :meth:`LaPEViT.forward_blocks`, one call per
interaction. Fine-tuning an MPVG checkpoint: docs/recipes.md, "MPVG in
ViT-Adapter".

References:
    Chen et al., "Vision Transformer Adapter for Dense Predictions", ICLR
    2023, and its official code.
"""
from typing import Any, Dict, List, Literal, Optional, Sequence, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from torch import Tensor

from mmlape.registry import register_model
from ..layers.adapter import (InteractionBlock, SpatialPriorModule,
                              deform_inputs, init_adapter_weights,
                              reset_deformable_attention)
from ..layers.pe_join import resolve_pe_join
from ..layers.tokenizers import tokens_to_map
from .vit import LaPEViT

__all__ = ['LaPEViTAdapter']


@register_model()
class LaPEViTAdapter(LaPEViT):
    """ViT-Adapter with a pluggable PE join; outputs strides 4, 8, 16, 32.

    Args:
        arch (str | dict): ``'tiny'``, ``'small'``, ``'base'`` (DeiT widths
            with ViT-Adapter's deformable-attention heads), ``'test-tiny'``,
            or a dict with the ViT keys plus ``deform_num_heads``.
            Defaults to ``'tiny'``.
        img_size (int): Pretraining size of the ViT (the PE grid).
            Defaults to 224.
        pe_join (dict | str, optional): The join; ``Default``, ``LaPE``,
            ``PVG``, or ``MPVG`` (with the final norm; an MPVG-pretrained
            DeiT may also be fine-tuned with ``PVG``).
            Defaults to ``Default``.
        conv_inplane (int): Width of the spatial prior module.
            Defaults to 64.
        n_points (int): Deformable sampling points. Defaults to 4.
        deform_num_heads (int, optional): Heads of the deformable attention.
            Defaults to the arch's.
        init_values (float): Initial injector gamma. Defaults to 0.
        interaction_indexes (Sequence[Sequence[int]], optional): First and
            last block of each interaction. Defaults to four equal slices.
        with_cffn (bool): ConvFFN in the extractors. Defaults to True.
        cffn_ratio (float): ConvFFN hidden ratio. Defaults to 0.25.
        deform_ratio (float): Value projection ratio of the deformable
            attention. Defaults to 1.0.
        add_vit_feature (bool): Add ViT features to the pyramid.
            Defaults to True.
        vit_feature_source (str): Which ViT output feeds the pyramid:
            ``'last'`` (the last stage for every level, the original
            detection code) or ``'per_interaction'`` (each interaction's
            output for its level, the original segmentation code).
            Defaults to ``'last'``.
        final_norm (bool, optional): Apply the ViT's final norm (plus
            MPVG's final term) to the last ViT output ``x_L`` before the
            pyramid adds it (the official ViT-Adapter has none; the
            extractors always read raw tokens). Needs
            ``add_vit_feature=True``. Defaults to None: True where the join
            adds its PE at the final norm (MPVG) and the pyramid adds the
            ViT feature, else False.
        adapter_norm_cfg (dict): Norm of the spatial prior module and of the
            four output norms. Defaults to ``dict(type='BN')``; the GPU
            configs use SyncBN.
        layer_scale (bool): Layer scale in the ViT blocks (init 1.0).
            Defaults to True.
        window_size (int | Sequence[int]): Window attention per block
            (0 = global). Defaults to 0.
        **kwargs: Other :class:`LaPEViT` arguments (``drop_path_rate``,
            ``with_cp``, ``init_cfg``, ...).

    Example:
        >>> m = LaPEViTAdapter('test-tiny', img_size=64, pe_join='LaPE')
        >>> [f.shape[-1] for f in m(torch.randn(1, 3, 64, 96))]
        [24, 12, 6, 3]
    """
    adapter_zoo = {
        'tiny': dict(arch='deit-tiny', deform_num_heads=6),
        'small': dict(arch='deit-small', deform_num_heads=6),
        'base': dict(arch='deit-base', deform_num_heads=12),
        'test-tiny': dict(arch='test-tiny', deform_num_heads=2),
    }
    #: Keys a ViT checkpoint lacks by design (adapter modules, layer
    #: scale): summarised on loading, not reported as missing.
    new_key_pattern = (r'^(level_embed|spm\.|interactions\.|up\.|norm[1-4]\.'
                       r'|blocks\.\d+\.gamma[12]$)')

    @classmethod
    def arch_settings_of(cls, arch: Any) -> Dict:
        """A preset of :attr:`adapter_zoo` names a ViT arch and adds options
        of the adapter."""
        if isinstance(arch, dict):
            return dict(arch)
        preset = dict(cls.adapter_zoo.get(arch) or {})
        return dict(super().arch_settings_of(preset.pop('arch', arch)),
                    **preset)

    def __init__(self,
                 arch: Union[str, Dict] = 'tiny',
                 img_size: int = 224,
                 patch_size: int = 16,
                 pe_join: Union[None, str, Dict] = None,
                 conv_inplane: int = 64,
                 n_points: int = 4,
                 deform_num_heads: Optional[int] = None,
                 init_values: float = 0.,
                 interaction_indexes: Optional[Sequence[Sequence[int]]] = None,
                 with_cffn: bool = True,
                 cffn_ratio: float = 0.25,
                 deform_ratio: float = 1.0,
                 add_vit_feature: bool = True,
                 vit_feature_source: Literal['last',
                                             'per_interaction'] = 'last',
                 final_norm: Optional[bool] = None,
                 adapter_norm_cfg: Dict = dict(type='BN'),
                 layer_scale: bool = True,
                 drop_path_rate: float = 0.,
                 with_cp: bool = False,
                 **kwargs) -> None:
        if isinstance(arch, str):
            if arch not in self.adapter_zoo:
                raise ValueError(f'Unknown arch={arch!r}; choose one of '
                                 f'{sorted(self.adapter_zoo)} or pass a dict')
            preset = dict(self.adapter_zoo[arch])
            vit_arch = preset['arch']
        else:
            arch = dict(arch)
            preset = dict(deform_num_heads=arch.pop('deform_num_heads', 6))
            vit_arch = arch
        for key in ('with_cls_token', 'out_type', 'out_indices'):
            if key in kwargs:
                raise ValueError(f'{key} is fixed by ViT-Adapter (no class '
                                 f'token, 4-level pyramid)')
        if final_norm is None:
            # MPVG's last-norm term needs the final norm ViT-Adapter lacks
            final_norm = add_vit_feature and resolve_pe_join(
                pe_join)[0].adds_pe_at_final_norm
        if not isinstance(final_norm, bool):
            raise TypeError(f'final_norm={final_norm!r}: it must be True or '
                            f'False')
        if final_norm and not add_vit_feature:
            raise ValueError(
                'final_norm=True normalises the ViT feature that the '
                'pyramid adds, but add_vit_feature=False adds none: set '
                'add_vit_feature=True or final_norm=False')
        if vit_feature_source not in ('last', 'per_interaction'):
            raise ValueError(
                f"vit_feature_source={vit_feature_source!r}; choose 'last' "
                f"(detection) or 'per_interaction' (segmentation)")
        super().__init__(
            arch=vit_arch,
            img_size=img_size,
            patch_size=patch_size,
            pe_join=pe_join,
            with_cls_token=False,
            out_type='featmap',
            final_norm=final_norm,
            drop_path_rate=drop_path_rate,
            layer_scale_init_value=1.0 if layer_scale else 0.,
            with_cp=with_cp,
            **kwargs)
        if patch_size != 16:
            raise ValueError('ViT-Adapter aligns the ViT with a 1/16 '
                             f'pyramid level: patch_size must be 16, got '
                             f'{patch_size}')
        if self.pe_join.adds_pe_at_final_norm and not final_norm:
            join = self.pe_join.name
            raise ValueError(
                f'pe_join.type={join!r} with final_norm=False: ViT-Adapter '
                f"has no final ViT norm, so {join}'s last-norm term needs "
                "final_norm=True (LN(x_L) + LN'_last(pos_0) on the ViT "
                "feature of the pyramid). To fine-tune an MPVG checkpoint "
                "with its layer-wise join only, use pe_join='PVG'.")
        dims = self.embed_dims
        if interaction_indexes is None:
            step = self.num_layers // 4
            interaction_indexes = [[i * step, (i + 1) * step - 1]
                                   for i in range(4)]
            interaction_indexes[-1][1] = self.num_layers - 1
        self.interaction_indexes = [
            list(map(int, i)) for i in interaction_indexes
        ]
        flat = [i for pair in self.interaction_indexes for i in pair]
        if flat != sorted(flat) or flat[0] != 0 or \
                flat[-1] != self.num_layers - 1 or any(
                    b + 1 != a for b, a in zip(flat[1::2], flat[2::2])):
            raise ValueError(
                f'interaction_indexes={interaction_indexes} must cover '
                f'blocks 0..{self.num_layers - 1} in consecutive slices')
        self.add_vit_feature = add_vit_feature
        self.vit_feature_source = vit_feature_source
        self.level_embed = nn.Parameter(torch.zeros(3, dims))
        self.spm = SpatialPriorModule(conv_inplane, dims, adapter_norm_cfg)
        self.interactions = nn.ModuleList([
            InteractionBlock(
                dims,
                num_heads=deform_num_heads or preset['deform_num_heads'],
                num_points=n_points,
                deform_ratio=deform_ratio,
                init_values=init_values,
                with_cffn=with_cffn,
                cffn_ratio=cffn_ratio,
                drop=0.,
                drop_path=drop_path_rate,
                norm_cfg=dict(type='LN', eps=1e-6),
                extra_extractor=i == len(self.interaction_indexes) - 1,
                with_cp=with_cp) for i in range(len(self.interaction_indexes))
        ])
        self.up = nn.ConvTranspose2d(dims, dims, 2, 2)
        for i in range(1, 5):
            self.add_module(f'norm{i}',
                            build_norm_layer(adapter_norm_cfg, dims)[1])
        for module in (self.spm, self.interactions, self.up, self.norm1,
                       self.norm2, self.norm3, self.norm4):
            init_adapter_weights(module)
        nn.init.normal_(self.level_embed)

    def init_weights(self) -> None:
        """Load or apply ``init_cfg``, then reset the deformable attentions
        (a generic ``nn.Linear`` pass would overwrite them)."""
        cfgs = self.init_cfg if isinstance(self.init_cfg,
                                           list) else [self.init_cfg]
        pretrained = any(
            isinstance(c, dict) and c.get('type') == 'Pretrained'
            for c in cfgs)
        reset = not (pretrained or self._is_init)
        super().init_weights()
        if reset:
            reset_deformable_attention(self)

    def forward(self, x: Tensor) -> List[Tensor]:
        h, w = x.shape[-2:]
        if h % 32 or w % 32:
            raise ValueError(
                f'ViT-Adapter needs inputs divisible by 32 (its pyramid goes '
                f'to 1/32), got {h}x{w}: use size_divisor=32 in the data '
                f'preprocessor')
        inj_inputs, ext_inputs = deform_inputs(h, w, x.device)
        c1, c2, c3, c4 = self.spm(x)
        c = torch.cat([
            c2 + self.level_embed[0], c3 + self.level_embed[1],
            c4 + self.level_embed[2]
        ],
                      dim=1)
        tokens, hw = self.patch_embed(x)
        plan = self.pe_plan(hw)
        tokens = self.embed(tokens, plan)
        shapes = [(hw[0] * 2, hw[1] * 2), hw, (hw[0] // 2, hw[1] // 2)]
        outs = []
        for layer, (start, end) in zip(self.interactions,
                                       self.interaction_indexes):
            tokens = layer.injector(tokens, c, inj_inputs)
            tokens = self.forward_blocks(tokens, plan, start, end + 1, hw)
            c = layer.extract(c, tokens, ext_inputs, shapes)
            outs.append(tokens)
        if self.final_norm:
            tokens = outs[-1] = self.final(tokens, plan)

        n2, n3 = c2.shape[1], c3.shape[1]
        c2 = tokens_to_map(c[:, :n2], shapes[0])
        c3 = tokens_to_map(c[:, n2:n2 + n3], shapes[1])
        c4 = tokens_to_map(c[:, n2 + n3:], shapes[2])
        c1 = self.up(c2) + c1
        feats = [c1, c2, c3, c4]
        if self.add_vit_feature:
            if self.vit_feature_source == 'last':
                vit = [tokens_to_map(tokens, hw)] * 4
            else:
                vit = [tokens_to_map(t, hw) for t in outs]
            for i, scale in enumerate((4, 2, 1, 0.5)):
                v = vit[i]
                if scale != 1:
                    v = F.interpolate(
                        v,
                        scale_factor=scale,
                        mode='bilinear',
                        align_corners=False)
                feats[i] = feats[i] + v
        # the norms keep their input's layout: hand them NCHW maps
        return [
            getattr(self, f'norm{i + 1}')(f.contiguous())
            for i, f in enumerate(feats)
        ]
