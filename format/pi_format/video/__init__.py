"""Video codecs: robot camera containers in, short independently decodable chunks out."""

from pi_format.video._color import yuv420p_to_rgb
from pi_format.video.reader import (
    ChunkDecoder,
    decode_chunk_rgb,
    decode_chunk_yuv,
    decode_container,
    frame_to_rgb,
)
from pi_format.video.writer import (
    ChunkedVideoEncoder,
    VideoChunk,
    check_keyframe_interval,
    encode_chunks,
    encode_mp4,
)

__all__ = [
    "ChunkDecoder",
    "ChunkedVideoEncoder",
    "VideoChunk",
    "check_keyframe_interval",
    "decode_chunk_rgb",
    "decode_chunk_yuv",
    "decode_container",
    "encode_chunks",
    "encode_mp4",
    "frame_to_rgb",
    "yuv420p_to_rgb",
]
