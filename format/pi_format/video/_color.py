"""Vectorized YUV 4:2:0 -> RGB conversion (BT.601 limited range, what x264 encodes by default).

Architecture decision 4: PyAV's default `rgb24` conversion costs more than decoding itself,
so frames stay in yuv420p until here, where numpy does it for a whole frame at once.
"""

from __future__ import annotations

import numpy as np


def yuv420p_to_rgb(yuv: np.ndarray, height: int, width: int) -> np.ndarray:
    """Convert a planar yuv420p array of shape (height*3/2, width) to uint8 RGB (h, w, 3).

    Example:
        >>> rgb = yuv420p_to_rgb(frame.to_ndarray(), 224, 224)
    """
    if yuv.shape != (height * 3 // 2, width):
        raise ValueError(f"yuv420p array must have shape {(height * 3 // 2, width)}, got {yuv.shape}")
    y = yuv[:height].astype(np.float32)
    chroma = yuv[height:].reshape(2, height // 2, width // 2).astype(np.float32) - 128.0
    u = chroma[0].repeat(2, axis=0).repeat(2, axis=1)
    v = chroma[1].repeat(2, axis=0).repeat(2, axis=1)
    y = (y - 16.0) * 1.164383
    rgb = np.empty((height, width, 3), dtype=np.float32)
    rgb[..., 0] = y + 1.596027 * v
    rgb[..., 1] = y - 0.391762 * u - 0.812968 * v
    rgb[..., 2] = y + 2.017232 * u
    return np.clip(rgb, 0.0, 255.0, out=rgb).round().astype(np.uint8)
