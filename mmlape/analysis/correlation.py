"""Correlation of token embeddings with the position embedding, per layer.

References:
    The MPVG paper (AAAI 2025), Fig. 4 (Pearson's r between the normalised
    token embedding, layer ``l``'s ``norm1`` output, and the PE the layer
    receives, over patch tokens and channels, averaged over images) and
    Figs. 2/6 (token heatmaps around the last LayerNorm).
"""
from typing import Dict

import numpy as np
import torch
from torch import Tensor

from .pe_similarity import received_pes

__all__ = ['pearson', 'token_pe_statistics']


def pearson(a: Tensor, b: Tensor) -> Tensor:
    """Pearson's r of ``a[i]`` and ``b[i]`` for every leading index ``i``.

    Args:
        a (Tensor): ``(B, ...)``.
        b (Tensor): Same shape as ``a``.

    Returns:
        Tensor: ``(B,)`` float64.
    """
    a = a.flatten(1).double()
    b = b.flatten(1).double()
    a = a - a.mean(1, keepdim=True)
    b = b - b.mean(1, keepdim=True)
    return (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1)).clamp_min(1e-12)


@torch.no_grad()
def token_pe_statistics(backbone, images: Tensor) -> Dict[str, np.ndarray]:
    """Per-layer token/PE correlation and last-norm heatmaps of a batch.

    Args:
        backbone: An mmlape ViT (eval mode).
        images (Tensor): Normalised images ``(B, 3, H, W)``.

    Returns:
        dict: ``corr`` ``(B, L)`` (NaN where a layer gets no PE),
        ``before`` and ``after`` ``(B, h, w)``: the L2 norm of each patch's
        embedding before and after the final norm (plus MPVG's final term).
    """
    x, hw = backbone.patch_embed(images)
    plan = backbone.pe_plan(hw)
    pes = received_pes(backbone, hw)
    x = backbone.embed(x, plan)
    extra = backbone.num_extra_tokens
    corr = np.full((images.shape[0], backbone.num_layers), np.nan)
    for i, blk in enumerate(backbone.blocks):
        inp = x if plan.residual[i] is None else x + plan.residual[i]
        if pes[i] is not None:
            tokens = blk.norm1(inp)[:, extra:]
            pe = pes[i][extra:].to(tokens.dtype)
            corr[:, i] = pearson(tokens, pe[None].expand_as(tokens)).numpy()
        x = backbone.forward_blocks(x, plan, i, i + 1, hw)
    after = backbone.final(x, plan) if backbone.final_norm else x
    b = images.shape[0]
    before = x[:, extra:].norm(dim=-1).reshape(b, *hw)
    after = after[:, extra:].norm(dim=-1).reshape(b, *hw)
    return dict(corr=corr, before=before.numpy(), after=after.numpy())
