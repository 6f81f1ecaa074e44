"""The one base of mmlape's backbones: the eval-mode PE plan cache, the
checkpoint hooks (the family of :mod:`mmlape.models.checkpoint` does the
work) and the generic initialisation.

References:
    mmengine's ``BaseModule`` (``init_cfg``); mmpretrain's backbones for
    ``out_indices``; timm's ``checkpoint_filter_fn`` (a pure filter the
    model calls).
"""
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from mmengine.logging import print_log
from mmengine.model import BaseModule
from mmengine.utils import to_2tuple
from torch import Tensor

from ..checkpoint import CheckpointFamily
from ..checkpoint.common import FROM_DEFAULT
from ..layers.pe_plan import PEPlan, PEPlanCache, autocast_dtype
from ..layers.weight_init import init_generic_weights

__all__ = [
    'LaPEBackbone', 'host_img_size', 'parse_out_indices', 'pretrained_init_cfg'
]


def parse_out_indices(out_indices: Union[int, Sequence[int]], count: int,
                      what: str) -> List[int]:
    """``out_indices`` (an int or a sequence, negative ones counted from the
    end) as sorted distinct indices into ``count`` ``what`` (layers,
    stages); a clear error for none or one outside ``[-count, count)``."""
    if isinstance(out_indices, int) and not isinstance(out_indices, bool):
        out_indices = [out_indices]
    if not isinstance(out_indices, Sequence) or isinstance(
            out_indices, str) or not all(
                isinstance(i, int) and not isinstance(i, bool)
                for i in out_indices):
        raise TypeError(f'out_indices must be an int or a sequence of ints, '
                        f'got {out_indices!r} ({type(out_indices)})')
    if not out_indices:
        raise ValueError(f'out_indices must name at least one of the '
                         f'{count} {what}')
    parsed = []
    for idx in out_indices:
        real = idx + count if idx < 0 else idx
        if not 0 <= real < count:
            raise ValueError(f'out_indices contains {idx}, outside '
                             f'[-{count}, {count})')
        parsed.append(real)
    return sorted(set(parsed))


def pretrained_init_cfg(pretrained: Optional[str],
                        init_cfg: Optional[Dict]) -> Optional[Dict]:
    """The ``init_cfg`` of the hosts' deprecated ``pretrained`` argument
    (mmseg's and mmdet's backbones): a path is
    ``dict(type='Pretrained', checkpoint=pretrained)``."""
    if init_cfg and pretrained:
        raise ValueError('pretrained and init_cfg cannot both be set; '
                         'give the checkpoint in init_cfg')
    if isinstance(pretrained, str):
        warnings.warn('pretrained is deprecated: use '
                      "init_cfg=dict(type='Pretrained', checkpoint=...)")
        return dict(type='Pretrained', checkpoint=pretrained)
    if pretrained is not None:
        raise TypeError(f'pretrained must be a str or None, got '
                        f'{pretrained!r}')
    return init_cfg


def host_img_size(img_size: Union[int, Sequence[int]],
                  name: str = 'img_size') -> Tuple[int, int]:
    """An image size as mmseg's and mmdet's backbones read it: an int, or
    a tuple of one or two."""
    if isinstance(img_size, bool) or not isinstance(img_size,
                                                    (int, tuple, list)):
        raise TypeError(f'{name} must be an int or a tuple, got '
                        f'{img_size!r}')
    if not isinstance(img_size, int) and len(img_size) == 1:
        img_size = img_size[0]
    size = tuple(to_2tuple(img_size))
    if len(size) != 2:
        raise ValueError(f'{name} must have 1 or 2 entries, got '
                         f'{len(size)}: {img_size!r}')
    return size


class LaPEBackbone(BaseModule):
    """The base of mmlape's backbones: plan cache, checkpoint hooks,
    pretrained loading and generic initialisation.

    A subclass sets :attr:`checkpoint_family` and fills in
    :meth:`_build_plan`, :meth:`_pe_tensors`, :meth:`checkpoint_spec` and
    :meth:`_init_special_weights`, and calls :meth:`_init_default_weights`
    once its modules exist.

    Args:
        cache_pe_plan (bool): In eval mode without autograd, compute the PE
            plan once per patch grid and reuse it until a weight it depends
            on changes (see :meth:`pe_plan`). Defaults to True.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=...,
            prefix='backbone.')`` loads through :meth:`load_pretrained`;
            any other config is applied as mmengine does. Defaults to None.
    """
    #: The family's checkpoint path (:mod:`mmlape.models.checkpoint`).
    checkpoint_family: CheckpointFamily
    #: Keys that a checkpoint of the family cannot have (modules a subclass
    #: adds); they are summarised, not warned about, when one loads.
    new_key_pattern: Optional[str] = None
    #: How many patch grids keep a cached PE plan in eval mode.
    plan_cache_size: int = 8
    #: The attributes a plan depends on besides its tensors (how the PE is
    #: resized): a cached plan serves only their values it was built with.
    plan_settings: Tuple[str, ...] = ()
    #: What an option left at None takes when the arch does not set it
    #: (:meth:`pick_option`).
    option_defaults: Dict[str, Any] = {}

    @classmethod
    def arch_settings_of(cls, arch: Any) -> Dict:
        """What ``arch`` sets: a dict as it is, a name its ``arch_zoo``
        entry, an unknown name ``{'name': arch}``."""
        if isinstance(arch, dict):
            return dict(arch)
        zoo = getattr(cls, 'arch_zoo', {})
        if isinstance(arch, str) and arch not in zoo:
            arch = arch.lower()  # the constructors read names in any case
        return dict(zoo.get(arch, {'name': arch}))

    @classmethod
    def pick_option(cls,
                    name: str,
                    value: Any,
                    arch: Dict,
                    default: Any = None) -> Any:
        """The constructor's rule for an option: the argument, else the
        arch's setting, else ``default``, else :attr:`option_defaults`."""
        if value is not None:
            return value
        return arch.get(
            name,
            cls.option_defaults.get(name) if default is None else default)

    def __init__(self,
                 cache_pe_plan: bool = True,
                 init_cfg: Optional[Dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.cache_pe_plan = cache_pe_plan
        self._plan_cache = PEPlanCache(self.plan_cache_size)
        self._register_load_state_dict_pre_hook(self._fit_state_dict)

    # ------------------------------------------------------------------
    # what a backbone fills in
    def _build_plan(self, hw: Tuple[int, int]) -> PEPlan:
        """The PE plan for the patch grid ``hw`` (uncached)."""
        raise NotImplementedError

    def _pe_tensors(self) -> List[Tensor]:
        """Every tensor the plan depends on (for cache invalidation)."""
        raise NotImplementedError

    def checkpoint_spec(self) -> Any:
        """What this backbone expects of a checkpoint, for its
        :attr:`checkpoint_family` (PE shape, grid, join, ...)."""
        raise NotImplementedError

    def _init_special_weights(self) -> None:
        """The backbone's own starting values, after the generic pass."""

    @property
    def pe_setting(self) -> str:
        """The backbone's PE, as a name of
        :func:`~mmlape.models.layers.pos_embed.pe_settings` (e.g.
        ``'learnable'``, ``'rope_mixed+learnable'``), or ``'none'``: the
        PE its join acts on, when it owns one."""
        if getattr(self, 'pos_embed', None) is None:
            return 'none'
        return self.pe_join.pe_type

    # ------------------------------------------------------------------
    # the PE plan
    def pe_plan(self, hw: Tuple[int, int]) -> PEPlan:
        """The PE plan for a patch grid ``hw``, cached in eval mode with
        autograd off, per grid, device, autocast state (a plan may pass the
        PE through layers autocast casts, as Swin's patch merging) and
        :attr:`plan_settings`, and bypassed under ``torch.compile``.

        A cached plan is rebuilt when a tensor it depends on changes (its
        storage or version). ``train()``/``eval()`` empty the cache, since
        writes through ``.data`` bypass the version counter, and so does a
        forward that records autograd in eval mode, since a fused
        optimizer's step after it bypasses it too.
        """
        hw = tuple(hw)
        if (not self.cache_pe_plan or self.training
                or torch.compiler.is_compiling()):
            return self._build_plan(hw)
        if torch.is_grad_enabled():
            self._plan_cache.clear()
            return self._build_plan(hw)
        param = next(self.parameters(), None)
        device = param.device if param is not None else torch.device('cpu')
        key = (hw, device, autocast_dtype(device.type),
               tuple(getattr(self, name) for name in self.plan_settings))
        return self._plan_cache.get(key, self._pe_tensors(),
                                    lambda: self._build_plan(hw))

    def train(self, mode: bool = True) -> 'LaPEBackbone':
        self._plan_cache.clear()
        return super().train(mode)

    # ------------------------------------------------------------------
    # initialisation
    def _init_default_weights(self) -> None:
        """Generic first, specialised last: linear layers truncated normal
        (std 0.02) with zero bias, norms ones and zeros
        (:func:`~mmlape.models.layers.weight_init.init_generic_weights`),
        then :meth:`_init_special_weights`."""
        init_generic_weights(self)
        self._init_special_weights()

    def init_weights(self) -> None:
        """Load ``init_cfg=dict(type='Pretrained', ...)`` through
        :meth:`load_pretrained`; apply any other ``init_cfg`` as mmengine
        does."""
        cfg = self.init_cfg
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            self.load_pretrained(cfg['checkpoint'], cfg.get('prefix'),
                                 cfg.get(FROM_DEFAULT, False))
            self._is_init = True
            return
        super().init_weights()

    # ------------------------------------------------------------------
    # checkpoints: the family converts, checks and fits
    def _fit_state_dict(self, state_dict: Dict, prefix: str, *args,
                        **kwargs) -> None:
        """``load_state_dict`` pre-hook: fit the checkpoint to this model,
        whatever the route (``init_cfg``, ``load_from``, resume)."""
        for note in self.checkpoint_family.fit(state_dict, prefix,
                                               self.checkpoint_spec()):
            print_log(note, logger='current')

    def check_join_compatible(self, state_dict: Dict) -> None:
        """Refuse backbone keys of another PE join (a ValueError naming
        both)."""
        self.checkpoint_family.check(state_dict, self.checkpoint_spec())

    def load_pretrained(self,
                        checkpoint: str,
                        prefix: Optional[str] = None,
                        join_from_default: bool = False) -> None:
        """Load a checkpoint of any layout the family reads (see
        :meth:`~mmlape.models.checkpoint.CheckpointFamily.load`).

        Args:
            checkpoint (str): Path of the checkpoint.
            prefix (str, optional): Keep only keys under this prefix and
                strip it. Defaults to None (a ``backbone.`` prefix is then
                detected).
            join_from_default (bool): Start this backbone's join from a
                default-join checkpoint (``init_cfg`` option
                ``join_from_default``): its PE norms start fresh.
                Defaults to False.
        """
        self.checkpoint_family.load(self, checkpoint, prefix,
                                    self.checkpoint_spec(),
                                    self.new_key_pattern, join_from_default)
