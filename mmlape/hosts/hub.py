"""mmlape's models in mmpretrain's model hub.

After :func:`install_mmpretrain_hub`, ``list_models``, ``get_model`` and
``inference_model`` know mmlape's classification configs by name. Every
entry answers to ``mmlape::<name>``; a plain name that is also
mmpretrain's stays mmpretrain's. The entries go in through mmpretrain's
public ``ModelHub.register_model_index`` on the hub's first use, right
after mmpretrain reads its own index (mmpretrain is not imported here).

Upstream changed: mmpretrain's ``list_models`` and ``ModelHub.get`` first
register mmlape's index (once) and its ``get_model`` of an mmlape config
file attaches the config's entry, because mmpretrain reads only its own
index, and ``inference_model`` takes the task from that entry.

References:
    mmpretrain 1.2.0's ``ModelHub``, ``list_models``, ``get_model`` and
    ``inference_model`` (``mmpretrain/apis/model.py``).
"""
import copy
import functools
import os
import os.path as osp
import sys
import tempfile
from typing import Any, Dict, List, Optional

from .imports import after_import

__all__ = [
    'HUB_MODULE', 'PREFIX', 'model_index_path', 'mmpretrain_entries',
    'entry_record', 'register_mmpretrain_models', 'entry_of_config',
    'install_mmpretrain_hub'
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


def entry_record(entry: Any) -> Any:
    """A model-index entry (or a part of one) as the YAML data of a
    ``Models`` item (``modelindex`` keeps it in ``.data``; unset fields are
    left out).

    Example:
        >>> entry_record({'Name': 'a', 'Weights': None, 'Results': []})
        {'Name': 'a', 'Results': []}
    """
    data = getattr(entry, 'data', entry)
    if isinstance(data, dict):
        return {
            key: entry_record(value)
            for key, value in data.items() if value is not None
        }
    if isinstance(data, (list, tuple)):
        return [entry_record(value) for value in data]
    return data


def register_mmpretrain_models(hub,
                               index: Optional[str] = None) -> Dict[str, str]:
    """Put mmlape's entries in mmpretrain's ``ModelHub`` through its
    ``register_model_index`` (idempotent).

    Registered as ``mmlape::<name>``, and as ``<name>`` where the hub has
    no model of that name; call it after mmpretrain registers its own. The
    index the hub reads is written for it (only those entries, built with
    their collections, each with a task and its config's absolute path)
    and removed once read.

    Args:
        hub (type): ``mmpretrain.apis.model.ModelHub``.
        index (str, optional): A ``model-index.yml``. Defaults to
            :func:`model_index_path`.

    Returns:
        dict: Each entry's name and the plain key it has, or the prefixed
        key where the plain name is taken.

    Raises:
        ValueError: mmpretrain's, where a prefixed name is registered
            already (from another index).
    """
    done = hub.__dict__.get('_mmlape_names')
    if done is not None:
        return done
    import yaml

    names, configs, models = {}, {}, []
    for entry in mmpretrain_entries(index):
        key = entry.name.lower()
        record = entry_record(entry)
        record.pop('In Collection', None)  # built in already
        models.append(dict(record, Name=PREFIX + key))
        names[entry.name] = PREFIX + key
        if not hub.has(key):
            models.append(record)
            names[entry.name] = key
        # the record ``get_model`` of the config attaches: the entry under
        # the name that finds it
        entry.data['Name'] = names[entry.name]
        configs[osp.realpath(entry.config)] = entry
    with tempfile.TemporaryDirectory(prefix='mmlape-hub-') as folder:
        path = osp.join(folder, 'model-index.yml')
        with open(path, 'w', encoding='utf-8') as f:
            yaml.safe_dump(dict(Models=models), f, sort_keys=False)
        hub.register_model_index(path)
    hub._mmlape_configs = configs
    hub._mmlape_names = names
    return names


def _config_path(config) -> Optional[str]:
    """The file of a config path or ``Config`` (None for a name)."""
    path = getattr(config, 'filename', None)
    if path is None and isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
    if not path or not str(path).endswith('.py'):
        return None
    return str(path)


def entry_of_config(hub, config) -> Optional[object]:
    """The entry that :func:`register_mmpretrain_models` put in ``hub`` for
    a config path or ``Config`` (None for any other config, or a name)."""
    path = _config_path(config)
    if path is None:
        return None
    configs = hub.__dict__.get('_mmlape_configs', {})
    return configs.get(osp.realpath(path))


def _wrap_hub(module) -> None:
    """Register mmlape's entries right after mmpretrain registers its own,
    on the first ``list_models``/``ModelHub.get``/``get_model`` of an mmlape
    config (its public entry points)."""
    hub = module.ModelHub
    if hub.__dict__.get('_mmlape_wrapped'):
        return
    own_get = hub.__dict__['get'].__func__
    own_list_models = module.list_models
    own_get_model = module.get_model

    def register() -> None:
        if '_mmlape_names' not in hub.__dict__:
            own_list_models()  # mmpretrain reads its own index first
            register_mmpretrain_models(hub)

    @functools.wraps(own_get)
    def get(cls, model_name):
        register()
        return own_get(cls, model_name)

    @functools.wraps(own_list_models)
    def list_models(*args, **kwargs):
        register()
        return own_list_models(*args, **kwargs)

    @functools.wraps(own_get_model)
    def get_model(model, *args, **kwargs):
        built = own_get_model(model, *args, **kwargs)
        if getattr(built, '_metainfo', None) is None and \
                _config_path(model) is not None:
            register()
            entry = entry_of_config(hub, model)
            if entry is not None:
                built._metainfo = copy.deepcopy(entry)
        return built

    hub.get = classmethod(get)
    hub._mmlape_wrapped = True
    module.list_models, module.get_model = list_models, get_model
    # the module, and those that took its functions already (mmpretrain
    # imported before): ``mmpretrain``, ``mmpretrain.apis``, the inferencers
    swaps = ((own_list_models, list_models), (own_get_model, get_model))
    for name, loaded in list(sys.modules.items()):
        if loaded is None or not (name == 'mmpretrain'
                                  or name.startswith('mmpretrain.apis')):
            continue
        for own, ours in swaps:
            attr = own.__name__
            if getattr(loaded, attr, None) is own:
                setattr(loaded, attr, ours)


def install_mmpretrain_hub() -> None:
    """Make mmpretrain's hub know mmlape's models, when (and if) mmpretrain
    is imported; imports nothing itself. Idempotent."""
    after_import(HUB_MODULE, _wrap_hub)
