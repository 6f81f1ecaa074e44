"""mmengine's exponential moving average of a model, updated with one
multi-tensor operation instead of one operation per parameter.

mmengine's ``ExponentialMovingAverage`` updates the average parameter by
parameter: a Python call and an ``lerp_`` (on a GPU, a kernel launch) for
each of the model's tensors on every training step (T2T-ViT-7: 122;
``benchmarks/bench_host_overheads.py``, section ``ema``). The T2T-ViT
configs average the model every step (``EMAHook``, momentum 4e-5, as the
official T2T-ViT training).

:class:`LaPEExponentialMovingAverage` makes the same update with
PyTorch's multi-tensor ``lerp_`` (``torch._foreach_lerp_``), one call for
all the parameters of a device and dtype: the same formula, element by
element (on the CPU PyTorch runs it tensor by tensor; equal bit for bit
to mmengine's there, ``tests/engine/test_ema.py``). Everything else is
mmengine's: the first step copies the model, ``interval`` and
``update_buffers`` as there, buffers that are not averaged are copied
from the model, and the checkpoint's keys are the same.
"""
from typing import Dict, List, Tuple

import torch
import torch.nn as nn
from mmengine.model import ExponentialMovingAverage

__all__ = ['LaPEExponentialMovingAverage']


class LaPEExponentialMovingAverage(ExponentialMovingAverage):
    """mmengine's ``ExponentialMovingAverage`` (the same arguments), each
    update made with one multi-tensor ``lerp_`` per device and dtype (see
    the module's docstring).

    Config::

        custom_hooks = [
            dict(type='EMAHook', momentum=4e-5, priority='ABOVE_NORMAL',
                 ema_type='LaPEExponentialMovingAverage')
        ]
    """

    def update_parameters(self, model: nn.Module) -> None:
        if self.steps == 0 or self.steps % self.interval != 0:
            # mmengine's: the first copy, or no update on this step
            return super().update_parameters(model)
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
        for avg, src in groups.values():
            torch._foreach_lerp_(avg, src, self.momentum)
        if not self.update_buffers:
            for b_avg, b_src in zip(self.module.buffers(), model.buffers()):
                b_avg.data.copy_(b_src.data.to(b_avg.device))
        self.steps += 1
