"""Building the pluggable parts of the ViT (tokenizer, FFN, pooling).

References:
    mmengine's registries; the pattern of
    :func:`mmlape.models.layers.pe_join.build_pe_join` (the backbone passes
    context such as ``embed_dims``, the config passes ``type`` and the
    part's own options).

A part is chosen by config, e.g. ``tokenizer=dict(type='T2T',
attention='performer')``. Type names match case-insensitively; an unknown
type or option ends in a ``ValueError`` that names the part, the bad value
and what is allowed.
"""
import inspect
from typing import Any, Dict, List, Optional, Union

import torch.nn as nn
from mmengine.registry import Registry

__all__ = ['build_part', 'init_defaults', 'part_names', 'part_options']


def part_names(registry: Registry) -> List[str]:
    """Registered type names of a part registry."""
    return sorted(registry.module_dict)


def _resolve(registry: Registry, kind: str, part_type) -> type:
    if inspect.isclass(part_type):
        return part_type
    lookup = {k.lower(): v for k, v in registry.module_dict.items()}
    cls = lookup.get(str(part_type).lower())
    if cls is None:
        raise ValueError(f'Unknown {kind}.type={part_type!r}; choose one of '
                         f'{part_names(registry)}')
    return cls


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


def part_class(registry: Registry, kind: str,
               cfg: Union[None, str, Dict]) -> Optional[type]:
    """The class a part config names (None for a None config)."""
    if cfg is None:
        return None
    if isinstance(cfg, str):
        cfg = dict(type=cfg)
    return _resolve(registry, kind, dict(cfg).get('type'))


def build_part(registry: Registry, kind: str, cfg: Union[str, Dict],
               **context) -> nn.Module:
    """Build a part from its config and the backbone's context.

    Context arguments a part does not take are not passed to it (a conv
    tokenizer has no use for ``num_heads``); a config may not set a context
    argument (the backbone owns it).

    Args:
        registry (Registry): ``TOKENIZERS``, ``FFNS`` or ``POOLINGS``.
        kind (str): The backbone argument, for messages (``'tokenizer'``).
        cfg (dict | str): ``dict(type=..., **options)`` or a type name.
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
    if isinstance(cfg, str):
        cfg = dict(type=cfg)
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise ValueError(f'{kind} must be a dict with a "type" key or a type '
                         f'name, got {cfg!r}')
    cfg = dict(cfg)
    part_type = cfg.pop('type')
    cls = _resolve(registry, kind, part_type)
    name = part_type if isinstance(part_type, str) else cls.__name__
    options = part_options(cls)
    clash = sorted(set(cfg) & set(context))
    if clash:
        raise ValueError(f'{kind} options {clash} are set by the backbone '
                         f'and cannot be given in {kind}')
    unknown = sorted(set(cfg) - set(options))
    if unknown:
        raise ValueError(f'Unknown option(s) {unknown} for {kind}.type='
                         f'{name!r}; its options are '
                         f'{sorted(set(options) - set(context))}')
    kwargs = {k: v for k, v in context.items() if k in options}
    return cls(**kwargs, **cfg)
