"""The ``mmlape`` registry scope and its bridge to the host libraries.

References:
    mmengine's hierarchical registries: a scoped registry (``mmdet``,
    ``mmseg``, ``mmpretrain``) looks a name up in itself and then in its
    parents, up to mmengine's root registry.

mmlape registers each backbone twice: in its own ``mmlape`` scope (so that
``type='mmlape.LaPEViT'`` always works) and in mmengine's root ``MODELS``
registry. The root is the parent of every host scope, so the same class
resolves by its plain name under ``default_scope='mmpretrain'``, ``'mmdet'``
and ``'mmseg'`` alike, without mmlape importing those packages. Names
registered this way carry a ``LaPE`` prefix so that they cannot shadow or be
shadowed by a host's own classes.
"""
from typing import Callable, Optional, Type

from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import Registry

__all__ = [
    'MODELS', 'PE_JOINS', 'TOKENIZERS', 'FFNS', 'POOLINGS', 'register_model'
]

#: Models of the ``mmlape`` scope (a child of mmengine's root registry).
MODELS = Registry(
    'model',
    parent=MMENGINE_MODELS,
    scope='mmlape',
    locations=['mmlape.models'])

#: Position-embedding joins (``pe_join=dict(type=...)``). Kept apart from
#: ``MODELS``: a join is a part of a backbone, never a model on its own.
PE_JOINS = Registry(
    'pe join', scope='mmlape', locations=['mmlape.models.layers.pe_join'])

#: Parts of the one ViT, chosen by config like the joins: how an image
#: becomes tokens (``tokenizer=dict(type='T2T')``), the feed-forward network
#: of every block (``ffn=dict(type='LeFF')``) and how the tokens become one
#: vector (``pooling=dict(type='SeqPool')``).
TOKENIZERS = Registry(
    'tokenizer', scope='mmlape', locations=['mmlape.models.layers.tokenizers'])
FFNS = Registry('ffn', scope='mmlape', locations=['mmlape.models.layers.ffn'])
POOLINGS = Registry(
    'pooling', scope='mmlape', locations=['mmlape.models.layers.pooling'])


def register_model(name: Optional[str] = None,
                   force: bool = False) -> Callable[[Type], Type]:
    """Register a model class so every OpenMMLab scope can build it.

    The class is added to the ``mmlape`` scope and to mmengine's root
    ``MODELS`` registry, which the mmpretrain, mmdet and mmseg registries
    consult after their own entries.

    Args:
        name (str, optional): The registered name. Defaults to the class
            name.
        force (bool): Replace an existing entry of the same name.
            Defaults to False.

    Example:
        >>> @register_model()
        ... class LaPEToyBackbone(torch.nn.Module):
        ...     pass
        >>> from mmdet.registry import MODELS as MMDET_MODELS
        >>> MMDET_MODELS.get('LaPEToyBackbone') is LaPEToyBackbone
        True
    """

    def _register(cls: Type) -> Type:
        MODELS.register_module(name=name, module=cls, force=force)
        MMENGINE_MODELS.register_module(name=name, module=cls, force=force)
        return cls

    return _register
