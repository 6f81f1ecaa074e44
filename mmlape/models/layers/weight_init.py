"""The generic initialisation every mmlape backbone starts from, before its
specialised values (generic first, specialised last).

References:
    DeiT/timm's ``_init_weights``, the official Swin code and the official
    ViT-Adapter's ``_init_weights``.
"""
import math

import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = ['NORMS', 'init_generic_weights']

#: The norms the generic pass resets (when they have affine weights).
NORMS = (nn.LayerNorm, _BatchNorm, nn.GroupNorm)


def init_generic_weights(module: nn.Module,
                         conv_fan_out: bool = False) -> None:
    """Linear layers truncated normal (std 0.02) with zero bias, norms ones
    and zeros, over ``module`` and every module under it.

    Args:
        module (nn.Module): The module to initialise.
        conv_fan_out (bool): Also give convolutions (and transposed ones) a
            normal law with std ``sqrt(2 / fan_out)`` and zero bias (the
            official ViT-Adapter); else they keep PyTorch's default.
            Defaults to False.

    Example:
        >>> layer = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
        >>> init_generic_weights(layer)
        >>> bool(layer[0].bias.eq(0).all() and layer[1].weight.eq(1).all())
        True
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif conv_fan_out and isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
            fan_out //= m.groups
            nn.init.normal_(m.weight, 0, math.sqrt(2.0 / fan_out))
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, NORMS) and m.weight is not None:
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
