"""Wire protocol v1: an episode as ordered chunks under its episode_id key (see SPEC.md)."""

from pi_format.wire._header import (
    DEFAULT_PAYLOAD_BYTES,
    HEADER_SIZE,
    MAX_CHUNK_BYTES,
    PROTOCOL_VERSION,
    Chunk,
    ChunkKind,
)
from pi_format.wire.bundle import BUNDLE_SUFFIX, read_bundle, write_bundle
from pi_format.wire.reader import (
    EpisodeAssembler,
    decode_chunk,
    episode_from_streams,
    peek_episode_id,
)
from pi_format.wire.writer import encode_chunk, encode_episode, episode_streams

__all__ = [
    "BUNDLE_SUFFIX",
    "DEFAULT_PAYLOAD_BYTES",
    "HEADER_SIZE",
    "MAX_CHUNK_BYTES",
    "PROTOCOL_VERSION",
    "Chunk",
    "ChunkKind",
    "EpisodeAssembler",
    "decode_chunk",
    "encode_chunk",
    "encode_episode",
    "episode_from_streams",
    "episode_streams",
    "peek_episode_id",
    "read_bundle",
    "write_bundle",
]
