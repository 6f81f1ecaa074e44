"""The runner a tool builds: mmengine's ``FlexibleRunner`` strategies
completed and checked (:func:`check_flexible_runner`), checks on the built
model (:func:`when_model_built`), a fused optimizer where torch has one.

References:
    mmengine 0.10.7's ``FlexibleRunner``: the model stays a config until
    ``train()``/``val()``/``test()``, where the strategy builds, wraps and
    loads it.
"""
from typing import Any, Callable, List, Optional

import torch
import torch.nn as nn
from mmengine.config import Config

from mmlape.utils.errors import UsageError, one_line
from .strategies import strategy_refusal

__all__ = [
    'check_flexible_runner', 'fit_fused_optimizer', 'fsdp_cpu_problem',
    'is_flexible_runner', 'when_model_built'
]

#: The arguments every strategy takes (mmengine's ``BaseStrategy``).
_BASE_ARGS = ('work_dir', 'experiment_name', 'env_kwargs', 'log_kwargs',
              'auto_scale_lr')
#: FSDP's full state dict on the CPU, gathered on rank 0 without
#: offloading (``offload_to_cpu=True`` crashes rank 0 there).
CPU_FULL_STATE_DICT = dict(
    state_dict_type='FULL_STATE_DICT',
    state_dict_config=dict(
        type='FullStateDictConfig', rank0_only=True, offload_to_cpu=False),
    optim_state_dict_config=dict(
        type='FullOptimStateDictConfig', rank0_only=True,
        offload_to_cpu=False))


def is_flexible_runner(cfg: Config) -> bool:
    """Whether ``cfg``'s ``runner_type`` is mmengine's ``FlexibleRunner``
    (or a subclass)."""
    from mmengine.registry import RUNNERS
    from mmengine.runner import FlexibleRunner
    kind = cfg.get('runner_type')
    if kind is None:
        return False
    cls = RUNNERS.get(kind) if isinstance(kind, str) else kind
    return isinstance(cls, type) and issubclass(cls, FlexibleRunner)


def _state_dict_type(given: Any) -> Optional[str]:
    """The ``StateDictType`` name an FSDP ``state_dict_cfg`` sets."""
    if isinstance(given, str):
        return dict(
            full='FULL_STATE_DICT',
            local='LOCAL_STATE_DICT').get(given, given)
    if isinstance(given, dict):
        kind = given.get('state_dict_type', 'LOCAL_STATE_DICT')
        return getattr(kind, 'name', kind)
    return None


def fsdp_cpu_problem() -> Optional[str]:
    """Why this torch cannot shard a model with FSDP on the CPU, or None
    (every rank must call it: it wraps a tiny module collectively)."""
    from torch.distributed.fsdp import FullyShardedDataParallel
    try:
        FullyShardedDataParallel(
            nn.Linear(2, 2), device_id=torch.device('cpu'))
    except (RuntimeError, ValueError, TypeError, AssertionError) as err:
        return (f'torch {torch.__version__} does not run FSDP on the CPU '
                f'({one_line(err)})')
    return None


def check_flexible_runner(cfg: Config,
                          on_cpu: bool,
                          world_size: int = 1) -> List[str]:
    """Check a ``FlexibleRunner`` config and complete its strategy in place;
    a no-op for other runners.

    - Strategies that save folders are refused; FSDP defaults to one full
      checkpoint (``state_dict_cfg='full'``).
    - Without a launcher DDP/FSDP run as ``SingleDeviceStrategy``;
      ``SingleDeviceStrategy`` in several processes is refused.
    - On the CPU, DDP wraps without device ids and FSDP with the CPU
      device and no offloading (refused where torch cannot).

    Args:
        cfg (Config): The run's config (``launcher`` set).
        on_cpu (bool): A distributed run on CPU processes
            (:func:`~mmlape.hosts.setup_cpu_distributed`).
        world_size (int): The number of processes. Defaults to 1.

    Returns:
        list[str]: Notes for the run's log (what was completed).

    Raises:
        UsageError: One line naming the strategy, why it is refused and
            what works instead.
    """
    from mmengine._strategy import DDPStrategy, FSDPStrategy
    from mmengine.registry import STRATEGIES
    if not is_flexible_runner(cfg):
        return []
    launcher = cfg.get('launcher') or 'none'
    strategy = cfg.get('strategy')
    if strategy is None:
        strategy = dict(type='SingleDeviceStrategy' if launcher ==
                        'none' else 'DDPStrategy')
    if not isinstance(strategy, dict) or 'type' not in strategy:
        raise UsageError(f'runner_type=FlexibleRunner: strategy must be a '
                         f'dict with a type, e.g. '
                         f"dict(type='DDPStrategy'), got {strategy!r}")
    strategy = dict(strategy)
    kind = strategy['type']
    cls = STRATEGIES.get(kind) if isinstance(kind, str) else kind
    if not isinstance(cls, type):
        raise UsageError(f'strategy.type={kind!r} is not a strategy that '
                         f'mmengine knows')
    name = cls.__name__
    notes = []
    if cls is FSDPStrategy and STRATEGIES.get('LaPEFSDPStrategy'):
        # mmengine's own cannot resume with torch >= 2.1 (mmlape.hosts)
        strategy['type'] = 'LaPEFSDPStrategy'
        notes.append(f'{name} runs as LaPEFSDPStrategy (the same, resuming '
                     f'its optimizer with torch {torch.__version__})')
    if issubclass(cls,
                  FSDPStrategy) and strategy.get('state_dict_cfg') is None:
        strategy['state_dict_cfg'] = 'full'
        notes.append(f"{name}: state_dict_cfg='full' (one checkpoint "
                     f'file, gathered on rank 0)')
    why = strategy_refusal(cls,
                           _state_dict_type(strategy.get('state_dict_cfg')))
    if why:
        raise UsageError(f'strategy={name}: {why}')
    if launcher == 'none' and issubclass(cls, DDPStrategy):
        strategy = dict({k: strategy[k]
                         for k in _BASE_ARGS if k in strategy},
                        type='SingleDeviceStrategy')
        notes = [
            f'{name} without a launcher: this one process runs '
            f'SingleDeviceStrategy (tools/dist_train.sh CONFIG N '
            f'starts N processes with {name})'
        ]
    elif launcher != 'none' and world_size > 1 and \
            not issubclass(cls, DDPStrategy):
        raise UsageError(
            f'strategy={name} in {world_size} processes: each would train '
            f"its own copy and overwrite the others' checkpoints; use "
            f"strategy=dict(type='DDPStrategy') or FSDPStrategy")
    elif on_cpu and issubclass(cls, DDPStrategy):
        wrapper = dict(strategy.get('model_wrapper') or {})
        if issubclass(cls, FSDPStrategy):
            problem = fsdp_cpu_problem()
            if problem:
                raise UsageError(f'strategy={name} on the CPU: {problem}; '
                                 f'use DDPStrategy there, or GPUs')
            wrapper.setdefault('type', 'MMFullyShardedDataParallel')
            wrapper['device_id'] = 'cpu'
            strategy['state_dict_cfg'] = CPU_FULL_STATE_DICT
            notes.append(f'{name} on the CPU: the full state dict is '
                         f'gathered without offloading')
        else:
            wrapper.setdefault('type', 'MMDistributedDataParallel')
            wrapper.setdefault('broadcast_buffers', False)
            wrapper['device_ids'] = None
        strategy['model_wrapper'] = wrapper
    cfg.strategy = strategy
    return notes


def when_model_built(runner: Any, check: Callable[..., Any], *args,
                     **kwargs) -> None:
    """Run ``check(model, *args, **kwargs)`` on the runner's built model:
    now, or for ``FlexibleRunner`` inside its strategy's ``build_model``
    (before wrapping and loading)."""
    model = runner.model
    if isinstance(model, nn.Module):
        check(model, *args, **kwargs)
        return
    strategy = runner.strategy
    build = strategy.build_model

    def build_then_check(model_cfg):
        model = build(model_cfg)
        check(model, *args, **kwargs)
        return model

    strategy.build_model = build_then_check


def fit_fused_optimizer(cfg: Config, device: str) -> Optional[str]:
    """Drop ``optim_wrapper.optimizer.fused=True`` where torch has no fused
    kernel for the run's ``device``.

    Returns:
        str, optional: What was changed, for the run's log; None when
        nothing was.
    """
    optimizer = (cfg.get('optim_wrapper') or {}).get('optimizer')
    if not isinstance(optimizer, dict) or not optimizer.get('fused'):
        return None
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    supported = _get_fused_kernels_supported_devices()
    if device in supported:
        return None
    optimizer.pop('fused')
    return (f'optimizer {optimizer.get("type")}: torch has no fused kernel '
            f'for {device} (only {supported}); using the unfused one')
