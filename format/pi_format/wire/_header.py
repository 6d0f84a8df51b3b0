"""The fixed 24-byte chunk header of wire protocol v1 (see format/SPEC.md)."""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

MAGIC = b"PIEP"
PROTOCOL_VERSION = 1
# magic, version, kind, flags, chunk_index, chunk_count, payload_crc32, id_len, stream_len
HEADER = struct.Struct(">4sHBBIIIHH")
HEADER_SIZE = HEADER.size  # 24
# Kafka's default message.max.bytes is ~1 MB; staying well under it means no broker or
# client needs tuning, and one lost chunk costs little to re-send.
MAX_CHUNK_BYTES = 1_000_000
DEFAULT_PAYLOAD_BYTES = 512 * 1024


class ChunkKind(enum.IntEnum):
    DATA = 1
    MANIFEST = 2


@dataclass(frozen=True, slots=True)
class Chunk:
    """One decoded Kafka message of an episode upload.

    `chunk_index` runs 0..chunk_count-1; the last chunk is the manifest.
    """

    episode_id: str
    kind: ChunkKind
    chunk_index: int
    chunk_count: int
    stream: str
    payload: bytes
    version: int = PROTOCOL_VERSION

    @property
    def size_bytes(self) -> int:
        return HEADER_SIZE + len(self.episode_id.encode()) + len(self.stream.encode()) + len(self.payload)
