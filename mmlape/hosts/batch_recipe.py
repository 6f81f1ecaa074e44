"""The global batch and learning rate of a run, at any number of processes.

A config states its recipe's global batch as mmengine does
(``auto_scale_lr.base_batch_size``). Where the official code scales the
learning rate with the global batch (DeiT's ``lr * batch_size * world_size /
512`` and the recipes built on it: CeiT, LaPE, Swin), the config sets
``auto_scale_lr.enable=True`` and mmengine's runner scales the optimizer's
``lr`` by ``global batch / base_batch_size`` before the schedulers start:
the config's ``lr`` is the official rule at ``base_batch_size``, so the
scaled one is the official rule at any batch. Where the official code
trains at a fixed learning rate (T2T-ViT, CCT, ViT-Adapter, Segmenter), a
global batch other than the recipe's changes the recipe: one warning line
says so, with the two ways to keep it.

References:
    facebookresearch/deit ``main.py`` (``linear_scaled_lr``);
    microsoft/Swin-Transformer ``main.py``; mmengine's
    ``Runner.scale_lr``.
"""
from typing import Any, List, Optional, Tuple

__all__ = ['batch_and_lr', 'describe_batch']


def _optimizer_lrs(cfg: Any) -> List[Tuple[str, float]]:
    """``(name, lr)`` of each optimizer the config builds (one, or one per
    ``OptimWrapperDict`` entry)."""
    wrapper = cfg.get('optim_wrapper') or {}
    if 'optimizer' in wrapper:
        return [('', float(wrapper['optimizer'].get('lr', 0.)))]
    return [(name, float(sub['optimizer'].get('lr', 0.)))
            for name, sub in wrapper.items()
            if isinstance(sub, dict) and 'optimizer' in sub]


def batch_and_lr(cfg: Any, world_size: int) -> Tuple[int, int, List[float]]:
    """The run's global batch, the recipe's, and each optimizer's
    learning rate at the start of the run, as mmengine's runner will set
    it (scaled where ``auto_scale_lr.enable``).

    Args:
        cfg (Config): The run's config.
        world_size (int): The number of processes.

    Returns:
        tuple: ``(global batch, recipe batch or 0, [lr, ...])``.
    """
    per_process = int(cfg.train_dataloader.batch_size)
    total = per_process * world_size
    auto = cfg.get('auto_scale_lr') or {}
    base = int(auto.get('base_batch_size') or 0)
    ratio = total / base if auto.get('enable', False) and base else 1.
    return total, base, [lr * ratio for _, lr in _optimizer_lrs(cfg)]


def describe_batch(cfg: Any, world_size: int) -> Tuple[str, Optional[str]]:
    """One line for the run's log (its global batch and learning rate) and,
    where the recipe trains at a fixed learning rate for another global
    batch, one warning line naming both batches and how to keep the
    recipe.

    Example:
        >>> from mmengine.config import Config
        >>> cfg = Config(dict(
        ...     train_dataloader=dict(batch_size=256),
        ...     optim_wrapper=dict(optimizer=dict(lr=1e-3)),
        ...     auto_scale_lr=dict(base_batch_size=1024, enable=True)))
        >>> print(describe_batch(cfg, 8)[0])
        global batch 2048 (8 processes x 256), lr 0.002 (the config's 0.001 at its recipe's batch of 1024, scaled by 2048 / 1024)
    """  # noqa: E501
    per_process = int(cfg.train_dataloader.batch_size)
    total, base, lrs = batch_and_lr(cfg, world_size)
    auto = cfg.get('auto_scale_lr') or {}
    shown = ', '.join(f'{lr:.6g}' for lr in lrs) or 'none'
    line = (f'global batch {total} ({world_size} processes x '
            f'{per_process}), lr {shown}')
    configured = ', '.join(f'{lr:.6g}' for _, lr in _optimizer_lrs(cfg))
    if auto.get('enable', False) and base:
        line += (f' (the config\'s {configured} at its recipe\'s batch of '
                 f'{base}, scaled by {total} / {base})')
        return line, None
    if not base or total == base:
        return line, None
    ways = []
    if base % per_process == 0:
        ways.append(f'run {base // per_process} processes of {per_process}')
    if base % world_size == 0:
        ways.append(f'set train_dataloader.batch_size={base // world_size} '
                    f'for {world_size} processes')
    keep = ' or '.join(ways) or (f'make processes x batch_size equal '
                                 f'{base}')
    warning = (f'the global batch is {total} ({world_size} processes x '
               f'{per_process}) but the recipe\'s is {base}, and its lr '
               f'{configured} is not scaled (the official code trains at a '
               f'fixed lr): to keep the recipe, {keep}; --auto-scale-lr '
               f'scales the lr linearly instead')
    return line, warning
