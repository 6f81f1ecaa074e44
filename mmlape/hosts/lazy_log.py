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
``after_train_iter`` keeping the values on the device (copied into one
stack per iteration, device and dtype), in order, until something reads
them. It hands them to the message hub, one copy to the host per device
and dtype, on the iterations a ``LoggerHook`` logs and at the end of each
epoch, before validation, before a checkpoint is saved, at the end of
training, on an iteration that logs a key the hub has not seen (the
first, mostly), and after at most ``interval`` iterations. The message
hub then holds the same values, counts and order of keys as with
mmengine's hook, so the log, its smoothing, ``scalars.json`` and the
checkpoints' message hub are unchanged.

Timings: ``IterTimerHook`` times each iteration on the host. An iteration
that does not wait for its step ends early and the one that hands over
waits for those before it, so a window of iterations is timed right when
it starts at a hand-over. The hook therefore also hands over on the
iteration before each logged window of the log processor's
``window_size`` (when it is a number of iterations that is not a multiple
of the logger's interval), and before the window of an epoch's last log
where the logger makes one (``ignore_last=False``, or an epoch no longer
than its interval): two reads every ``interval`` iterations.

Only a hook that reads the training values from the message hub between
two logs sees them up to the last hand-over; it can call
:meth:`LazyRuntimeInfoHook.flush` first.

A value that the optimizer wrapper puts into the message hub during the
step (mmengine's log the gradient norm they clip to with ``float``, which
waits for the step as ``.item()`` does) goes through :func:`log_scalar`
instead: kept with the iteration's values while a
:class:`LazyRuntimeInfoHook` trains with that wrapper (from its
``before_train`` to its ``after_train``), put into the wrapper's message
hub at once otherwise (a wrapper used outside such a run, or one whose
run ended in an error). :func:`log_clip_lazily` makes a wrapper's
gradient clipping log its norm that way; the hook does so for the run's
wrappers when training starts.

Opt-in (``speedups.lazy_log``, :mod:`mmlape.hosts.speedups`): the waits
it removes were counted on the user's path
(``benchmarks/bench_host_loop.py``, section ``syncs``: two reads in 100
iterations instead of 100) but their cost was never timed end to end on a
GPU, so mmengine's hook stays the default until the GPU
acceptance run's A/B figure says otherwise.
"""
import weakref
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import torch
from mmengine.hooks import LoggerHook, RuntimeInfoHook
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.utils import apply_to

from mmlape.registry import HOOKS
from mmlape.utils.errors import ConfigError, InputError

__all__ = ['LazyRuntimeInfoHook', 'log_clip_lazily', 'log_scalar']

#: The most iterations kept by default (a run without a ``LoggerHook``, or
#: one that logs less often): one read in 100 steps costs nothing, and what
#: is kept on the device stays small.
MAX_INTERVAL = 100

#: A kept value's place: ``(device, dtype)`` of its stack.
_Group = Tuple[torch.device, torch.dtype]

#: The hook that keeps what each optimizer wrapper logs while it trains.
_KEEPERS: 'weakref.WeakKeyDictionary[Any, LazyRuntimeInfoHook]' = \
    weakref.WeakKeyDictionary()


def _optim_wrappers(runner) -> List[Any]:
    """The runner's optimizer wrappers (each of an ``OptimWrapperDict``)."""
    wrapper = getattr(runner, 'optim_wrapper', None)
    if wrapper is None or isinstance(wrapper, dict):  # not built: a config
        return []
    inner = getattr(wrapper, 'optim_wrappers', None)  # OptimWrapperDict
    return list(inner.values()) if isinstance(inner, dict) else [wrapper]


def _scalar(key: str, value: torch.Tensor) -> torch.Tensor:
    """``value`` as a 0-d tensor without its graph; a tensor of more than
    one value is named at once."""
    if value.numel() != 1:
        raise InputError(
            f'the training step logged {key!r} as a tensor of shape '
            f'{tuple(value.shape)}; the message hub takes one number a key '
            f'(reduce it, e.g. with .mean(), before logging it)')
    return value.detach().reshape(())


def log_scalar(optim_wrapper, key: str, value: torch.Tensor) -> None:
    """Log ``value`` (a one-value tensor) that ``optim_wrapper`` logs
    during a training step as ``key`` in its message hub.

    While a :class:`LazyRuntimeInfoHook` trains with ``optim_wrapper``,
    the value stays on the device, kept with the iteration's logged values
    (before them, as mmengine's wrapper logs during the step, before the
    step's outputs), and reaches the hub with them. Otherwise it goes into
    ``optim_wrapper.message_hub`` at once, as ``float(value)``.
    """
    keeper = _KEEPERS.get(optim_wrapper)
    if keeper is not None:
        keeper._step.append((key, _scalar(key, value)))
    else:
        optim_wrapper.message_hub.update_scalar(key,
                                                float(_scalar(key, value)))


def log_clip_lazily(optim_wrapper) -> None:
    """Make ``optim_wrapper``'s gradient clipping log the norm with
    :func:`log_scalar`.

    mmengine's ``OptimWrapper._clip_grad`` (``AmpOptimWrapper``'s too) logs
    what its clipping function returns with ``float``, on every step, and
    logs nothing when it returns ``None`` (as ``clip_grad_value_`` does).
    The clipping function becomes one that clips with ``clip_grad_norm_``
    as before, logs the norm through :func:`log_scalar` under mmengine's
    key and returns ``None``. A wrapper that clips by value, or does not
    clip, is left as it is.
    """
    clip = getattr(optim_wrapper, 'clip_func', None)
    if (not getattr(optim_wrapper, 'clip_grad_kwargs', None)
            or clip is not torch.nn.utils.clip_grad_norm_):
        return
    key = f'train/{optim_wrapper.grad_name}'

    def clip_grad_norm_and_log(params, **kwargs) -> None:
        log_scalar(optim_wrapper, key, clip(params, **kwargs))

    optim_wrapper.clip_func = clip_grad_norm_and_log


class _OnDevice:
    """Stands for a value kept in the iteration's stack of ``group``."""
    __slots__ = ('group', )

    def __init__(self, group: _Group) -> None:
        self.group = group


class LazyRuntimeInfoHook(RuntimeInfoHook):
    """mmengine's ``RuntimeInfoHook``, handing the training step's logged
    values to the message hub only when they are read.

    Args:
        interval (int, optional): The most iterations whose values are
            kept on the device. Defaults to None: the smallest interval of
            the run's ``LoggerHook``\\ s, at most 100 (100 when it has
            none). Every logging iteration of every ``LoggerHook`` hands
            over as well.

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
        self._pending: List[Tuple[List[Tuple[str, Any]],
                                  Dict[_Group, torch.Tensor]]] = []
        # what the running step logged through log_scalar: (key, value)
        self._step: List[Tuple[str, torch.Tensor]] = []
        self._schedule: Optional[Tuple[List[Tuple[int, int, bool]], int,
                                       int]] = None

    # ------------------------------------------------------------------
    # when the values are handed over

    def _plan(self, runner) -> Tuple[List[Tuple[int, int, bool]], int, int]:
        """Each logger's interval, how far before a log its logged window
        starts, counted from the log before (0: at that log), and whether
        it logs an epoch's last iterations; the window (0: not a number of
        iterations); the most iterations kept."""
        loggers = [
            hook for hook in getattr(runner, 'hooks', [])
            if isinstance(hook, LoggerHook) and hook.interval > 0
        ]
        window = getattr(
            getattr(runner, 'log_processor', None), 'window_size', None)
        if not isinstance(window, int) or isinstance(window, bool):
            window = 0
        window = max(window, 0)
        plan = sorted({(hook.interval, window % hook.interval,
                        not hook.ignore_last)
                       for hook in loggers})
        most = self.interval or min([hook.interval
                                     for hook in loggers] + [MAX_INTERVAL])
        return plan, window, most

    def before_train(self, runner) -> None:
        super().before_train(runner)
        self._pending, self._step = [], []
        self._schedule = self._plan(runner)
        for wrapper in _optim_wrappers(runner):
            _KEEPERS[wrapper] = self
            # the clipped gradient's norm kept with the step's values too
            log_clip_lazily(wrapper)

    def _due(self, runner, batch_idx: int, keys: List[str]) -> bool:
        if self._schedule is None:
            self._schedule = self._plan(runner)
        logs, whole, most = self._schedule
        if any(key not in runner.message_hub.log_scalars for key in keys):
            return True  # a new key: it takes its place in mmengine's order
        loader = runner.train_dataloader
        for every, window, logs_last in logs:
            if self.every_n_inner_iters(batch_idx, every):
                return True  # the logger reads
            if window and self.every_n_inner_iters(batch_idx + window, every):
                return True  # the next logged window starts after this
            # so does the window of the log at the epoch's end, where the
            # logger makes one (LoggerHook: not ignore_last, or a short
            # epoch)
            if (whole and (logs_last or len(loader) <= every)
                    and self.end_of_epoch(loader, batch_idx + whole)):
                return True
        return (self.every_n_inner_iters(batch_idx, most)
                or self.end_of_epoch(loader, batch_idx)
                or len(self._pending) >= most)

    def after_train_iter(self,
                         runner,
                         batch_idx: int,
                         data_batch: Any = None,
                         outputs: Optional[Dict[str, Any]] = None) -> None:
        """Keep this iteration's ``outputs``, after what the step logged
        through :func:`log_scalar`; hand everything kept to the message hub
        when something will read it (the module's docstring)."""
        logged, self._step = self._step, []
        for key, value in (outputs or {}).items():
            if isinstance(value, torch.Tensor):
                value = _scalar(key, value)
            logged.append((f'train/{key}', value))
        if logged:
            kept: List[Tuple[str, Any]] = []
            values: Dict[_Group, List[torch.Tensor]] = OrderedDict()
            for key, value in logged:
                if isinstance(value, torch.Tensor):
                    group = (value.device, value.dtype)
                    values.setdefault(group, []).append(value)
                    value = _OnDevice(group)
                kept.append((key, value))
            # a copy: what the step's tensors hold later (memory reused by
            # CUDA graphs, an in-place change) does not reach the log
            self._pending.append((kept, {
                g: torch.stack(v)
                for g, v in values.items()
            }))
        if self._due(runner, batch_idx, [key for key, _ in logged]):
            self.flush(runner)

    def after_train_epoch(self, runner) -> None:
        self.flush(runner)

    def before_val(self, runner) -> None:
        self.flush(runner)
        super().before_val(runner)

    def after_train(self, runner) -> None:
        self.flush(runner)
        for wrapper in _optim_wrappers(runner):
            if _KEEPERS.get(wrapper) is self:
                del _KEEPERS[wrapper]
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
        # One copy to the host per (device, dtype): the stacks keep the
        # dtype, so ``tolist`` gives what ``.item()`` gives (a float, an
        # int or a bool), value for value.
        stacks: Dict[_Group, List[torch.Tensor]] = OrderedDict()
        for _, stacked in pending:
            for group, stack in stacked.items():
                stacks.setdefault(group, []).append(stack)
        numbers = {
            group: iter(torch.cat(parts).tolist())
            for group, parts in stacks.items()
        }
        hub = runner.message_hub
        for kept, _ in pending:
            for key, value in kept:
                if isinstance(value, _OnDevice):
                    value = next(numbers[value.group])
                hub.update_scalar(key, value)


HOOKS.register_module(module=LazyRuntimeInfoHook)
MMENGINE_HOOKS.register_module(module=LazyRuntimeInfoHook)
