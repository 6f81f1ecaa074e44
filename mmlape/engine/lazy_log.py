"""Read a training step's logged values from the device only when they are
logged.

mmengine's ``RuntimeInfoHook`` puts every iteration's ``log_vars`` (the
losses, and whatever else a model logs) into the message hub, and the hub
turns each tensor into a Python number with ``.item()``. On a GPU that is a
copy to the host that waits for the whole step: the host launches nothing
while the step runs, and the next step's host work (taking the batch,
moving it, the data preprocessor, the first launches of the forward pass)
starts only when the device is idle. The logger reads these values only
every ``interval`` iterations.

:class:`LazyRuntimeInfoHook` is ``RuntimeInfoHook`` with its
``after_train_iter`` keeping the values on the device, in order, until
something reads them: it hands them to the message hub (one copy to the
host per device and dtype) on the iterations a ``LoggerHook`` logs and at
the end of each epoch, before validation, before a checkpoint is saved,
at the end of training, and after at most ``interval`` iterations. The
message hub then holds the same values, counts and order as with
mmengine's hook, so the log, its smoothing and the checkpoints' message
hub are unchanged; only a hook that reads the training values from the
message hub between two logs sees them up to the last hand-over (it can
call :meth:`LazyRuntimeInfoHook.flush` first).
"""
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import torch
from mmengine.hooks import LoggerHook, RuntimeInfoHook
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.utils import apply_to

from mmlape.registry import HOOKS
from mmlape.utils.errors import ConfigError, InputError

__all__ = ['LazyRuntimeInfoHook']

#: The most iterations kept by default (a run without a ``LoggerHook``, or
#: one that logs less often): one read in 100 steps costs nothing, and what
#: is kept on the device stays small.
MAX_INTERVAL = 100


def _is_tensor_scalar(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.numel() == 1


class LazyRuntimeInfoHook(RuntimeInfoHook):
    """mmengine's ``RuntimeInfoHook``, handing the training step's logged
    values to the message hub only when they are read.

    Args:
        interval (int, optional): The most iterations whose values are
            kept on the device. Defaults to None: the smallest interval of
            the run's ``LoggerHook``\\ s, at most 100 (100 when it has
            none).

    Example:
        >>> default_hooks = dict(
        ...     runtime_info=dict(type='LazyRuntimeInfoHook'))
    """

    def __init__(self, interval: Optional[int] = None) -> None:
        if interval is not None and (not isinstance(interval, int)
                                     or isinstance(interval, bool)
                                     or interval < 1):
            raise ConfigError(
                f'LazyRuntimeInfoHook(interval={interval!r}): expected a '
                f'positive number of iterations or None')
        self.interval = interval
        self._pending: List[List[Tuple[str, Any]]] = []

    # ------------------------------------------------------------------
    # when the values are handed over

    def _hand_over_interval(self, runner) -> int:
        if self.interval is not None:
            return self.interval
        intervals = [
            hook.interval for hook in getattr(runner, 'hooks', [])
            if isinstance(hook, LoggerHook) and hook.interval > 0
        ]
        return min(intervals + [MAX_INTERVAL])

    def before_train(self, runner) -> None:
        super().before_train(runner)
        self._pending = []
        self._every = self._hand_over_interval(runner)

    def after_train_iter(self,
                         runner,
                         batch_idx: int,
                         data_batch: Any = None,
                         outputs: Optional[Dict[str, Any]] = None) -> None:
        """Keep this iteration's ``outputs``; hand everything kept to the
        message hub on an iteration that a ``LoggerHook`` may log."""
        if outputs is not None:
            kept = []
            for key, value in outputs.items():
                if isinstance(value, torch.Tensor):
                    if value.numel() != 1:
                        raise InputError(
                            f'the training step logged {key!r} as a tensor '
                            f'of shape {tuple(value.shape)}; the message '
                            f'hub takes one number a key (reduce it, e.g. '
                            f'with .mean(), before logging it)')
                    value = value.detach()
                kept.append((key, value))
            self._pending.append(kept)
        every = getattr(self, '_every', None) or \
            self._hand_over_interval(runner)
        if (self.every_n_inner_iters(batch_idx, every)
                or self.every_n_train_iters(runner, every)
                or self.end_of_epoch(runner.train_dataloader, batch_idx)
                or len(self._pending) >= every):
            self.flush(runner)

    def after_train_epoch(self, runner) -> None:
        self.flush(runner)

    def before_val(self, runner) -> None:
        self.flush(runner)
        super().before_val(runner)

    def after_train(self, runner) -> None:
        self.flush(runner)
        super().after_train(runner)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        """Hand the kept values over, and save the message hub with them
        (mmengine reads the hub into ``checkpoint`` before this hook)."""
        if self._pending:
            self.flush(runner)
            if 'message_hub' in checkpoint:
                checkpoint['message_hub'] = apply_to(
                    runner.message_hub.state_dict(),
                    lambda x: hasattr(x, 'cpu'), lambda x: x.cpu())

    # ------------------------------------------------------------------
    # the hand-over

    def flush(self, runner) -> None:
        """Hand every kept value to the message hub, in the order the
        iterations logged them."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        # One copy to the host per (device, dtype): stacking keeps the
        # dtype, so ``tolist`` gives what ``.item()`` gives (a float, an
        # int or a bool), value for value.
        groups: 'OrderedDict[tuple, List[torch.Tensor]]' = OrderedDict()
        for kept in pending:
            for _, value in kept:
                if _is_tensor_scalar(value):
                    groups.setdefault((value.device, value.dtype),
                                      []).append(value.reshape(()))
        numbers = {
            group: iter(torch.stack(values).tolist())
            for group, values in groups.items()
        }
        hub = runner.message_hub
        for kept in pending:
            for key, value in kept:
                if _is_tensor_scalar(value):
                    value = next(numbers[(value.device, value.dtype)])
                hub.update_scalar(f'train/{key}', value)


HOOKS.register_module(module=LazyRuntimeInfoHook)
MMENGINE_HOOKS.register_module(module=LazyRuntimeInfoHook)
