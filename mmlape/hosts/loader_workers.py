"""Loader workers from the CPUs each training process has, within the
config's bounds (a text config cannot count CPUs)::

    auto_num_workers = dict(floor=4, ceiling=16)

The tools set every dataloader's ``num_workers`` to
``clamp(cpus_per_process - 1, floor, ceiling)``, one CPU left to the
training process itself.

References:
    torchrun's ``LOCAL_WORLD_SIZE``; Slurm's ``SLURM_NTASKS_PER_NODE`` and
    ``SLURM_CPUS_PER_TASK``.
"""
import os
import re
from typing import Mapping, Optional, Sequence

from mmengine.config import Config

from mmlape.utils.errors import ConfigError

__all__ = [
    'apply_auto_num_workers', 'auto_num_workers', 'cpus_per_process',
    'local_world_size'
]

#: The config key.
KEY = 'auto_num_workers'
#: The dataloaders the key sets.
LOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')


def _env_int(env: Mapping[str, str], name: str) -> Optional[int]:
    """The leading positive integer of ``env[name]``, or None."""
    found = re.match(r'\s*(\d+)', env.get(name) or '')
    value = int(found.group(1)) if found else 0
    return value if value > 0 else None


def local_world_size(launcher: str = 'pytorch',
                     env: Optional[Mapping[str, str]] = None) -> int:
    """Training processes on this node.

    Args:
        launcher (str): The run's launcher (``none``: one process).
            Defaults to 'pytorch'.
        env (Mapping, optional): The environment. Defaults to
            ``os.environ``.

    Returns:
        int: ``LOCAL_WORLD_SIZE`` (torchrun), else
        ``SLURM_NTASKS_PER_NODE`` (srun), else 1.

    Example:
        >>> local_world_size('pytorch', {'LOCAL_WORLD_SIZE': '8'})
        8
        >>> local_world_size('none', {'LOCAL_WORLD_SIZE': '8'})
        1
    """
    env = os.environ if env is None else env
    if launcher == 'none':
        return 1
    return (_env_int(env, 'LOCAL_WORLD_SIZE')
            or _env_int(env, 'SLURM_NTASKS_PER_NODE') or 1)


def cpus_per_process(launcher: str = 'pytorch',
                     env: Optional[Mapping[str, str]] = None,
                     cpus: Optional[int] = None) -> int:
    """CPUs one training process of this node can count on: its CPU set
    divided by the processes on the node, except a Slurm task bound to its
    own CPUs (set no larger than ``SLURM_CPUS_PER_TASK``), which keeps it.

    Args:
        launcher (str): The run's launcher. Defaults to 'pytorch'.
        env (Mapping, optional): The environment. Defaults to
            ``os.environ``.
        cpus (int, optional): The size of the CPU set. Defaults to this
            process's.

    Returns:
        int: At least 1.

    Example:
        >>> cpus_per_process('pytorch', {'LOCAL_WORLD_SIZE': '8'}, 128)
        16
        >>> env = {'SLURM_NTASKS_PER_NODE': '8', 'SLURM_CPUS_PER_TASK': '5'}
        >>> cpus_per_process('slurm', env, 5), cpus_per_process(
        ...     'slurm', env, 40)
        (5, 5)
    """
    env = os.environ if env is None else env
    if cpus is None:
        cpus = len(os.sched_getaffinity(0))
    processes = local_world_size(launcher, env)
    bound = _env_int(env, 'SLURM_CPUS_PER_TASK')
    if (launcher != 'none' and _env_int(env, 'LOCAL_WORLD_SIZE') is None
            and bound is not None and cpus <= bound):
        return max(1, cpus)
    return max(1, cpus // processes)


def auto_num_workers(floor: int, ceiling: int, cpus: int) -> int:
    """``clamp(cpus - 1, floor, ceiling)``: the workers of a process that
    has ``cpus`` CPUs.

    Example:
        >>> [auto_num_workers(4, 16, cpus) for cpus in (2, 10, 64)]
        [4, 9, 16]
    """
    return min(max(cpus - 1, floor), ceiling)


def _bounds(spec) -> Sequence[int]:
    """``(floor, ceiling)`` of the config's key, checked."""
    if not isinstance(spec, Mapping) or set(spec) != {'floor', 'ceiling'}:
        raise ConfigError(
            f'{KEY} must be dict(floor=..., ceiling=...) or None, got '
            f'{spec!r}')
    floor, ceiling = spec['floor'], spec['ceiling']
    for name, value in (('floor', floor), ('ceiling', ceiling)):
        if isinstance(value, bool) or not isinstance(value, int) \
                or value < 1:
            raise ConfigError(f'{KEY}.{name} must be an integer >= 1, got '
                              f'{value!r}')
    if floor > ceiling:
        raise ConfigError(f'{KEY}: floor {floor} is above ceiling {ceiling}')
    return floor, ceiling


def apply_auto_num_workers(cfg: Config,
                           env: Optional[Mapping[str, str]] = None,
                           cpus: Optional[int] = None) -> Optional[str]:
    """Set the dataloaders' ``num_workers`` from the config's
    ``auto_num_workers`` and this node's CPUs.

    Dataloaders with ``num_workers=0`` are left so (by choice), with
    ``persistent_workers=False`` (torch refuses the pair);
    ``auto_num_workers=None`` keeps the configured counts.

    Args:
        cfg (Config): The run's config (its ``launcher`` counts); changed
            in place.
        env (Mapping, optional): The environment. Defaults to
            ``os.environ``.
        cpus (int, optional): The size of the CPU set. Defaults to this
            process's.

    Returns:
        str or None: One line for the run's log, or None where the config
        has no bounds.

    Raises:
        ConfigError: Bounds that are not two integers ``1 <= floor <=
        ceiling``.

    Example:
        >>> cfg = Config(dict(
        ...     auto_num_workers=dict(floor=2, ceiling=8),
        ...     train_dataloader=dict(num_workers=5), launcher='none'))
        >>> _ = apply_auto_num_workers(cfg, {}, cpus=16)
        >>> cfg.train_dataloader.num_workers
        8
    """
    for name in LOADERS:
        loader = cfg.get(name)
        if loader and not loader.get('num_workers'):
            loader['persistent_workers'] = False
    spec = cfg.get(KEY)
    if spec is None:
        return None
    floor, ceiling = _bounds(spec)
    launcher = cfg.get('launcher', 'none') or 'none'
    env = os.environ if env is None else env
    if cpus is None:
        cpus = len(os.sched_getaffinity(0))
    per_process = cpus_per_process(launcher, env, cpus)
    workers = auto_num_workers(floor, ceiling, per_process)
    changed = []
    for name in LOADERS:
        loader = cfg.get(name)
        if not loader or not loader.get('num_workers'):
            continue
        loader['num_workers'] = workers
        changed.append(name)
    processes = local_world_size(launcher, env)
    where = ', '.join(changed) if changed else 'none of the dataloaders ' \
        '(each has num_workers=0)'
    return (f'{KEY}: {workers} loader workers per process = clamp('
            f'{per_process} CPUs per process - 1, floor {floor}, ceiling '
            f'{ceiling}) ({cpus} CPUs, {processes} process(es) on this '
            f'node), set on {where}; {KEY}=None keeps the config\'s '
            f'num_workers')
