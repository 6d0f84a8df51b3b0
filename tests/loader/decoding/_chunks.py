"""Real lake video chunks for the decoding tests: frames that differ from each other (a moving
gradient and a seeded texture), encoded by the lake's own writer (`pi_format.video.encode_chunks`)."""

from __future__ import annotations

import numpy as np
from pi_format.video import VideoChunk, encode_chunks


def frames(count: int, *, width: int, height: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    texture = rng.integers(0, 64, (height, width, 3), dtype=np.int32)
    ys, xs = np.mgrid[0:height, 0:width]
    out = []
    for i in range(count):
        base = (xs * 3 + ys * 2 + i * 23) % 192
        rgb = np.stack((base, (base + 64) % 256, 255 - base), axis=-1) + texture
        out.append(np.clip(rgb, 0, 255).astype(np.uint8))
    return out


def chunks(
    *, width: int = 64, height: int = 48, frames_per_chunk: int = 10, keyframe_interval: int | None = 1
) -> list[VideoChunk]:
    """Two chunks of `frames_per_chunk` frames; keyframe_interval 1: intra-only (the lake's
    default training video), None: one GOP per chunk (an IDR then P frames)."""
    return encode_chunks(
        frames(2 * frames_per_chunk, width=width, height=height),
        width=width,
        height=height,
        fps=15.0,
        chunk_frames=frames_per_chunk,
        keyframe_interval=keyframe_interval,
    )
