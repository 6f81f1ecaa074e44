"""The base of the joins: what every join is given and declares.

A join sets the class attributes the backbones and tools read (PE types,
class token, stages, what it needs) and overrides :meth:`BasePEJoin.plan`
and, with per-layer PE norms, :meth:`BasePEJoin.build_layer_norm`.
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch.nn as nn
from mmcv.cnn import build_norm_layer
from torch import Tensor

from mmlape.registry import PE_JOINS
from .pe_plan import CarryFn, PEPlan
from .pos_embed import PE_TYPES, pe_type_part

__all__ = ['BasePEJoin', 'CONTEXT_ARGS', 'join_option_error']

#: Arguments a backbone gives a join; a config never sets them.
CONTEXT_ARGS = ('num_layers', 'embed_dims', 'with_cls_token', 'pe_type',
                'num_patches', 'norm_cfg', 'stages')


def join_option_error(join: str, option: str, value: Any, allowed: str) -> str:
    """The message of a join option's bad value: the option, the value,
    the join and what is allowed."""
    return (f'pe_join.{option}={value!r} is not valid for '
            f'pe_join.type={join!r}: {allowed}')


class BasePEJoin(nn.Module):
    """Base class of the joins. The backbone passes these context
    arguments; a config passes only ``type`` and the join's own options.

    Args:
        num_layers (int): Encoder layers ``L``.
        embed_dims (int): Channels ``C`` (of the input PE; of the first
            stage on a staged backbone).
        with_cls_token (bool): Whether the token sequence starts with a class
            token (then the PE has a class-token row).
        pe_type (str): The PE the join acts on: an absolute or relative
            type (:mod:`.pos_embed`); a rotary one when the backbone has a
            rotary PE alone.
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
    #: The kinds of PE type (:mod:`.pos_embed`) the join takes.
    pe_kinds: Tuple[str, ...] = ('absolute', )
    #: Whether the PE must be learned (one per layer: ``Unshare``).
    needs_learned_pe: bool = False
    #: The shipped PE types the join takes (derived from the two above).
    pe_types: Tuple[str, ...] = ()
    #: Whether a class token is allowed.
    allows_cls_token: bool = True
    #: Whether the join acts on a PE, so the backbone must own one of
    #: :attr:`pe_types` (Swin's is optional: ``use_abs_pos_embed``).
    needs_pe: bool = True
    #: Whether the join runs on a staged backbone (its PE stream is carried
    #: across stage boundaries by the backbone's hook).
    supports_stages: bool = False
    #: Whether the plan adds a PE after the backbone's final norm (the
    #: backbone must have one: ViT-Adapter needs ``final_norm=True``).
    adds_pe_at_final_norm: bool = False
    #: Whether the join is a baseline (Default, Share, Unshare); the
    #: benchmarks hold the others to cost targets against ``Default``.
    baseline: bool = False
    #: Suffix of the join's config names (``deit-tiny{suffix}_...``; ``''``
    #: for the default join), or None for a join without configs.
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
        #: The kind of the PE the join acts on.
        self.pe_kind = pe_type_part(pe_type).kind
        if self.pe_kind == 'rotary' and not self.accepts(pe_type):
            fit = sorted(name for name, cls in PE_JOINS.module_dict.items()
                         if cls.fits(pe_type))
            raise ValueError(
                f'pe_join.type={self.name!r} acts on an absolute PE, and '
                f'pe_type={pe_type!r} is a rotary PE alone: add an absolute '
                f"PE beside it (e.g. ape_type='learnable') or choose one "
                f'of {fit}')
        if not self.accepts(pe_type):
            raise ValueError(
                f'pe_join.type={self.name!r} does not support '
                f'pe_type={pe_type!r}; it supports {list(self.pe_types)}')
        if with_cls_token and not self.allows_cls_token:
            raise ValueError(
                f'pe_join.type={self.name!r} is incompatible with a class '
                f'token: it uses global average pooling and has no '
                f'class-token position. Build the backbone with '
                f"with_cls_token=False and out_type='avg_featmap' (or "
                f"'featmap' for dense tasks); LaPEViT takes these when "
                f'both are left unset.')

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

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.pe_types = tuple(t for t in PE_TYPES if cls.accepts(t))

    @classmethod
    def accepts(cls, pe_type: str) -> bool:
        """Whether the join acts on ``pe_type`` (any registered one: its
        declared kind and whether it is learned)."""
        part = pe_type_part(pe_type)
        return part.kind in cls.pe_kinds and (part.learnable
                                              or not cls.needs_learned_pe)

    @classmethod
    def fits(cls, pe_type: str = 'learnable', staged: bool = False) -> bool:
        """Whether the join runs with ``pe_type`` on a one-stage
        (``staged=False``) or staged backbone, as ``__init__`` checks."""
        return cls.accepts(pe_type) and (cls.supports_stages or not staged)

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
    def attention_terms(self) -> Tuple[str, ...]:
        """What the plans add to attention, as
        :class:`~mmlape.models.layers.pe_plan.LayerPE` fields: ``'attn'``
        (to the attention input), ``'bias'`` (to the logits), ``'qk'`` (a
        map of the queries and keys). A backbone whose blocks lack one
        refuses the join. Here: the relative PE's bias, if any."""
        return ('bias', ) if self.pe_kind == 'relative' else ()

    @property
    def extra_tokens(self) -> int:
        return 1 if self.with_cls_token else 0

    def build_layer_norm(self, index: int) -> Optional[nn.Module]:
        """The PE norm of layer ``index`` (stored as ``blocks.{i}.pe_norm``),
        or None when the layer has none."""
        return None

    def _new_norm(self, index: Optional[int] = None) -> nn.Module:
        """A PE norm for layer ``index`` (its stage's width)."""
        if self.pe_kind == 'relative':
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
