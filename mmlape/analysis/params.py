"""Parameter counts as the papers print them.

The official code counts some fixed tensors (T2T-ViT's sinusoid and
Performer features, LaPE's sin-cos PEs) as frozen parameters; mmlape keeps
them as buffers. The papers' count is every parameter plus every float
buffer that is not a norm's running statistics.
"""
from typing import NamedTuple

import torch.nn as nn
from torch.nn.modules.batchnorm import _NormBase

__all__ = ['ParamCount', 'count_parameters']


class ParamCount(NamedTuple):
    """A model's parameters, two ways.

    Attributes:
        learnable (int): Elements of ``model.parameters()`` (trained unless
            frozen by the config).
        fixed (int): Elements of the fixed weights kept as buffers (see the
            module docstring).
    """
    learnable: int
    fixed: int

    @property
    def paper(self) -> int:
        """The papers' count: ``learnable + fixed``."""
        return self.learnable + self.fixed


def count_parameters(model: nn.Module) -> ParamCount:
    """Count ``model``'s parameters and fixed weights.

    Args:
        model (nn.Module): Any model.

    Returns:
        ParamCount: ``learnable``, ``fixed`` and ``paper`` (their sum).

    Example:
        >>> from mmlape.models import LaPEViT
        >>> count = count_parameters(LaPEViT('test-tiny', img_size=64,
        ...                                  pe_type='sincos2d'))
        >>> count.fixed  # the sin-cos PE: (16 patches + 1 class) x 64
        1088
        >>> count.paper == count.learnable + count.fixed
        True
    """
    learnable = sum(p.numel() for p in model.parameters())
    fixed = 0
    for module in model.modules():
        if isinstance(module, _NormBase):
            continue
        for buf in module.buffers(recurse=False):
            if buf is not None and buf.dtype.is_floating_point:
                fixed += buf.numel()
    return ParamCount(learnable, fixed)
