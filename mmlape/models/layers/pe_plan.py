"""The PE plan: what a join hands a backbone for one forward pass.

A :class:`PEPlan` gives each block its :class:`LayerPE` bundle
(``blk(x, hw, pe)``). It depends on the weights and the patch grid, never
on the image, so in eval mode it is cached per grid (:class:`PEPlanCache`).
"""
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import (Callable, Hashable, List, NamedTuple, Optional, Sequence,
                    Tuple)

import torch
from torch import Tensor

__all__ = [
    'CarryFn', 'QKFn', 'LayerPE', 'PEPlan', 'PEPlanCache', 'autocast_dtype'
]

#: ``carry(pe, stage)``: a staged backbone's hook that moves a PE
#: ``(1, N_{s-1}, C_{s-1})`` on stage ``s - 1``'s grid across the boundary
#: into stage ``s`` (``(1, N_s, C_s)``), as the tokens cross it.
CarryFn = Callable[[Tensor, int], Tensor]
#: ``qk(q, k) -> (q, k)``: a map of one layer's queries and keys
#: ``(B, heads, N', head_dims)`` before the logits, for a PE that is not
#: added (a rotary PE rotates each head's q and k by its positions). A
#: plan builds it for the grid, so it may hold the grid's tensors.
QKFn = Callable[[Tensor, Tensor], Tuple[Tensor, Tensor]]


class LayerPE(NamedTuple):
    """What one encoder layer receives from a plan, read by field name by
    every block type (``blk(x, hw, pe)``).

    Attributes:
        attn (Tensor, optional): ``(1, N', C)``, added to the attention
            input ``norm1(x)`` only.
        bias (Tensor, optional): ``(1, heads, N', N')``, added to the
            attention logits (relative PE).
        qk (QKFn, optional): Applied to the queries and keys (see
            :data:`QKFn`).
    """
    attn: Optional[Tensor] = None
    bias: Optional[Tensor] = None
    qk: Optional[QKFn] = None


@dataclass
class PEPlan:
    """What the position embedding contributes to one forward pass.

    For layer ``l`` the backbone computes
    ``x = x + residual[l]`` and then
    ``x = x + MSA(norm1(x) + attn[l], bias=bias[l], qk=qk[l]) ...`` (see
    :class:`~mmlape.models.layers.TransformerBlock`). ``None`` means nothing
    is added. On a staged backbone ``N'`` and ``C`` are those of the layer's
    stage, and ``final`` is on the last stage's grid.

    Attributes:
        input (Tensor, optional): ``(1, N', C)`` added to the tokens before
            layer 0.
        residual (list[Tensor | None]): ``(1, N', C)`` per layer, added to
            the residual stream before that layer.
        attn (list[Tensor | None]): ``(1, N', C)`` per layer, added to the
            attention input ``norm1(x)`` only.
        bias (list[Tensor | None]): ``(1, heads, N', N')`` per layer, added
            to the attention logits (relative PE).
        qk (list[QKFn | None]): Per layer, a map of the queries and keys
            (see :data:`QKFn`).
        final (Tensor, optional): ``(1, N', C)`` added after the final norm.
        final_mean (Tensor, optional): ``(1, C)``, the mean of ``final``
            over the patch tokens: what ``final`` adds to a globally
            average-pooled output. Set whenever ``final`` is.
    """
    num_layers: int
    input: Optional[Tensor] = None
    residual: List[Optional[Tensor]] = field(default_factory=list)
    attn: List[Optional[Tensor]] = field(default_factory=list)
    bias: List[Optional[Tensor]] = field(default_factory=list)
    qk: List[Optional[QKFn]] = field(default_factory=list)
    final: Optional[Tensor] = None
    final_mean: Optional[Tensor] = None

    def __post_init__(self) -> None:
        for name in ('residual', 'attn', 'bias', 'qk'):
            if not getattr(self, name):
                setattr(self, name, [None] * self.num_layers)

    def layer(self, index: int) -> LayerPE:
        """What layer ``index``'s block takes (the residual term is added
        to the stream before the block, by the backbone's loop)."""
        return LayerPE(
            attn=self.attn[index], bias=self.bias[index], qk=self.qk[index])


class PEPlanCache:
    """Eval-mode cache of PE plans, one per input grid.

    Keeps the ``size`` most recently used grids and rebuilds a plan when a
    weight it depends on changed (an in-place update bumps the version; a
    replaced tensor has other storage, kept alive by the entry so no new
    tensor can take its address).

    Args:
        size (int): Grids kept. Defaults to 8.

    Example:
        >>> import torch
        >>> from mmlape.models.layers.pe_join import build_pe_join
        >>> join = build_pe_join('LaPE', num_layers=1, embed_dims=8,
        ...                      with_cls_token=False)
        >>> pos, norms = torch.randn(1, 4, 8), [join.build_layer_norm(0)]
        >>> cache = PEPlanCache()
        >>> build = lambda: join.plan(pos, None, norms)
        >>> cache.get((2, 2), [pos], build) is cache.get((2, 2), [pos], build)
        True
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._plans: OrderedDict = OrderedDict()

    def get(self, key: Hashable, tensors: Sequence[Tensor],
            build: Callable[[], PEPlan]) -> PEPlan:
        """The cached plan of ``key`` if ``tensors`` are unchanged, else
        ``build()`` (then cached)."""
        hit = self._plans.get(key)
        if hit is not None and len(hit[0]) == len(tensors) and all(
                held.data_ptr() == t.data_ptr() and version == t._version
                for (held, version), t in zip(hit[0], tensors)):
            self._plans.move_to_end(key)
            return hit[1]
        plan = build()
        # detach() shares the storage (keeping its address taken) and
        # copies nothing; the version is the one the plan was built from.
        self._plans[key] = ([(t.detach(), t._version) for t in tensors], plan)
        self._plans.move_to_end(key)
        if len(self._plans) > self.size:
            self._plans.popitem(last=False)
        return plan

    def clear(self) -> None:
        self._plans.clear()

    def __getstate__(self) -> dict:
        # derived state (a rotary plan holds local functions): a pickled or
        # copied backbone starts with an empty cache
        return {'size': self.size}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state['size'])

    def __len__(self) -> int:
        return len(self._plans)


def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The dtype autocast casts to on ``device_type``, or None where it is
    off (or autocast knows no such device type, as ``'meta'``).

    Example:
        >>> with torch.autocast('cpu', dtype=torch.bfloat16):
        ...     autocast_dtype('cpu')
        torch.bfloat16
        >>> autocast_dtype('meta') is None
        True
    """
    try:
        enabled = torch.is_autocast_enabled(device_type)
    except RuntimeError:  # a device type autocast does not know (meta)
        return None
    return torch.get_autocast_dtype(device_type) if enabled else None
