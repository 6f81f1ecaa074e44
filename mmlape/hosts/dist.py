"""Distributed runs on machines without CUDA.

mmengine's launchers need CUDA; without it :func:`setup_cpu_distributed`
initialises the process group with gloo and DDP without device ids.
:func:`check_launcher_env` names the variables a launcher's processes lack
and the command that sets them.
"""
import datetime
import os
import subprocess

import torch
import torch.distributed as dist
from mmengine.config import Config

from mmlape.utils.device import require_usable_gpu
from mmlape.utils.errors import UsageError

__all__ = [
    'LAUNCHER_VARIABLES', 'check_launcher_env', 'setup_cpu_distributed',
    'slurm_to_torch_env'
]

#: What each launcher's processes read from the environment, and what
#: starts them with it.
LAUNCHER_VARIABLES = dict(
    pytorch=(('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR',
              'MASTER_PORT'),
             'start the processes with torchrun: tools/dist_train.sh CONFIG '
             'GPUS, tools/dist_test.sh CONFIG CHECKPOINT GPUS'),
    slurm=(('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_NODELIST'),
           'start the job with srun (tools/slurm_train.sh, '
           'tools/slurm_test.sh)'),
    mpi=(('OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE',
          'OMPI_COMM_WORLD_LOCAL_RANK', 'MASTER_ADDR'),
         "start the processes with Open MPI's mpirun, MASTER_ADDR set to "
         'the first host'))


def check_launcher_env(launcher: str, env=None) -> None:
    """Refuse a launcher whose processes lack its variables.

    Args:
        launcher (str): ``'none'``, ``'pytorch'``, ``'slurm'`` or ``'mpi'``.
        env (Mapping, optional): Defaults to ``os.environ``.

    Raises:
        UsageError: Names the launcher, the missing variables and the
            command that sets them.

    Example:
        >>> check_launcher_env('pytorch', env={})
        Traceback (most recent call last):
        ...
        mmlape.utils.errors.UsageError: --launcher pytorch: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT not set; start the processes with torchrun: tools/dist_train.sh CONFIG GPUS, tools/dist_test.sh CONFIG CHECKPOINT GPUS
    """  # noqa: E501
    env = os.environ if env is None else env
    names, how = LAUNCHER_VARIABLES.get(launcher, ((), ''))
    missing = [name for name in names if name not in env]
    if missing:
        raise UsageError(f'--launcher {launcher}: {", ".join(missing)} not '
                         f'set; {how}')


def setup_cpu_distributed(cfg: Config) -> bool:
    """Prepare a distributed run on CPU; a no-op when CUDA is available
    (on a machine with an unusable NVIDIA GPU only with
    ``MMLAPE_ALLOW_CPU=1``).

    Returns:
        bool: Whether the CPU (gloo) path was taken.
    """
    if cfg.get('launcher', 'none') == 'none' or torch.cuda.is_available():
        return False
    require_usable_gpu()
    dist_cfg = cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})
    dist_cfg['backend'] = 'gloo'
    if not dist.is_initialized():
        if cfg.launcher == 'slurm':
            slurm_to_torch_env(dist_cfg.get('port'))
        elif cfg.launcher != 'pytorch':
            raise UsageError(
                f'launcher={cfg.launcher!r} without CUDA is not supported; '
                f'use tools/dist_train.sh (torchrun, launcher=pytorch) or '
                f'tools/slurm_train.sh (launcher=slurm)')
        timeout = datetime.timedelta(seconds=dist_cfg.get('timeout', 1800))
        dist.init_process_group(
            backend='gloo',
            rank=int(os.environ['RANK']),
            world_size=int(os.environ['WORLD_SIZE']),
            timeout=timeout)
    cfg.model_wrapper_cfg = {
        'type': 'MMDistributedDataParallel',
        'broadcast_buffers': False,
        'find_unused_parameters': cfg.get('find_unused_parameters', False),
        **(cfg.get('model_wrapper_cfg') or {}), 'device_ids': None
    }
    return True


def slurm_to_torch_env(port=None) -> None:
    """Set torch's rendezvous variables from those of a Slurm task, as
    mmengine's slurm launcher does before it calls ``torch.cuda``:
    ``MASTER_ADDR`` (unless set) is the first host of ``SLURM_NODELIST``,
    ``MASTER_PORT`` is ``port``, else the environment's, else 29500.

    Raises:
        UsageError: Not inside ``srun``, or ``scontrol`` names no host.
    """
    env = os.environ
    check_launcher_env('slurm', env)
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
