"""Position-embedding joins: how the PE reaches each encoder layer.

References:
    ``Default``: ViT/DeiT. ``Share``/``Unshare``: the LaPE paper's
    baselines. ``LaPE``: Yu et al., "LaPE: Layer-adaptive Position
    Embedding for Vision Transformers with Independent Layer
    Normalization", ICCV 2023. ``PVG``/``MPVG``: Lee, Ham, Kim,
    "Maximizing the Position Embedding for Vision Transformers with Global
    Average Pooling", AAAI 2025. The equations, in the code's names:
    docs/methods.md.

A join turns the raw PE into a :class:`~.pe_plan.PEPlan` (what is added
where in one pass), which the backbone runs. Per-layer PE norms live at
``blocks.{l}.pe_norm`` (the LaPE code's name).
"""
from typing import Dict, List, Optional, Sequence, Tuple, Type, Union

import torch.nn as nn
from mmcv.cnn import build_norm_layer
from torch import Tensor

from mmlape.registry import PE_JOINS
from .parts import PartCfg, part_options, resolve_part
from .pe_join_base import CONTEXT_ARGS, BasePEJoin, join_option_error
from .pe_plan import CarryFn, PEPlan

__all__ = [
    'RELATIVE_PE_NORM_CFG', 'DefaultJoin', 'ShareJoin', 'UnshareJoin',
    'LaPEJoin', 'PVGJoin', 'MPVGJoin', 'build_pe_join', 'resolve_pe_join',
    'pe_join_names', 'pe_join_classes'
]

#: The norm of LaPE's relative-PE bias tables: the official code's
#: ``nn.LayerNorm(num_patches)`` over the key axis, eps 1e-5 whatever the
#: backbone's norms are (DeiT's are 1e-6).
RELATIVE_PE_NORM_CFG = dict(type='LN', eps=1e-5)


@PE_JOINS.register_module(name='Default')
class DefaultJoin(BasePEJoin):
    """ViT/DeiT: ``x_0 = tokens + pos``; no layer sees the PE again.

    With a relative PE, every layer adds its own raw bias to its logits; a
    rotary PE alone adds nothing (the backbone rotates the queries and
    keys).

    Example:
        >>> import torch
        >>> join = build_pe_join(dict(type='Default'), num_layers=4,
        ...                      embed_dims=64, with_cls_token=True)
        >>> plan = join.plan(torch.randn(1, 17, 64), None, [None] * 4)
        >>> plan.input.shape, plan.attn
        (torch.Size([1, 17, 64]), [None, None, None, None])
    """
    name = 'Default'
    pe_kinds = ('absolute', 'relative', 'rotary')
    needs_pe = False
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
    needs_learned_pe = True
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
    (:data:`RELATIVE_PE_NORM_CFG`) before it is added to the logits. On a
    staged backbone the stream crosses stage boundaries through the
    backbone's ``carry`` hook (the raw PE with ``hierarchical=False``).

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
    pe_kinds = ('absolute', 'relative')
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
                join_option_error(self.name, 'hierarchical', hierarchical,
                                  'it must be True or False'))
        available = self.num_layers - self.first_pe_layer
        if num_pe_layers is None:
            num_pe_layers = available
        if (not isinstance(num_pe_layers, int)
                or isinstance(num_pe_layers, bool)
                or not 1 <= num_pe_layers <= available):
            raise ValueError(
                join_option_error(
                    self.name, 'num_pe_layers', num_pe_layers,
                    f'eta must be an int in [1, {available}] for '
                    f'{self.num_layers} layers'))
        self.hierarchical = hierarchical
        self.num_pe_layers = num_pe_layers

    @property
    def attention_terms(self) -> Tuple[str, ...]:
        return ('bias', ) if self.pe_kind == 'relative' else ('attn', )

    @property
    def pe_layers(self) -> range:
        """Indices of the layers that take the layer-wise PE."""
        return range(self.first_pe_layer,
                     self.first_pe_layer + self.num_pe_layers)

    def build_layer_norm(self, index):
        if index not in self.pe_layers:
            return None
        if self.pe_kind == 'relative':
            return build_norm_layer(RELATIVE_PE_NORM_CFG, self.num_patches)[1]
        return self._new_norm(index)

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

    On a staged backbone (Swin) layer 0 takes the layer-wise PE as well,
    as the MPVG paper does; the stream crosses stages as LaPE's.

    Args:
        hierarchical (bool): As for LaPE. Defaults to True.
        num_pe_layers (int, optional): Layers ``1..eta`` take the PE
            (``0..eta-1`` on a staged backbone). Defaults to all.
    """
    name = 'PVG'
    pe_kinds = ('absolute', )
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

    With GAP the final term is the image-independent
    ``mean_tokens(LN'_last(src))``, carried as ``final_mean``.

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
                join_option_error(
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
    """Registered joins by name, in registration order (the tools' tables
    read what they need from the class attributes).

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


def resolve_pe_join(cfg: PartCfg) -> Tuple[Type[BasePEJoin], Dict]:
    """The join class a ``pe_join`` config names, and its options.

    ``cfg`` is ``dict(type=..., **options)``, a type name (any case), a
    join class, or None for ``Default``.

    Raises:
        ValueError: Unknown type or option, or an option the backbone sets;
            the message names it and what is allowed.
    """
    cls, options = resolve_part(PE_JOINS, 'pe_join', cfg, default='Default')
    if not issubclass(cls, BasePEJoin):
        raise ValueError(f'Unknown pe_join.type={cls!r}; choose one of '
                         f'{pe_join_names()}')
    clash = sorted(set(options) & set(CONTEXT_ARGS))
    if clash:
        raise ValueError(f'pe_join options {clash} are set by the backbone '
                         f'and cannot be given in pe_join')
    allowed = sorted(set(part_options(cls)) - set(CONTEXT_ARGS))
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f'Unknown option(s) {unknown} for '
                         f'pe_join.type={cls.name!r}; its options are '
                         f'{allowed}')
    return cls, options


def build_pe_join(cfg: PartCfg, **context) -> BasePEJoin:
    """Build a join from its config (see :func:`resolve_pe_join`) and the
    backbone's context: ``num_layers``, ``embed_dims``, ``with_cls_token``,
    ``pe_type``, ``num_patches``, ``norm_cfg``, ``stages`` (see
    :class:`BasePEJoin`)."""
    cls, options = resolve_pe_join(cfg)
    return cls(**context, **options)
