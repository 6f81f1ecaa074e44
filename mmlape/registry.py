"""The ``mmlape`` registry scope and its bridge to the host libraries.

Backbones are registered in the ``mmlape`` scope and in mmengine's root
``MODELS``, the parent of every host scope, so ``type='LaPEViT'`` resolves
under mmpretrain, mmdet and mmseg alike. The ``mmlape`` registries resolve
names they lack in the innermost host scope, so configs inheriting
``_base_ = 'mmlape::...'`` build as the host would; mmlape's entry in
mmengine's ``MODULE2PACKAGE`` table (as any OpenMMLab package has) finds
those files.
"""
from importlib import import_module
from typing import Callable, Optional, Type

import mmengine.registry as mmengine_registry
from mmengine.config.utils import MODULE2PACKAGE
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import DefaultScope, Registry

__all__ = [
    'FFNS', 'HOOKS', 'MODELS', 'PE_JOINS', 'POOLINGS', 'TOKENIZERS',
    'TRANSFORMS', 'register_model', 'host_scope'
]

SCOPE = 'mmlape'
# mmengine resolves ``pkg::path`` bases for the packages of this table;
# mmlape's configs are installed in mmlape/.mim/configs (see setup.py).
MODULE2PACKAGE.setdefault(SCOPE, 'mmlape')


def host_scope() -> Optional[str]:
    """The innermost default scope that is not ``mmlape``, if any.

    Building a ``_scope_='mmlape'`` dict makes ``mmlape`` current for a
    while; the host scope is the one it covers (e.g. ``mmdet``).
    """
    # mmengine keeps the DefaultScope instances in creation order; the
    # current one is the last (DefaultScope.get_current_instance).
    instances = list(getattr(DefaultScope, '_instance_dict', {}).values())
    for instance in reversed(instances):
        if instance.scope_name != SCOPE:
            return instance.scope_name
    return None


class _ScopeRegistry(Registry):
    """A registry of the ``mmlape`` scope that falls back on the host's."""

    def get(self, key: str) -> Optional[Type]:
        scope, real_key = self.split_scope_key(key)
        if scope is None and real_key not in self._module_dict:
            host = host_scope()
            if host is not None:
                try:
                    import_module(f'{host}.registry')
                except ImportError:
                    pass
                registry = self._get_root_registry()._search_child(host)
                if registry is not None and registry is not self:
                    try:
                        found = registry.get(key)
                    except RuntimeError:  # not a name the host knows
                        found = None
                    if found is not None:
                        return found
        return super().get(key)


#: Models of the ``mmlape`` scope (a child of mmengine's root registry).
MODELS = _ScopeRegistry(
    'model', parent=MMENGINE_MODELS, scope=SCOPE, locations=['mmlape.models'])

#: The ``mmlape`` child of every other mmengine root registry (datasets,
#: transforms, metrics, schedulers, ...): empty, they resolve names in the
#: host scope, so that configs inheriting ``mmlape::`` bases build.
#: ``_LOCATIONS``: where the registries holding mmlape's classes find them.
_LOCATIONS = {
    'hook': ['mmlape.hosts.hooks', 'mmlape.hosts.mmcv_ops'],
    'transform': ['mmlape.datasets.transforms'],
}
SCOPE_REGISTRIES = {'model': MODELS}
for _name in mmengine_registry.__all__:
    _root = getattr(mmengine_registry, _name)
    if (isinstance(_root, Registry) and _root.parent is None
            and _root is not MMENGINE_MODELS):
        SCOPE_REGISTRIES[_root.name] = _ScopeRegistry(
            _root.name,
            parent=_root,
            scope=SCOPE,
            locations=_LOCATIONS.get(_root.name, []))

#: Hooks of the ``mmlape`` scope; ``AtomicCheckpointHook`` is also in
#: mmengine's root registry, so every host scope finds it by name.
HOOKS = SCOPE_REGISTRIES['hook']

#: Data transforms of the ``mmlape`` scope (``type='mmlape.<name>'``).
TRANSFORMS = SCOPE_REGISTRIES['transform']

#: Position-embedding joins (``pe_join=dict(type=...)``). Kept apart from
#: ``MODELS``: a join is a part of a backbone, never a model on its own.
PE_JOINS = Registry(
    'pe join', scope=SCOPE, locations=['mmlape.models.layers.pe_join'])

#: Parts of the one ViT, chosen by config: ``tokenizer``, ``ffn``,
#: ``pooling``.
TOKENIZERS = Registry(
    'tokenizer', scope='mmlape', locations=['mmlape.models.layers.tokenizers'])
FFNS = Registry('ffn', scope='mmlape', locations=['mmlape.models.layers.ffn'])
POOLINGS = Registry(
    'pooling', scope='mmlape', locations=['mmlape.models.layers.pooling'])


def register_model(name: Optional[str] = None,
                   force: bool = False) -> Callable[[Type], Type]:
    """Register a model class so every OpenMMLab scope can build it.

    Args:
        name (str, optional): The registered name. Defaults to the class
            name.
        force (bool): Replace an existing entry of the same name.
            Defaults to False.

    Example:
        >>> import torch
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
