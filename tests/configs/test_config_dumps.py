"""Every provided config resolves to the settings recorded for it.

``config_dumps.json`` holds, for each config under ``configs/`` (not
``_base_/``), the SHA-256 of its resolved settings: ``Config.fromfile``'s
dict as sorted JSON, with the ``_scope_`` that mmengine writes into dicts
read from a host's base file dropped where it is the config's
``default_scope`` (the registry builds them in that scope either way).
A refactor of the configs (their bases, what they inherit) keeps every
digest; a deliberate change of a recipe updates the file:
``MMLAPE_UPDATE_CONFIG_DUMPS=1 pytest tests/configs/test_config_dumps.py``.
"""
import glob
import hashlib
import json
import os
import os.path as osp

import pytest
from conftest import ROOT
from mmengine.config import Config

RECORD = osp.join(osp.dirname(__file__), 'config_dumps.json')
CONFIGS = sorted(
    osp.relpath(path, ROOT)
    for path in glob.glob(osp.join(ROOT, 'configs', '*', '*.py'))
    if osp.basename(osp.dirname(path)) != '_base_')
#: The classification families (mmlape's runtime base is theirs).
CLASSIFICATION = ('cct', 'ceit', 'deit', 'swin', 't2t_vit', 'vit_lite')


def _drop_scope(value, scope):
    if isinstance(value, dict):
        if value.get('_scope_') == scope:
            value.pop('_scope_')
        for item in value.values():
            _drop_scope(item, scope)
    elif isinstance(value, list):
        for item in value:
            _drop_scope(item, scope)


def digest(path: str) -> str:
    """The SHA-256 of a config's resolved settings (see the module)."""
    settings = Config.fromfile(osp.join(ROOT, path)).to_dict()
    _drop_scope(settings, settings.get('default_scope'))
    text = json.dumps(settings, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def test_every_config_resolves_as_recorded():
    got = {path: digest(path) for path in CONFIGS}
    if os.environ.get('MMLAPE_UPDATE_CONFIG_DUMPS'):
        with open(RECORD, 'w') as f:
            json.dump(got, f, indent=1, sort_keys=True)
            f.write('\n')
    with open(RECORD) as f:
        recorded = json.load(f)
    assert sorted(got) == sorted(recorded), 'configs added or removed'
    changed = [path for path in CONFIGS if got[path] != recorded[path]]
    assert not changed, f'resolved settings changed: {changed}'


@pytest.mark.parametrize('key', [
    'custom_imports', 'env_cfg', "type='AtomicCheckpointHook')",
    "type='LaPEAccuracy'", "type='LaPEClsDataPreprocessor'"
])
def test_the_runtime_is_stated_once(key):
    """The classification configs' runtime and mmlape's loader, evaluator
    and preprocessor choices are stated in configs/_base_/, not again in a
    task config (the demo states cuDNN's autotuning off and its own
    accuracy; the dense configs inherit their host's runtime)."""
    stating = [
        path for path in CONFIGS if path.split('/')[1] in CLASSIFICATION
        and key in open(osp.join(ROOT, path)).read()
    ]
    assert stating == []
