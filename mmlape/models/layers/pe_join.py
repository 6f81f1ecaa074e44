"""Position-embedding joins: how the PE reaches each encoder layer.

References:
    ``default``: ViT/DeiT (PE added to the tokens once, at the input).
    ``share``/``unshare``: the baselines of the LaPE paper (the PE enters
    the residual stream at every layer; one PE, or one per layer).
    ``LaPE``: Yu et al., "LaPE: Layer-adaptive Position Embedding for Vision
    Transformers with Independent Layer Normalization", ICCV 2023.
    ``PVG``/``MPVG``: Lee, Ham, Kim, "Position Vector Guidance ..." (layer-
    wise PE from layer 1 on, GAP, and for MPVG the PE added again at the
    last LayerNorm), AAAI 2025.
    The equations of every join, in the code's names: docs/methods.md.

A join is chosen by config (``pe_join=dict(type='LaPE', ...)``) and does one
thing: it turns the raw position embedding into a :class:`PEPlan`, which
says what is added where in one forward pass. The backbone runs the plan
(:meth:`mmlape.models.backbones.LaPEViT.forward_blocks`); no other code
knows which join is in use. A plan depends on the weights and on the patch
grid, never on the image, so in eval mode the backbone computes it once per
grid and reuses it (:class:`PEPlanCache`).

A staged backbone (Swin: patch merging changes the grid and the width
between stages) describes its stages to the join (the ``stages`` context
argument) and hands :meth:`BasePEJoin.plan` a ``carry`` hook that moves a PE
across one stage boundary. The join decides what is carried and where; the
backbone only knows how to cross a boundary. A plain ViT has one stage and
no hook.

The per-layer PE norms ``LN'_l`` are created by the join but stored on the
blocks (``blocks.{l}.pe_norm``, the state-dict name of the LaPE code), so
that layer-wise lr decay, freezing and checkpoint tools that key on
``blocks.{l}`` treat them as part of their layer.
"""
import inspect
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, Hashable, List, NamedTuple, Optional,
                    Sequence, Tuple, Type, Union)

import torch.nn as nn
from mmcv.cnn import build_norm_layer
from torch import Tensor

from mmlape.registry import PE_JOINS
from .pos_embed import ABSOLUTE_PE_TYPES, PE_TYPES

__all__ = [
    'LayerPE', 'PEPlan', 'PEPlanCache', 'BasePEJoin', 'DefaultJoin',
    'ShareJoin', 'UnshareJoin', 'LaPEJoin', 'PVGJoin', 'MPVGJoin',
    'build_pe_join', 'pe_join_names', 'pe_join_classes', 'CarryFn'
]

#: Arguments a backbone gives a join; a config never sets them.
CONTEXT_ARGS = ('num_layers', 'embed_dims', 'with_cls_token', 'pe_type',
                'num_patches', 'norm_cfg', 'stages')
#: ``carry(pe, stage)``: a staged backbone's hook that moves a PE
#: ``(1, N_{s-1}, C_{s-1})`` on stage ``s - 1``'s grid across the boundary
#: into stage ``s`` (``(1, N_s, C_s)``), as the tokens cross it.
CarryFn = Callable[[Tensor, int], Tensor]


class LayerPE(NamedTuple):
    """What one encoder layer receives from a plan: the per-layer PE bundle
    that every block type (:class:`~mmlape.models.layers.TransformerBlock`,
    Swin's block) takes as ``blk(x, hw, pe)``.

    Attributes:
        attn (Tensor, optional): ``(1, N', C)``, added to the attention
            input ``norm1(x)`` only.
        bias (Tensor, optional): ``(1, heads, N', N')``, added to the
            attention logits (relative PE).
    """
    attn: Optional[Tensor] = None
    bias: Optional[Tensor] = None


@dataclass
class PEPlan:
    """What the position embedding contributes to one forward pass.

    For layer ``l`` the backbone computes
    ``x = x + residual[l]`` and then
    ``x = x + MSA(norm1(x) + attn[l], bias=bias[l]) ...`` (see
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
    final: Optional[Tensor] = None
    final_mean: Optional[Tensor] = None

    def __post_init__(self) -> None:
        for name in ('residual', 'attn', 'bias'):
            if not getattr(self, name):
                setattr(self, name, [None] * self.num_layers)

    def layer(self, index: int) -> LayerPE:
        """What layer ``index``'s block takes (the residual term is added
        to the stream before the block, by the backbone's loop)."""
        return LayerPE(self.attn[index], self.bias[index])


class PEPlanCache:
    """Eval-mode cache of PE plans, one per input grid.

    A plan depends on the PE weights and the patch grid only. The cache
    keeps the ``size`` most recently used grids and rebuilds a plan when a
    weight it depends on has changed: an in-place update bumps the tensor's
    version, and a replaced tensor has other storage (an entry keeps the
    storages it was built from alive, so no new tensor can take their
    address). It never needs clearing for correctness, so switching
    between train and eval mode keeps the plans of unchanged weights.

    Args:
        size (int): Grids kept. Defaults to 8.

    Example:
        >>> import torch
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

    def __len__(self) -> int:
        return len(self._plans)


def _join_error(join: str, option: str, value: Any, allowed: str) -> str:
    return (f'pe_join.{option}={value!r} is not valid for '
            f'pe_join.type={join!r}: {allowed}')


class BasePEJoin(nn.Module):
    """Base class of the joins.

    A subclass sets the class attributes, overrides :meth:`plan` and, if it
    needs per-layer PE norms, :meth:`build_layer_norm`. The backbone passes
    the context arguments; the config passes only ``type`` and the join's
    own options.

    Args:
        num_layers (int): Encoder layers ``L``.
        embed_dims (int): Channels ``C`` (of the input PE; of the first
            stage on a staged backbone).
        with_cls_token (bool): Whether the token sequence starts with a class
            token (then the PE has a class-token row).
        pe_type (str): One of ``learnable``, ``sincos1d``, ``sincos2d``,
            ``relative``.
        num_patches (int): Patches of the PE's own grid (the normalised
            shape of a relative-bias norm).
        norm_cfg (dict): Config of the PE norms. Defaults to LN, eps 1e-6.
        stages (Sequence[tuple[int, int]], optional): A staged backbone's
            ``(layers, channels)`` per stage, e.g. Swin-T's
            ``[(2, 96), (2, 192), (6, 384), (2, 768)]``. Each layer's PE
            norm gets its stage's width, and :meth:`plan` then takes the
            backbone's ``carry`` hook. Defaults to None (one stage).
    """
    #: Registered name, used in messages.
    name: str = 'Base'
    #: PE types the join accepts.
    pe_types: Sequence[str] = ABSOLUTE_PE_TYPES
    #: Whether a class token is allowed.
    allows_cls_token: bool = True
    #: Whether the join runs on a staged backbone (its PE stream is carried
    #: across stage boundaries by the backbone's hook).
    supports_stages: bool = False
    #: Whether the plan adds a PE after the backbone's final norm (the
    #: backbone must have one: ViT-Adapter needs ``final_norm=True``).
    adds_pe_at_final_norm: bool = False
    #: Whether the join is a baseline the methods are measured against
    #: (the default join, the LaPE paper's Share/Unshare). The benchmarks
    #: hold every other join to the cost targets against ``Default``.
    baseline: bool = False
    #: Suffix of the join's config names (``deit-tiny{suffix}_4xb256_in1k``;
    #: ``''`` for the default join), or None when the join has no configs
    #: (an ablation). The joins with configs are those the papers compare;
    #: the tools (model index, dense benchmarks) enumerate them.
    config_suffix: Optional[str] = None

    def __init__(self,
                 num_layers: int,
                 embed_dims: int,
                 with_cls_token: bool,
                 pe_type: str = 'learnable',
                 num_patches: Optional[int] = None,
                 norm_cfg: Optional[Dict] = None,
                 stages: Optional[Sequence[Tuple[int, int]]] = None) -> None:
        super().__init__()
        self.num_layers = num_layers
        self.embed_dims = embed_dims
        self.with_cls_token = with_cls_token
        self.pe_type = pe_type
        self.num_patches = num_patches
        self.norm_cfg = norm_cfg or dict(type='LN', eps=1e-6)
        self._init_stages(stages)
        if pe_type not in self.pe_types:
            raise ValueError(
                f'pe_join.type={self.name!r} does not support '
                f'pe_type={pe_type!r}; it supports {list(self.pe_types)}')
        if with_cls_token and not self.allows_cls_token:
            raise ValueError(
                f'pe_join.type={self.name!r} is incompatible with a class '
                f'token: it uses global average pooling and has no '
                f'class-token position. Build the backbone with '
                f"with_cls_token=False and out_type='avg_featmap' (or "
                f"'featmap' for dense tasks).")

    def _init_stages(self, stages: Optional[Sequence[Tuple[int,
                                                           int]]]) -> None:
        self.staged = stages is not None
        if stages is None:
            stages = [(self.num_layers, self.embed_dims)]
        elif not self.supports_stages:
            staged = sorted(name for name, cls in PE_JOINS.module_dict.items()
                            if cls.supports_stages)
            raise ValueError(
                f'pe_join.type={self.name!r} does not support a staged '
                f'backbone (its PE cannot follow the tokens across patch '
                f'merging); choose one of {staged}')
        stages = [(int(n), int(c)) for n, c in stages]
        if (sum(n for n, _ in stages) != self.num_layers
                or stages[0][1] != self.embed_dims
                or min(n for n, _ in stages) < 1):
            raise ValueError(
                f'stages={stages} do not fit num_layers={self.num_layers} '
                f'and embed_dims={self.embed_dims}')
        #: Stage of every layer, and of the output (index ``L``).
        self.stage_of = [
            s for s, (n, _) in enumerate(stages) for _ in range(n)
        ] + [len(stages) - 1]
        #: Channels of every layer, and of the output (index ``L``).
        self.layer_dims = [stages[s][1] for s in self.stage_of]

    @classmethod
    def fits(cls, pe_type: str = 'learnable', staged: bool = False) -> bool:
        """Whether the join runs with ``pe_type`` on a one-stage
        (``staged=False``) or staged backbone, as ``__init__`` checks."""
        return pe_type in cls.pe_types and (cls.supports_stages or not staged)

    @property
    def num_pos_embeds(self) -> int:
        """How many absolute PEs the backbone owns (1, or ``L``)."""
        return 1

    def carry_pe(self, pe: Tensor, src: int, dst: int,
                 carry: Optional[CarryFn]) -> Tensor:
        """Move ``pe``, as layer ``src`` sees it, to layer ``dst`` (``L``:
        the final norm) through every stage boundary in between. On a
        one-stage backbone this returns ``pe`` itself."""
        for stage in range(self.stage_of[src] + 1, self.stage_of[dst] + 1):
            if carry is None:
                raise ValueError(
                    f'pe_join.type={self.name!r} on a staged backbone needs '
                    f'the backbone\'s carry hook in plan()')
            pe = carry(pe, stage)
        return pe

    @property
    def extra_tokens(self) -> int:
        return 1 if self.with_cls_token else 0

    def build_layer_norm(self, index: int) -> Optional[nn.Module]:
        """The PE norm of layer ``index`` (stored as ``blocks.{i}.pe_norm``),
        or None when the layer has none."""
        return None

    def _new_norm(self, index: Optional[int] = None) -> nn.Module:
        """A PE norm for layer ``index`` (its stage's width)."""
        if self.pe_type == 'relative':
            dims = self.num_patches
        elif index is None:
            dims = self.embed_dims
        else:
            dims = self.layer_dims[index]
        return build_norm_layer(self.norm_cfg, dims)[1]

    def plan(self,
             pos: Optional[Tensor],
             rel_biases: Optional[List[Tensor]],
             pe_norms: Sequence[Optional[nn.Module]],
             carry: Optional[CarryFn] = None) -> PEPlan:
        """Build the plan of one forward pass.

        Args:
            pos (Tensor, optional): The raw absolute PE, already resized to
                the input's grid, ``(num_pos_embeds, N', C)``; None for a
                relative PE.
            rel_biases (list[Tensor], optional): Each layer's raw relative
                bias ``(heads, N, N)`` over the patches; None for an
                absolute PE.
            pe_norms (Sequence[nn.Module | None]): ``blocks[l].pe_norm``.
            carry (CarryFn, optional): A staged backbone's hook that moves
                a PE across one stage boundary (see :data:`CarryFn`).
                Defaults to None (one stage).

        Returns:
            PEPlan: The plan.
        """
        raise NotImplementedError

    def _pad_bias(self, bias: Tensor) -> Tensor:
        """(heads, N, N) patch bias to (1, heads, N', N'), zero for the
        class token (relative PEs act on patch-patch logits only)."""
        e = self.extra_tokens
        if e:
            bias = nn.functional.pad(bias, (e, 0, e, 0))
        return bias[None]

    def extra_repr(self) -> str:
        return f'type={self.name}, num_layers={self.num_layers}'


@PE_JOINS.register_module(name='Default')
class DefaultJoin(BasePEJoin):
    """ViT/DeiT: ``x_0 = tokens + pos``; no layer sees the PE again.

    With a relative PE, every layer adds its own raw bias to its logits.

    Example:
        >>> import torch
        >>> join = build_pe_join(dict(type='Default'), num_layers=4,
        ...                      embed_dims=64, with_cls_token=True)
        >>> plan = join.plan(torch.randn(1, 17, 64), None, [None] * 4)
        >>> plan.input.shape, plan.attn
        (torch.Size([1, 17, 64]), [None, None, None, None])
    """
    name = 'Default'
    pe_types = PE_TYPES
    supports_stages = True
    baseline = True
    config_suffix = ''

    def plan(self, pos, rel_biases, pe_norms, carry=None):
        plan = PEPlan(self.num_layers, input=pos)
        if rel_biases is not None:
            plan.bias = [self._pad_bias(b) for b in rel_biases]
        return plan


@PE_JOINS.register_module(name='Share')
class ShareJoin(BasePEJoin):
    """``x'_l = (x_l + pos) + MSA(LN_l(x_l + pos))`` at every layer.

    One PE for all layers, entering the residual stream each time.
    """
    name = 'Share'
    baseline = True

    def plan(self, pos, rel_biases, pe_norms, carry=None):
        return PEPlan(self.num_layers, residual=[pos] * self.num_layers)


@PE_JOINS.register_module(name='Unshare')
class UnshareJoin(BasePEJoin):
    """Like ``share``, but layer ``l`` has its own learnable ``pos^(l)``.

    The backbone's ``pos_embed`` then has shape ``(L, N', C)``; row ``l`` is
    layer ``l``'s PE.
    """
    name = 'Unshare'
    pe_types = ('learnable', )
    baseline = True

    @property
    def num_pos_embeds(self) -> int:
        return self.num_layers

    def plan(self, pos, rel_biases, pe_norms, carry=None):
        return PEPlan(
            self.num_layers,
            residual=[pos[i:i + 1] for i in range(self.num_layers)])


@PE_JOINS.register_module(name='LaPE')
class LaPEJoin(BasePEJoin):
    """LaPE: an independent LayerNorm for the PE in every layer.

    ``x_0 = tokens``; ``pos_0 = pos``; in layer ``l``:
    ``p_l = LN'_l(pos_l)``, ``x'_l = x_l + MSA(LN_l(x_l) + p_l)`` and
    ``pos_{l+1} = p_l`` (hierarchical). The PE never enters the residual
    stream nor the MLP input.

    With a relative PE, layer ``l``'s bias table goes through ``LN'_l``
    (over the key axis) before it is added to the patch-patch logits.

    On a staged backbone the stream crosses each stage boundary through the
    backbone's ``carry`` hook just before the first layer of the new stage
    takes it; with ``hierarchical=False`` the raw PE is carried instead.

    Args:
        hierarchical (bool): Pass each layer's normalised PE on to the next
            layer (the paper's form). False normalises the raw PE in every
            layer (``p_l = LN'_l(pos)``, the first code release).
            Defaults to True.
        num_pe_layers (int, optional): ``eta``: only the first ``eta``
            layers (counted from the join's first PE layer) take the PE;
            the rest take none. Defaults to all.
        **kwargs: The context arguments of :class:`BasePEJoin`.

    Example:
        >>> join = build_pe_join(dict(type='LaPE', num_pe_layers=2),
        ...                      num_layers=4, embed_dims=64,
        ...                      with_cls_token=True)
        >>> [join.build_layer_norm(i) is not None for i in range(4)]
        [True, True, False, False]
    """
    name = 'LaPE'
    pe_types = PE_TYPES
    supports_stages = True
    config_suffix = '-lape'
    #: First layer that takes a layer-wise PE.
    first_pe_layer: int = 0
    #: Whether the raw PE is also added to the tokens at the input.
    adds_pe_at_input: bool = False

    def __init__(self,
                 hierarchical: bool = True,
                 num_pe_layers: Optional[int] = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        if not isinstance(hierarchical, bool):
            raise TypeError(
                _join_error(self.name, 'hierarchical', hierarchical,
                            'it must be True or False'))
        available = self.num_layers - self.first_pe_layer
        if num_pe_layers is None:
            num_pe_layers = available
        if (not isinstance(num_pe_layers, int)
                or isinstance(num_pe_layers, bool)
                or not 1 <= num_pe_layers <= available):
            raise ValueError(
                _join_error(
                    self.name, 'num_pe_layers', num_pe_layers,
                    f'eta must be an int in [1, {available}] for '
                    f'{self.num_layers} layers'))
        self.hierarchical = hierarchical
        self.num_pe_layers = num_pe_layers

    @property
    def pe_layers(self) -> range:
        """Indices of the layers that take the layer-wise PE."""
        return range(self.first_pe_layer,
                     self.first_pe_layer + self.num_pe_layers)

    def build_layer_norm(self, index):
        return self._new_norm(index) if index in self.pe_layers else None

    def _layerwise(self,
                   pos: Tensor,
                   pe_norms: Sequence[Optional[nn.Module]],
                   carry: Optional[CarryFn] = None) -> List:
        attn: List[Optional[Tensor]] = [None] * self.num_layers
        stream, at = pos, 0
        for i in self.pe_layers:
            stream, at = self.carry_pe(stream, at, i, carry), i
            p = pe_norms[i](stream)
            attn[i] = p
            if self.hierarchical:
                stream = p
        return attn

    def plan(self, pos, rel_biases, pe_norms, carry=None):
        if rel_biases is not None:
            bias: List[Optional[Tensor]] = [None] * self.num_layers
            for i in self.pe_layers:
                bias[i] = self._pad_bias(pe_norms[i](rel_biases[i]))
            return PEPlan(self.num_layers, bias=bias)
        return PEPlan(
            self.num_layers,
            input=pos if self.adds_pe_at_input else None,
            attn=self._layerwise(pos, pe_norms, carry))

    def extra_repr(self) -> str:
        return (f'{super().extra_repr()}, hierarchical={self.hierarchical}, '
                f'pe_layers={list(self.pe_layers)}')


@PE_JOINS.register_module(name='PVG')
class PVGJoin(LaPEJoin):
    """PVG: the PE at the input, and layer-wise from layer 1 on; GAP.

    ``x_0 = tokens + pos``; layer 0 is a plain layer; for ``l >= 1``:
    ``p_l = LN'_l(pos_{l-1})``, ``x'_l = x_l + MSA(LN_l(x_l) + p_l)``,
    ``pos_l = p_l`` with ``pos_0 = pos``. There is no class token.

    On a staged backbone (Swin) layer 0 takes the layer-wise PE as well:
    "due to its staged architecture ... both PVG and MPVG exceptionally
    include layer 0" (the MPVG paper). The stream then crosses the stage
    boundaries as LaPE's does.

    Args:
        hierarchical (bool): As for LaPE. Defaults to True.
        num_pe_layers (int, optional): Layers ``1..eta`` take the PE
            (``0..eta-1`` on a staged backbone). Defaults to all.
    """
    name = 'PVG'
    pe_types = ABSOLUTE_PE_TYPES
    allows_cls_token = False
    adds_pe_at_input = True
    config_suffix = '-pvg'

    @property
    def first_pe_layer(self) -> int:
        return 0 if self.staged else 1


@PE_JOINS.register_module(name='MPVG')
class MPVGJoin(PVGJoin):
    """MPVG: PVG plus the PE at the last LayerNorm.

    ``y = LN(x_L) + LN'_last(src)``, then GAP, where ``src`` is ``pos_0``
    (the raw input PE, default) or the PE layer ``k`` received (``p_k``).
    ``LN'_last`` is stored as ``pe_join.last_norm``. On a staged backbone
    ``src`` is carried to the last stage (the final norm's grid and width)
    through the backbone's hook.

    With GAP the final term adds ``mean_tokens(LN'_last(src))``, a vector
    that does not depend on the image: the plan carries it as
    ``final_mean`` so a pooled output adds a ``(1, C)`` vector instead of a
    ``(B, N, C)`` tensor (the same result).

    Args:
        last_pe_source (str | int): ``'pos_0'``, or the index ``k`` of a PE
            layer whose normalised PE is used. Defaults to ``'pos_0'``.
        **kwargs: As for :class:`PVGJoin`.
    """
    name = 'MPVG'
    adds_pe_at_final_norm = True
    config_suffix = '-mpvg'

    def __init__(self,
                 last_pe_source: Union[str, int] = 'pos_0',
                 **kwargs) -> None:
        super().__init__(**kwargs)
        is_index = (
            isinstance(last_pe_source, int)
            and not isinstance(last_pe_source, bool))
        valid = last_pe_source == 'pos_0' or (is_index and last_pe_source
                                              in self.pe_layers)
        if not valid:
            raise ValueError(
                _join_error(
                    self.name, 'last_pe_source', last_pe_source,
                    f"use 'pos_0' or a PE layer index in "
                    f'[{self.pe_layers.start}, {self.pe_layers.stop - 1}]'))
        self.last_pe_source = last_pe_source
        self.last_norm = build_norm_layer(self.norm_cfg,
                                          self.layer_dims[-1])[1]

    def plan(self, pos, rel_biases, pe_norms, carry=None):
        plan = super().plan(pos, rel_biases, pe_norms, carry)
        if self.last_pe_source == 'pos_0':
            src, at = pos, 0
        else:
            src, at = plan.attn[self.last_pe_source], self.last_pe_source
        src = self.carry_pe(src, at, self.num_layers, carry)
        plan.final = self.last_norm(src)
        plan.final_mean = plan.final[:, self.extra_tokens:].mean(dim=1)
        return plan

    def extra_repr(self) -> str:
        return (f'{super().extra_repr()}, '
                f'last_pe_source={self.last_pe_source!r}')


def pe_join_names() -> List[str]:
    """Registered join names (``pe_join=dict(type=...)``), sorted."""
    return sorted(PE_JOINS.module_dict)


def pe_join_classes(with_configs: bool = False) -> Dict[str, Type[BasePEJoin]]:
    """Registered joins by name, in registration order.

    The order is that of the tools' tables: ``Default``, ``Share``,
    ``Unshare``, ``LaPE``, ``PVG``, ``MPVG``, then any join registered
    later. Tools enumerate joins here and read what they need from the
    class attributes (:attr:`BasePEJoin.allows_cls_token`,
    :attr:`~BasePEJoin.baseline`, :attr:`~BasePEJoin.config_suffix`,
    :meth:`~BasePEJoin.fits`), so a new join needs no tool edited.

    Args:
        with_configs (bool): Only the joins that have configs
            (``config_suffix`` is not None). Defaults to False.

    Returns:
        dict[str, type]: Join classes by registered name.

    Example:
        >>> list(pe_join_classes(with_configs=True))
        ['Default', 'LaPE', 'PVG', 'MPVG']
    """
    return {
        name: cls
        for name, cls in PE_JOINS.module_dict.items()
        if not with_configs or cls.config_suffix is not None
    }


def build_pe_join(cfg: Union[None, str, Dict], **context) -> BasePEJoin:
    """Build a join from its config and the backbone's context.

    ``type`` is matched case-insensitively (``'lape'`` is ``'LaPE'``).

    Args:
        cfg (dict | str | None): ``dict(type=..., **options)``, a type
            name, or None for ``Default``.
        **context: ``num_layers``, ``embed_dims``, ``with_cls_token``,
            ``pe_type``, ``num_patches``, ``norm_cfg``, ``stages`` (see
            :class:`BasePEJoin`).

    Returns:
        BasePEJoin: The join.

    Raises:
        ValueError: Unknown type, unknown option or bad value; the message
            names the option and what is allowed.
    """
    if cfg is None:
        cfg = dict(type='Default')
    elif isinstance(cfg, str):
        cfg = dict(type=cfg)
    cfg = dict(cfg)
    join_type = cfg.pop('type', None)
    if inspect.isclass(join_type) and issubclass(join_type, BasePEJoin):
        cls = join_type
    else:
        lookup = {k.lower(): v for k, v in PE_JOINS.module_dict.items()}
        cls = lookup.get(str(join_type).lower())
        if cls is None:
            raise ValueError(f'Unknown pe_join.type={join_type!r}; '
                             f'choose one of {pe_join_names()}')
    allowed = set()
    for klass in cls.__mro__:
        if klass is nn.Module or not issubclass(klass, BasePEJoin):
            continue
        allowed |= set(inspect.signature(klass.__init__).parameters)
    allowed -= {'self', 'kwargs'}
    options = sorted(allowed - set(context) - set(CONTEXT_ARGS))
    clash = sorted(set(cfg) & (set(context) | set(CONTEXT_ARGS)))
    if clash:
        raise ValueError(f'pe_join options {clash} are set by the backbone '
                         f'and cannot be given in pe_join')
    unknown = sorted(set(cfg) - set(options))
    if unknown:
        raise ValueError(f'Unknown option(s) {unknown} for '
                         f'pe_join.type={cls.name!r}; its options are '
                         f'{options}')
    return cls(**context, **cfg)
