"""Launch helpers shared by ``tools/train.py`` and ``tools/test.py``.

References:
    mmengine's ``Runner.setup_env`` (it initialises the process group only
    when none exists) and ``Runner.wrap_model`` (``model_wrapper_cfg`` wins
    over its default ``device_ids``).

mmengine's pytorch and slurm launchers assume GPUs: they call
``torch.cuda.set_device``, default to nccl and wrap DDP with
``device_ids=[LOCAL_RANK]``. On a machine without CUDA,
:func:`setup_cpu_distributed` initialises the process group with gloo itself
and sets ``device_ids=None``, so the same ``tools/dist_train.sh`` runs N CPU
processes and ``tools/slurm_train.sh`` runs on CPU nodes.
"""
import datetime
import importlib
import os
import subprocess

import torch
import torch.distributed as dist
from mmengine.config import Config

__all__ = [
    'UsageError', 'check_checkpoint_fits', 'check_dataset_paths',
    'register_scope_modules', 'setup_cpu_distributed', 'slurm_to_torch_env'
]


class UsageError(Exception):
    """A problem with the user's input; tools print it without a
    traceback and exit with status 2."""


def setup_cpu_distributed(cfg: Config) -> bool:
    """Prepare a distributed run on CPU; a no-op when CUDA is available.

    Args:
        cfg (Config): The run's config; ``cfg.launcher`` must be set.

    Returns:
        bool: Whether the CPU (gloo) path was taken.
    """
    if cfg.get('launcher', 'none') == 'none' or torch.cuda.is_available():
        return False
    env_cfg = cfg.setdefault('env_cfg', {})
    dist_cfg = env_cfg.setdefault('dist_cfg', {})
    dist_cfg['backend'] = 'gloo'
    if not dist.is_initialized():
        if cfg.launcher == 'slurm':
            slurm_to_torch_env(dist_cfg.get('port'))
        elif cfg.launcher != 'pytorch':
            raise RuntimeError(
                f'launcher={cfg.launcher!r} without CUDA is not supported; '
                f'use tools/dist_train.sh (torchrun, launcher=pytorch) or '
                f'tools/slurm_train.sh (launcher=slurm)')
        timeout = datetime.timedelta(seconds=dist_cfg.get('timeout', 1800))
        dist.init_process_group(
            backend='gloo',
            rank=int(os.environ['RANK']),
            world_size=int(os.environ['WORLD_SIZE']),
            timeout=timeout)
    wrapper = dict(cfg.get('model_wrapper_cfg') or {})
    wrapper.setdefault('type', 'MMDistributedDataParallel')
    wrapper.setdefault('broadcast_buffers', False)
    wrapper.setdefault('find_unused_parameters',
                       cfg.get('find_unused_parameters', False))
    wrapper['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper
    return True


def slurm_to_torch_env(port=None) -> None:
    """Set torch's rendezvous variables from those of a Slurm task.

    As mmengine's slurm launcher does: ``RANK`` from ``SLURM_PROCID``,
    ``WORLD_SIZE`` from ``SLURM_NTASKS``, ``LOCAL_RANK`` from
    ``SLURM_LOCALID``, ``MASTER_ADDR`` (unless set) from the first host of
    ``SLURM_NODELIST`` (``scontrol show hostnames``), ``MASTER_PORT`` from
    ``port``, the environment, or 29500.

    Args:
        port (int, optional): ``env_cfg.dist_cfg.port``. Defaults to None.

    Raises:
        UsageError: When a Slurm variable is missing (not inside ``srun``).
    """
    missing = [
        name for name in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_NODELIST')
        if name not in os.environ
    ]
    if missing:
        raise UsageError(
            f'--launcher slurm: {", ".join(missing)} not set; start the job '
            f'with srun (tools/slurm_train.sh, tools/slurm_test.sh)')
    env = os.environ
    if 'MASTER_ADDR' not in env:
        nodes = env['SLURM_NODELIST']
        try:
            out = subprocess.run(['scontrol', 'show', 'hostnames', nodes],
                                 capture_output=True,
                                 text=True)
            hosts, why = out.stdout.split(), out.stderr.strip()
        except FileNotFoundError:
            hosts, why = [], 'scontrol not found'
        if not hosts:
            raise UsageError(
                f'--launcher slurm: "scontrol show hostnames {nodes}" '
                f'failed ({why or "no hosts"}); set MASTER_ADDR to the '
                f'first node of the job')
        env['MASTER_ADDR'] = hosts[0]
    if port is not None:
        env['MASTER_PORT'] = str(port)
    env.setdefault('MASTER_PORT', '29500')
    env['RANK'] = env['SLURM_PROCID']
    env['WORLD_SIZE'] = env['SLURM_NTASKS']
    env['LOCAL_RANK'] = env.get('SLURM_LOCALID', '0')


def register_scope_modules(cfg: Config) -> str:
    """Register the modules of the config's ``default_scope`` library.

    Returns:
        str: The scope (``mmpretrain``, ``mmdet`` or ``mmseg``).

    Raises:
        ValueError: When the config names no known scope.
    """
    scope = cfg.get('default_scope')
    if scope not in ('mmpretrain', 'mmdet', 'mmseg'):
        raise ValueError(
            f"the config's default_scope is {scope!r}; mmlape's tools run "
            f"mmpretrain, mmdet and mmseg configs (inherit one of their "
            f"default runtimes)")
    module = importlib.import_module(f'{scope}.utils')
    module.register_all_modules(init_default_scope=False)
    return scope


def _dataset_cfgs(cfg: Config, phases):
    for phase in phases:
        loader = cfg.get(f'{phase}_dataloader')
        if not loader:
            continue
        stack = [(f'{phase}_dataloader.dataset', loader.get('dataset'))]
        while stack:
            where, ds = stack.pop()
            if not isinstance(ds, dict):
                continue
            yield where, ds
            if isinstance(ds.get('dataset'), dict):
                stack.append((where + '.dataset', ds['dataset']))
            for i, sub in enumerate(ds.get('datasets') or []):
                stack.append((f'{where}.datasets[{i}]', sub))


def check_dataset_paths(cfg: Config, phases=('train', 'val', 'test')) -> None:
    """Fail early, and clearly, when a dataset path does not exist.

    Checks ``data_root``, ``ann_file`` and the folders of ``data_prefix``
    of every dataset (wrappers included) of the given phases.

    Raises:
        UsageError: Names the config key and the missing path.
    """
    for where, ds in _dataset_cfgs(cfg, phases):
        root = ds.get('data_root') or ''
        paths = []
        if root:
            paths.append(('data_root', root))
        ann = ds.get('ann_file')
        if ann:
            paths.append(('ann_file', os.path.join(root, ann)))
        prefix = ds.get('data_prefix')
        if isinstance(prefix, str):
            prefix = dict(prefix=prefix)
        for key, value in (prefix or {}).items():
            if isinstance(value, str) and value:
                paths.append((f'data_prefix.{key}', os.path.join(root, value)))
        for key, path in paths:
            if not os.path.exists(path):
                raise UsageError(
                    f'dataset path "{path}" does not exist ({where}.{key}). '
                    f'Put the data there, or point the config at it, e.g. '
                    f'--cfg-options {where}.data_root=/path/to/data')


def check_checkpoint_fits(model: torch.nn.Module, filename: str,
                          purpose: str) -> dict:
    """Refuse a checkpoint whose weights do not match ``model`` exactly.

    Returns:
        dict: The checkpoint's state dict (read safely), so that a caller
        need not read the file again.

    Raises:
        UsageError: Lists missing, unexpected and mismatched keys.
    """
    from .convert import unwrap_state_dict
    from .safe_load import safe_torch_load
    if not os.path.isfile(filename):
        raise UsageError(f'{purpose}: checkpoint "{filename}" does not exist')
    state = unwrap_state_dict(safe_torch_load(filename, 'cpu'))
    own = getattr(model, 'module', model).state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    mismatched = [
        f'{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}' for k in own
        if k in state and tuple(state[k].shape) != tuple(own[k].shape)
    ]
    if missing or unexpected or mismatched:
        parts = []
        for label, keys in (('missing', missing), ('unexpected', unexpected),
                            ('shape mismatch', mismatched)):
            if keys:
                parts.append(f'{len(keys)} {label} (e.g. {keys[:3]})')
        raise UsageError(
            f'{purpose}: "{filename}" is a checkpoint of another model: ' +
            '; '.join(parts) + '. Use a checkpoint saved with this config '
            '(to initialise from another model, use --cfg-options '
            'load_from=... or the backbone init_cfg instead).')
    return state
