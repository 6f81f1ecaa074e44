"""What position embedding each layer receives, and how alike its tokens are.

References:
    The LaPE paper's per-layer cosine-similarity figures (ICCV 2023).
"""
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

__all__ = [
    'received_pes', 'cosine_similarity', 'token_similarity_maps',
    'plot_similarity_grid'
]


def _affine(norm: torch.nn.Module, pos: Tensor) -> Tensor:
    out = pos
    if getattr(norm, 'weight', None) is not None:
        out = out * norm.weight
    if getattr(norm, 'bias', None) is not None:
        out = out + norm.bias
    return out


@torch.no_grad()
def received_pes(model,
                 hw: Optional[Tuple[int,
                                    int]] = None) -> List[Optional[Tensor]]:
    """The PE each layer of an mmlape ViT receives, under its join.

    A layer-wise join (LaPE/PVG/MPVG) hands a layer the PE its own norm
    produced. A PE in the residual stream (``default`` from the input on,
    ``share``/``unshare`` at every layer, PVG's layer 0) reaches a layer
    through that layer's ``norm1`` affine, as in the LaPE paper. A layer that
    gets no PE (beyond LaPE's eta) is None.

    Args:
        model: A :class:`~mmlape.models.LaPEViT` (or subclass).
        hw (tuple, optional): Patch grid. Defaults to the model's own.

    Returns:
        list[Tensor | None]: Per layer, ``(N', C)`` (class-token row
        included when the model has one).
    """
    if model.pe_part.kind == 'relative':
        raise ValueError(f'received_pes needs an absolute pe_type; a '
                         f'relative PE (pe_type={model.pe_type!r}) has no '
                         f'per-token embedding')
    hw = tuple(hw or model.grid_size)
    plan = model.pe_plan(hw)  # cached in eval mode
    stream = plan.input
    out = []
    for i, blk in enumerate(model.blocks):
        if plan.attn[i] is not None:
            out.append(plan.attn[i][0])
        elif plan.residual[i] is not None:
            out.append(_affine(blk.norm1, plan.residual[i])[0])
        elif stream is not None:
            out.append(_affine(blk.norm1, stream)[0])
        else:
            out.append(None)
    return out


def cosine_similarity(pe: Tensor) -> Tensor:
    """Token-by-token cosine similarity of a ``(N, C)`` PE: ``(N, N)``."""
    unit = torch.nn.functional.normalize(pe.float(), dim=-1)
    return unit @ unit.T


def token_similarity_maps(
        model,
        token: Optional[int] = None,
        hw: Optional[Tuple[int, int]] = None) -> Dict[str, np.ndarray]:
    """Per-layer similarity matrices and one token's map over the grid.

    Args:
        model: An mmlape ViT.
        token (int, optional): Patch index (row-major, class token not
            counted). Defaults to the centre patch.
        hw (tuple, optional): Patch grid. Defaults to the model's own.

    Returns:
        dict: ``similarity`` ``(L, N, N)``, ``maps`` ``(L, H, W)`` (NaN for
        layers without a PE), ``pe`` ``(L, N, C)``, ``token`` and ``hw``.
    """
    hw = tuple(hw or model.grid_size)
    n = hw[0] * hw[1]
    if token is None:
        token = (hw[0] // 2) * hw[1] + hw[1] // 2
    if not 0 <= token < n:
        raise ValueError(f'token={token} is outside the {hw[0]}x{hw[1]} grid')
    extra = model.num_extra_tokens
    pes = received_pes(model, hw)
    sims = np.full((len(pes), n, n), np.nan, dtype=np.float32)
    raw = np.full((len(pes), n, model.embed_dims), np.nan, dtype=np.float32)
    for i, pe in enumerate(pes):
        if pe is None:
            continue
        patches = pe[extra:]
        raw[i] = patches.cpu().numpy()
        sims[i] = cosine_similarity(patches).cpu().numpy()
    maps = sims[:, token, :].reshape(len(pes), *hw)
    return dict(similarity=sims, maps=maps, pe=raw, token=token, hw=hw)


def plot_similarity_grid(rows: Dict[str, np.ndarray],
                         path: str,
                         token_hw: Optional[Sequence[int]] = None,
                         title: str = '') -> None:
    """Draw one row of per-layer maps per model and save a PNG.

    Args:
        rows (dict[str, ndarray]): Name -> ``(L, H, W)`` similarity maps.
        path (str): Output PNG.
        token_hw (Sequence[int], optional): ``(row, col)`` of the chosen
            token, marked on every map.
        title (str): Figure title.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    names = list(rows)
    layers = max(m.shape[0] for m in rows.values())
    fig, axes = plt.subplots(
        len(names),
        layers,
        figsize=(1.6 * layers + 1, 1.7 * len(names)),
        squeeze=False)
    image = None
    for r, name in enumerate(names):
        for layer in range(layers):
            ax = axes[r][layer]
            ax.set_xticks([])
            ax.set_yticks([])
            maps = rows[name]
            if layer < maps.shape[0] and not np.isnan(maps[layer]).all():
                image = ax.imshow(maps[layer], vmin=-1, vmax=1, cmap='RdBu_r')
                if token_hw is not None:
                    ax.plot(token_hw[1], token_hw[0], 'k+', markersize=6)
            else:
                ax.text(
                    0.5,
                    0.5,
                    'no PE',
                    ha='center',
                    va='center',
                    transform=ax.transAxes,
                    fontsize=8)
            if r == 0:
                ax.set_title(f'layer {layer}', fontsize=9)
            if layer == 0:
                ax.set_ylabel(name, fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label='cosine similarity')
    if title:
        fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110, bbox_inches='tight')
    plt.close(fig)
