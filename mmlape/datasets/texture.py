"""Images with the statistics of photographs, for generated data whose
JPEG files cost what real ones cost to decode.

:func:`natural_image` draws ``1/f^alpha`` noise in a luminance and two
weaker opponent channels; at quality 90 a 500x375 image is about 110 KB,
the average ImageNet JPEG (white noise or flat colour would decode at
quite another cost).

References:
    Field, JOSA A 1987: natural images' amplitude spectrum falls as ``1/f``.
"""
from typing import Tuple

import numpy as np

__all__ = ['natural_image']

#: Luminance and the two opponent channels -> RGB.
_MIX = np.array([[1.0, 0.3, 0.0], [1.0, -0.15, 0.25], [1.0, -0.15, -0.3]])


def natural_image(
    rng: np.random.Generator,
    size: Tuple[int, int],
    alpha: Tuple[float, float] = (0.95, 1.15),
    contrast: Tuple[float, float] = (35.0, 55.0)
) -> np.ndarray:
    """An RGB image of ``1/f^alpha`` noise.

    Args:
        rng (np.random.Generator): The source of randomness.
        size (tuple[int, int]): ``(height, width)``.
        alpha (tuple[float, float]): Range of the spectral exponent, drawn
            per image (larger: smoother, smaller files). Defaults to
            (0.95, 1.15).
        contrast (tuple[float, float]): Range of the luminance's standard
            deviation in grey levels, drawn per image. Defaults to
            (35.0, 55.0).

    Returns:
        np.ndarray: ``(height, width, 3)`` uint8.

    Example:
        >>> natural_image(np.random.default_rng(0), (375, 500)).shape
        (375, 500, 3)
    """
    h, w = size
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.rfftfreq(w)[None, :]
    freq = np.hypot(fx, fy)
    freq[0, 0] = 1.0
    amp = freq**-rng.uniform(*alpha)
    amp[0, 0] = 0.0  # zero mean; the mean colour is drawn below
    shape = (3, h, w // 2 + 1)
    spec = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))
    channels = np.fft.irfft2(spec * amp, s=(h, w))
    channels /= channels[0].std()
    rgb = np.tensordot(_MIX, channels, 1).transpose(1, 2, 0)
    rgb = rgb * rng.uniform(*contrast) + rng.uniform(90, 150, 3)
    return np.clip(rgb, 0, 255).astype(np.uint8)
