"""Resolving and building the parts chosen by config: the ViT's tokenizer,
FFN and pooling, and the PE joins (:mod:`.pe_join`).

A part config is ``dict(type=..., **options)``, a type name, a class, or
None for the part's default. Names match case-insensitively; an unknown
type or option ends in a ``ValueError`` that names the part, the bad value
and what is allowed. The backbone passes context (``embed_dims``, ...);
the config passes the type and the part's own options.
"""
import inspect
from typing import Any, Dict, List, Optional, Tuple, Union

import torch.nn as nn
from mmengine.registry import Registry

__all__ = [
    'PartCfg', 'build_part', 'find_part', 'init_defaults', 'part_cfg',
    'part_class', 'part_names', 'part_options', 'resolve_part'
]

#: What a config may give for a part.
PartCfg = Union[None, str, type, Dict]


def part_names(registry: Registry) -> List[str]:
    """Registered type names of a part registry."""
    return sorted(registry.module_dict)


def part_cfg(cfg: PartCfg, default: PartCfg = None) -> Any:
    """``cfg`` as ``dict(type=..., **options)`` (a copy); None stands for
    ``default``, and stays None without one. Anything else is returned as
    it is, for :func:`resolve_part` to refuse."""
    if cfg is None:
        cfg = default
    if isinstance(cfg, str) or inspect.isclass(cfg):
        return dict(type=cfg)
    return dict(cfg) if isinstance(cfg, dict) else cfg


def find_part(registry: Registry,
              part_type: Any) -> Optional[Tuple[str, type]]:
    """The registered name and class of ``part_type``: a name in any case,
    or a class (its registered name, else its own); None for an unknown
    name. The one case-insensitive lookup of the registries."""
    if inspect.isclass(part_type):
        names = [k for k, v in registry.module_dict.items() if v is part_type]
        return (names[0] if names else part_type.__name__), part_type
    wanted = str(part_type).lower()
    for name, cls in registry.module_dict.items():
        if name.lower() == wanted:
            return name, cls
    return None


def resolve_part(registry: Registry,
                 kind: str,
                 cfg: PartCfg,
                 default: PartCfg = None) -> Tuple[type, Dict]:
    """The class of a part config and its options (``type`` removed).

    Args:
        registry (Registry): ``TOKENIZERS``, ``FFNS``, ``POOLINGS`` or
            ``PE_JOINS``.
        kind (str): The backbone argument, for messages (``'tokenizer'``).
        cfg (dict | str | type | None): The config.
        default (dict | str | type, optional): What None stands for.

    Raises:
        ValueError: No type, or an unknown one.
    """
    cfg = part_cfg(cfg, default)
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise ValueError(f'{kind} must be a dict with a "type" key or a type '
                         f'name, got {cfg!r}')
    part_type = cfg.pop('type')
    found = find_part(registry, part_type)
    if found is None:
        raise ValueError(f'Unknown {kind}.type={part_type!r}; choose one of '
                         f'{part_names(registry)}')
    return found[1], cfg


def part_class(registry: Registry, kind: str, cfg: PartCfg) -> Optional[type]:
    """The class a part config names (None for a None config)."""
    return None if cfg is None else resolve_part(registry, kind, cfg)[0]


def part_options(cls: type) -> List[str]:
    """Keyword arguments a part class accepts (its ``__init__`` and those
    of its bases up to ``nn.Module``)."""
    allowed = set()
    for klass in cls.__mro__:
        if klass is nn.Module or not issubclass(klass, nn.Module):
            continue
        if '__init__' in vars(klass):
            allowed |= set(inspect.signature(klass.__init__).parameters)
    return sorted(allowed - {'self', 'args', 'kwargs'})


def init_defaults(cls: type) -> Dict[str, Any]:
    """The defaults of ``cls``'s constructor and of its mmlape bases'
    (the nearest class's first)."""
    out: Dict[str, Any] = {}
    for klass in cls.__mro__:
        if '__init__' in vars(klass) and klass.__module__.startswith('mmlape'):
            for name, param in inspect.signature(
                    klass.__init__).parameters.items():
                if param.default is not param.empty:
                    out.setdefault(name, param.default)
    return out


def build_part(registry: Registry, kind: str, cfg: PartCfg,
               **context) -> nn.Module:
    """Build a part from its config and the backbone's context.

    Context arguments a part does not take are not passed to it (a conv
    tokenizer has no use for ``num_heads``); a config may not set a context
    argument (the backbone owns it).

    Args:
        registry (Registry): ``TOKENIZERS``, ``FFNS`` or ``POOLINGS``.
        kind (str): The backbone argument, for messages (``'tokenizer'``).
        cfg (dict | str | type): The config.
        **context: Values the backbone decides (``embed_dims``, ...).

    Returns:
        nn.Module: The part.

    Raises:
        ValueError: Unknown type or option, or an option the backbone sets.

    Example:
        >>> from mmlape.registry import FFNS
        >>> ffn = build_part(FFNS, 'ffn', dict(type='mlp'), embed_dims=64,
        ...                  feedforward_channels=128)
        >>> type(ffn).__name__
        'Mlp'
    """
    cls, cfg = resolve_part(registry, kind, cfg)
    options = part_options(cls)
    clash = sorted(set(cfg) & set(context))
    if clash:
        raise ValueError(f'{kind} options {clash} are set by the backbone '
                         f'and cannot be given in {kind}')
    unknown = sorted(set(cfg) - set(options))
    if unknown:
        name = find_part(registry, cls)[0]
        raise ValueError(f'Unknown option(s) {unknown} for {kind}.type='
                         f'{name!r}; its options are '
                         f'{sorted(set(options) - set(context))}')
    kwargs = {k: v for k, v in context.items() if k in options}
    return cls(**kwargs, **cfg)
