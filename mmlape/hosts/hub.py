"""mmlape's models in mmpretrain's model hub.

After :func:`install_mmpretrain_hub`, ``list_models``, ``get_model`` and
``inference_model`` know mmlape's classification configs by name. Every
entry answers to ``mmlape::<name>``; a plain name that is also
mmpretrain's stays mmpretrain's. The entries are registered right after
mmpretrain reads its own index (mmpretrain is not imported here).

References:
    mmpretrain 1.2.0's ``ModelHub`` and ``inference_model``
    (``mmpretrain/apis/model.py``).
"""
import copy
import functools
import os
import os.path as osp
import sys
from typing import Dict, List, Optional

from .imports import after_import

__all__ = [
    'HUB_MODULE', 'PREFIX', 'model_index_path', 'mmpretrain_entries',
    'register_mmpretrain_models', 'entry_of_config', 'install_mmpretrain_hub'
]

#: The module that defines mmpretrain's ``ModelHub``.
HUB_MODULE = 'mmpretrain.apis.model'
#: The prefix every mmlape entry answers to in mmpretrain's hub.
PREFIX = 'mmlape::'
#: ``Metadata.Default Scope`` of the entries mmpretrain's hub takes.
HUB_SCOPE = 'mmpretrain'
#: The inferencer task of those entries (mmpretrain ``ImageClassifier``).
TASK = 'Image Classification'


def model_index_path() -> str:
    """mmlape's ``model-index.yml``: the installed copy
    (``mmlape/.mim``), else the one at the root of a source checkout."""
    package = osp.dirname(osp.dirname(osp.abspath(__file__)))
    for path in (osp.join(package, '.mim', 'model-index.yml'),
                 osp.join(osp.dirname(package), 'model-index.yml')):
        if osp.isfile(path):
            return path
    raise FileNotFoundError(
        f'mmlape\'s model-index.yml is neither in {package}/.mim nor at the '
        'root of its source checkout; reinstall mmlape')


def mmpretrain_entries(index: Optional[str] = None) -> List:
    """The model-index entries that mmpretrain builds, with absolute config
    paths and a task on each.

    Args:
        index (str, optional): A ``model-index.yml``. Defaults to
            :func:`model_index_path`.

    Returns:
        list[modelindex.models.Model.Model]: One per config.
    """
    from modelindex.load_model_index import load
    from modelindex.models.Result import Result

    index = osp.abspath(index or model_index_path())
    root = osp.dirname(index)
    model_index = load(index)
    model_index.build_models_with_collections()
    entries = []
    for entry in model_index.models:
        meta = entry.metadata.data if entry.metadata is not None else {}
        if meta.get('Default Scope') != HUB_SCOPE:
            continue
        if not osp.isabs(entry.config):
            entry.config = osp.join(root, entry.config)
        if entry.results is None:
            # a config no paper reports: its task and data, no metrics
            data = getattr(entry.metadata, 'training_data', None)
            entry.results = [Result(TASK, data or '', {})]
        entries.append(entry)
    return entries


def register_mmpretrain_models(hub,
                               index: Optional[str] = None) -> Dict[str, str]:
    """Put mmlape's entries in mmpretrain's ``ModelHub`` (idempotent).

    Registered as ``mmlape::<name>``, and as ``<name>`` where mmpretrain
    has no model of that name; call it after mmpretrain registers its own.

    Args:
        hub (type): ``mmpretrain.apis.model.ModelHub``.
        index (str, optional): A ``model-index.yml``. Defaults to
            :func:`model_index_path`.

    Returns:
        dict: Each entry's name and the plain key it has, or the prefixed
        key where the plain name is mmpretrain's.
    """
    done = hub.__dict__.get('_mmlape_names')
    if done is not None:
        return done
    names, configs = {}, {}
    for entry in mmpretrain_entries(index):
        key = entry.name.lower()
        configs[osp.realpath(entry.config)] = entry
        hub._models_dict[PREFIX + key] = entry
        if key not in hub._models_dict:
            hub._models_dict[key] = entry
            names[entry.name] = key
        else:
            names[entry.name] = PREFIX + key
    hub._mmlape_configs = configs
    hub._mmlape_names = names
    return names


def entry_of_config(hub, config) -> Optional[object]:
    """The registered mmlape entry of a config path or ``Config`` (None for
    any other config, or a name)."""
    path = getattr(config, 'filename', None)
    if path is None and isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
    if not path or not str(path).endswith('.py'):
        return None
    hub._register_mmpretrain_models()
    configs = hub.__dict__.get('_mmlape_configs', {})
    return configs.get(osp.realpath(path))


def _wrap_hub(module) -> None:
    """Register mmlape's entries right after mmpretrain registers its own
    (the first ``list_models``/``get_model``/``ModelHub.get``)."""
    hub = module.ModelHub
    if hub.__dict__.get('_mmlape_wrapped'):
        return
    own = hub._register_mmpretrain_models  # bound to the class

    def _register_mmpretrain_models(cls):
        own()
        register_mmpretrain_models(cls)

    hub._register_mmpretrain_models = classmethod(_register_mmpretrain_models)
    hub._mmlape_wrapped = True

    own_get_model = module.get_model

    @functools.wraps(own_get_model)
    def get_model(model, *args, **kwargs):
        built = own_get_model(model, *args, **kwargs)
        if getattr(built, '_metainfo', None) is None:
            entry = entry_of_config(hub, model)
            if entry is not None:
                built._metainfo = copy.deepcopy(entry)
        return built

    module.get_model = get_model
    # the packages re-export it (already bound if they are imported)
    for name in ('mmpretrain.apis', 'mmpretrain'):
        package = sys.modules.get(name)
        if getattr(package, 'get_model', None) is own_get_model:
            package.get_model = get_model


def install_mmpretrain_hub() -> None:
    """Make mmpretrain's hub know mmlape's models, when (and if) mmpretrain
    is imported; imports nothing itself. Idempotent."""
    after_import(HUB_MODULE, _wrap_hub)
