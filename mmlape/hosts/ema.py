"""mmengine's exponential moving average of a model, updated with one
multi-tensor operation instead of one operation per parameter.

mmengine's ``ExponentialMovingAverage`` updates the average parameter by
parameter: a Python call and an ``lerp_`` (on a GPU, a kernel launch) for
each of the model's tensors on every training step (T2T-ViT-7: 122;
``benchmarks/bench_host_loop.py``, section ``ema``). The T2T-ViT
configs average the model every step (``EMAHook``, momentum 4e-5, as the
official T2T-ViT training).

:class:`LaPEExponentialMovingAverage` makes the same update with
PyTorch's own multi-tensor average
(``torch.optim.swa_utils.get_ema_multi_avg_fn``, decay ``1 - momentum``:
one multi-tensor ``lerp_`` for all the parameters of a device and dtype):
the same formula, element by element (equal bit for bit to mmengine's on
the CPU, ``tests/hosts/test_ema.py``). Everything else is
mmengine's: the first step copies the model, ``interval`` and
``update_buffers`` as there, buffers that are not averaged are copied
from the model, and the checkpoint's keys are the same.

mmengine decides whether a step copies, averages or waits by comparing
its ``steps`` buffer, which lives on the model's device: on a GPU each
comparison is a copy to the host that waits for the training step. The
class keeps the count on the host too, read from the buffer once (on the
first update and after a state dict is loaded), so an update reads
nothing from the device.
"""
from typing import Dict, List, Optional, Tuple

import torch.nn as nn
from mmengine.model import ExponentialMovingAverage
from torch.optim.swa_utils import get_ema_multi_avg_fn

__all__ = ['LaPEExponentialMovingAverage']


class LaPEExponentialMovingAverage(ExponentialMovingAverage):
    """mmengine's ``ExponentialMovingAverage`` (the same arguments), each
    update made with torch's multi-tensor EMA step per device and dtype
    (see the module's docstring).

    Config::

        custom_hooks = [
            dict(type='EMAHook', momentum=4e-5, priority='ABOVE_NORMAL',
                 ema_type='LaPEExponentialMovingAverage')
        ]
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        #: ``steps`` on the host (None: read it from the buffer).
        self._host_steps: Optional[int] = None
        #: torch's multi-tensor EMA step and the momentum it was made for.
        self._multi_avg = (self.momentum,
                           get_ema_multi_avg_fn(1. - self.momentum))

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._host_steps = None  # ``steps`` may have been loaded

    def update_parameters(self, model: nn.Module) -> None:
        steps = self._host_steps
        if steps is None:
            steps = int(self.steps)
        # (counted once the update is made: one that raises leaves both)
        self._host_steps = None
        if steps == 0:
            # mmengine's first step: a copy of the model (its own test of
            # the count reads the buffer, once)
            super().update_parameters(model)
        elif steps % self.interval != 0:
            # mmengine's step without an update
            self._copy_buffers(model)
            self.steps += 1
        else:
            self._average(model)
        self._host_steps = steps + 1

    def _average(self, model: nn.Module) -> None:
        """mmengine's averaging step, one multi-tensor average per device
        and dtype."""
        source = (
            model.state_dict()
            if self.update_buffers else dict(model.named_parameters()))
        groups: Dict[Tuple, Tuple[List, List]] = {}
        for key, averaged in self.avg_parameters.items():
            if averaged.dtype.is_floating_point:
                avg, src = groups.setdefault((averaged.device, averaged.dtype),
                                             ([], []))
                # ``.data``, as mmengine's: autograd does not see the
                # update as an in-place change of the parameter
                avg.append(averaged.data)
                src.append(source[key].data.to(averaged.device))
        if any(
                len({t.data_ptr()
                     for t in avg}) < len(avg) for avg, _ in groups.values()):
            # a tensor listed twice (tied weights in a state dict):
            # mmengine updates it twice, one after the other
            return super().update_parameters(model)
        if self._multi_avg[0] != self.momentum:  # changed since
            self._multi_avg = (self.momentum,
                               get_ema_multi_avg_fn(1. - self.momentum))
        for avg, src in groups.values():
            self._multi_avg[1](avg, src, None)
        self._copy_buffers(model)
        self.steps += 1

    def _copy_buffers(self, model: nn.Module) -> None:
        """mmengine's: buffers that are not averaged follow the model."""
        if not self.update_buffers:
            for b_avg, b_src in zip(self.module.buffers(), model.buffers()):
                b_avg.data.copy_(b_src.data.to(b_avg.device))
