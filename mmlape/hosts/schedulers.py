"""The official DeiT/LaPE learning-rate schedule as an mmengine scheduler.

References:
    The official DeiT/LaPE ``main.py`` with timm 0.3's
    ``CosineLRScheduler``.
"""
import math
from typing import List

from mmengine.optim.scheduler.lr_scheduler import LRSchedulerMixin
from mmengine.optim.scheduler.param_scheduler import INF, _ParamScheduler
from mmengine.registry import PARAM_SCHEDULERS

__all__ = ['LaPEDeiTCosineLR', 'deit_epoch_lr']


def deit_epoch_lr(epoch: int,
                  base_lr: float,
                  warmup_epochs: int = 5,
                  warmup_lr: float = 1e-6,
                  min_lr: float = 1e-5,
                  cosine_epochs: int = 300,
                  lag_epochs: int = 1) -> float:
    """The learning rate of one epoch of the official DeiT/LaPE training.

    With ``t = max(epoch - lag_epochs, 0)``: a linear warm-up from
    ``warmup_lr`` for ``t < warmup_epochs``, then a cosine from ``base_lr``
    to ``min_lr`` over ``cosine_epochs`` counted from ``t = 0`` (the warm-up
    replaces the start of the cosine, it does not delay it), ``min_lr`` from
    ``cosine_epochs`` on.

    The official loop calls ``step(e)`` after epoch ``e``, so epoch ``e``
    trains at ``t = e - 1`` and the first two at ``warmup_lr``
    (``lag_epochs=1``).

    Args:
        epoch (int): 0-based epoch.
        base_lr (float): The peak rate (the optimizer's rate).
        warmup_epochs (int): Defaults to 5.
        warmup_lr (float): Rate at the start of the warm-up. Defaults to
            1e-6.
        min_lr (float): Rate at the end of the cosine. Defaults to 1e-5.
        cosine_epochs (int): Period of the cosine. Defaults to 300.
        lag_epochs (int): Epochs between an epoch and the schedule position
            it trains at. Defaults to 1.

    Returns:
        float: The rate.
    """
    t = max(epoch - lag_epochs, 0)
    if t < warmup_epochs:
        return warmup_lr + t * (base_lr - warmup_lr) / warmup_epochs
    if t >= cosine_epochs:
        return min_lr
    return min_lr + 0.5 * (base_lr - min_lr) * (
        1 + math.cos(math.pi * t / cosine_epochs))


@PARAM_SCHEDULERS.register_module()
class LaPEDeiTCosineLR(LRSchedulerMixin, _ParamScheduler):
    """DeiT's learning-rate schedule, stepped once per epoch.

    Each parameter group trains epoch ``e`` at :func:`deit_epoch_lr` of its
    own initial rate (mmengine's ``LinearLR`` + ``CosineAnnealingLR`` start
    the cosine after the warm-up instead).

    Config::

        param_scheduler = [
            dict(type='LaPEDeiTCosineLR', warmup_epochs=5, warmup_lr=1e-6,
                 min_lr=1e-5, cosine_epochs=300)
        ]

    Args:
        optimizer (Optimizer | OptimWrapper): The optimizer.
        warmup_epochs (int): Defaults to 5.
        warmup_lr (float): Defaults to 1e-6.
        min_lr (float): Defaults to 1e-5.
        cosine_epochs (int): Defaults to 300.
        lag_epochs (int): Defaults to 1 (the official loop).
        begin (int): Defaults to 0.
        end (int): Defaults to INF.
        last_step (int): For resuming. Defaults to -1.
        by_epoch (bool): Must be True: the schedule steps per epoch.
        verbose (bool): Defaults to False.
    """

    def __init__(self,
                 optimizer,
                 warmup_epochs: int = 5,
                 warmup_lr: float = 1e-6,
                 min_lr: float = 1e-5,
                 cosine_epochs: int = 300,
                 lag_epochs: int = 1,
                 begin: int = 0,
                 end: int = INF,
                 last_step: int = -1,
                 by_epoch: bool = True,
                 verbose: bool = False) -> None:
        checks = (('warmup_epochs', warmup_epochs, 0),
                  ('cosine_epochs', cosine_epochs, 1), ('lag_epochs',
                                                        lag_epochs, 0))
        for name, value, low in checks:
            if not isinstance(value, int) or value < low:
                raise ValueError(f'{type(self).__name__}: {name}={value!r};'
                                 f' it must be an int >= {low}')
        if warmup_epochs >= cosine_epochs:
            raise ValueError(f'{type(self).__name__}: warmup_epochs='
                             f'{warmup_epochs} must be below cosine_epochs='
                             f'{cosine_epochs}')
        for name, value in (('warmup_lr', warmup_lr), ('min_lr', min_lr)):
            if not value >= 0:
                raise ValueError(f'{type(self).__name__}: {name}={value!r};'
                                 f' it must be >= 0')
        if not by_epoch:
            raise ValueError(f'{type(self).__name__}: by_epoch=False; this '
                             f'schedule steps once per epoch, as DeiT\'s')
        self.warmup_epochs = warmup_epochs
        self.warmup_lr = warmup_lr
        self.min_lr = min_lr
        self.cosine_epochs = cosine_epochs
        self.lag_epochs = lag_epochs
        super().__init__(
            optimizer,
            begin=begin,
            end=end,
            last_step=last_step,
            by_epoch=by_epoch,
            verbose=verbose)

    def _get_value(self) -> List[float]:
        return [
            deit_epoch_lr(self.last_step, base, self.warmup_epochs,
                          self.warmup_lr, self.min_lr, self.cosine_epochs,
                          self.lag_epochs) for base in self.base_values
        ]
