"""The opt-in speed parts: one runtime setting, off by default.

Two parts replace a host's or torch's behaviour to save GPU time, and no
GPU figure on the user's path (``tools/train.py`` end to end) has yet shown
that either pays, so neither is on the default path:

- ``triton_pe_add``: the per-layer PE add in a Triton kernel on CUDA for
  large batches (:mod:`mmlape.models.layers.pe_add`) instead of PyTorch's
  add;
- ``lazy_log``: mmengine's ``RuntimeInfoHook`` replaced by
  :class:`~mmlape.hosts.lazy_log.LazyRuntimeInfoHook` (a step's logged
  values read from the device only when logged), with the optimizer
  wrapper's gradient-norm logging rebound to match.

A config turns them on with ``speedups``, e.g. ``--cfg-options
speedups.lazy_log=True``; ``tools/train.py`` and ``tools/test.py`` apply it
when they load the config (docs/speed.md, "Opt-in speed parts"). The GPU
acceptance run decides their default from its A/B figure.
"""
from typing import Dict

from mmengine.config import Config

from mmlape.utils.errors import ConfigError

__all__ = ['SPEEDUPS', 'apply_speedups']

#: Each opt-in part and what it does, for messages and docs.
SPEEDUPS: Dict[str, str] = {
    'triton_pe_add': 'the per-layer PE add in a Triton kernel (CUDA)',
    'lazy_log': "a step's logged values read only when logged",
}


def apply_speedups(cfg: Config) -> Dict[str, bool]:
    """Apply the config's ``speedups`` (none: every part off).

    Returns:
        dict: Each part and whether it is on.

    Raises:
        ConfigError: ``speedups`` is not a dict of known parts with
            boolean values.

    Example:
        >>> cfg = Config(dict(speedups=dict(lazy_log=True)))
        >>> apply_speedups(cfg)['lazy_log']
        True
        >>> cfg.default_hooks.runtime_info.type
        'LazyRuntimeInfoHook'
    """
    from mmlape.models.layers import pe_add
    given = cfg.get('speedups') or {}
    if not isinstance(given, dict):
        raise ConfigError(f'speedups must be a dict of {list(SPEEDUPS)} '
                          f'with True or False, got {given!r}')
    unknown = sorted(set(given) - set(SPEEDUPS))
    if unknown:
        raise ConfigError(f'speedups: unknown part(s) {unknown}; the '
                          f'opt-in parts are {list(SPEEDUPS)}')
    on = {}
    for name in SPEEDUPS:
        value = given.get(name, False)
        if not isinstance(value, bool):
            raise ConfigError(f'speedups.{name} must be True or False, got '
                              f'{value!r}')
        on[name] = value
    pe_add.use_triton(on['triton_pe_add'])
    if on['lazy_log']:
        hooks = cfg.get('default_hooks') or {}
        hook = dict(hooks.get('runtime_info') or {})
        if hook.get('type',
                    'RuntimeInfoHook') not in ('RuntimeInfoHook',
                                               'mmengine.RuntimeInfoHook',
                                               'LazyRuntimeInfoHook'):
            raise ConfigError(
                f'speedups.lazy_log replaces mmengine\'s RuntimeInfoHook; '
                f'default_hooks.runtime_info is {hook["type"]!r}')
        hook['type'] = 'LazyRuntimeInfoHook'
        cfg.merge_from_dict(dict(default_hooks=dict(runtime_info=hook)))
    return on
