"""Encode an `Episode` into the ordered chunks of wire protocol v1.

Encoding is deterministic: the same episode always yields the same bytes, so a re-send after
a failure is byte-identical and the stream job can tell a harmless duplicate from a conflict.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import numpy as np

from pi_format.checksum import crc32
from pi_format.episode import Episode
from pi_format.wire._header import (
    DEFAULT_PAYLOAD_BYTES,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_CHUNK_BYTES,
    PROTOCOL_VERSION,
    Chunk,
    ChunkKind,
)

META_STREAM = "meta"
TIMESTAMPS_STREAM = "timestamps_ns"
PROPRIO_STREAM = "proprio"
ACTION_STREAM = "action"
MANIFEST_STREAM = "manifest"


def camera_video_stream(name: str) -> str:
    return f"camera/{name}/video"


def camera_timestamps_stream(name: str) -> str:
    return f"camera/{name}/timestamps_ns"


def episode_meta_document(episode: Episode) -> dict[str, Any]:
    """The JSON document of the `meta` stream."""
    m = episode.meta
    return {
        "episode_id": m.episode_id,
        "robot_id": m.robot_id,
        "robot_type": m.robot_type,
        "task": m.task,
        "start_time_ns": m.start_time_ns,
        "control_rate_hz": m.control_rate_hz,
        "success": m.success,
        "tags": list(m.tags),
        "step_count": episode.step_count,
        "proprio_dim": episode.proprio_dim,
        "action_dim": episode.action_dim,
        "cameras": [
            {
                "name": c.spec.name,
                "codec": c.spec.codec,
                "container": c.spec.container,
                "width": c.spec.width,
                "height": c.spec.height,
                "fps": c.spec.fps,
                "frame_count": c.frame_count,
            }
            for c in episode.cameras
        ],
    }


def episode_streams(episode: Episode) -> list[tuple[str, bytes]]:
    """The named byte streams an episode is made of, in wire order."""
    streams: list[tuple[str, bytes]] = [
        (META_STREAM, json.dumps(episode_meta_document(episode), sort_keys=True).encode()),
        (TIMESTAMPS_STREAM, np.ascontiguousarray(episode.timestamps_ns, dtype="<i8").tobytes()),
        (PROPRIO_STREAM, np.ascontiguousarray(episode.proprio, dtype="<f4").tobytes()),
        (ACTION_STREAM, np.ascontiguousarray(episode.action, dtype="<f4").tobytes()),
    ]
    for cam in episode.cameras:
        ts = np.ascontiguousarray(cam.frame_timestamps_ns, dtype="<i8").tobytes()
        streams.append((camera_timestamps_stream(cam.spec.name), ts))
        streams.append((camera_video_stream(cam.spec.name), cam.data))
    return streams


def encode_chunk(chunk: Chunk) -> bytes:
    """Serialize one chunk: header, episode id, stream name, payload."""
    eid = chunk.episode_id.encode()
    stream = chunk.stream.encode()
    header = HEADER.pack(
        MAGIC,
        chunk.version,
        int(chunk.kind),
        0,
        chunk.chunk_index,
        chunk.chunk_count,
        crc32(chunk.payload),
        len(eid),
        len(stream),
    )
    out = b"".join((header, eid, stream, chunk.payload))
    if len(out) > MAX_CHUNK_BYTES:
        raise ValueError(f"chunk of {len(out)} bytes exceeds MAX_CHUNK_BYTES={MAX_CHUNK_BYTES}")
    return out


def encode_episode(episode: Episode, *, payload_bytes: int = DEFAULT_PAYLOAD_BYTES) -> list[bytes]:
    """Encode `episode` into Kafka message values, manifest last.

    Args:
        episode: the episode to send.
        payload_bytes: most payload bytes per chunk; the header adds < 300 bytes.

    Returns:
        The messages in order; send them all under key `episode.episode_id`.

    Example:
        >>> messages = encode_episode(episode)
        >>> decode_chunk(messages[-1]).kind
        <ChunkKind.MANIFEST: 2>
    """
    return list(iter_encoded(episode, payload_bytes=payload_bytes))


def iter_encoded(episode: Episode, *, payload_bytes: int = DEFAULT_PAYLOAD_BYTES) -> Iterator[bytes]:
    """Like `encode_episode`, as an iterator."""
    limit = MAX_CHUNK_BYTES - HEADER_SIZE - 512
    if not 1 <= payload_bytes <= limit:
        raise ValueError(f"payload_bytes must be in [1, {limit}], got {payload_bytes}")
    streams = episode_streams(episode)
    pieces: list[tuple[str, bytes]] = []
    manifest_streams = []
    for name, data in streams:
        first = len(pieces)
        parts = [data[i : i + payload_bytes] for i in range(0, len(data), payload_bytes)] or [b""]
        pieces.extend((name, part) for part in parts)
        manifest_streams.append(
            {
                "name": name,
                "first_chunk": first,
                "chunk_count": len(parts),
                "size_bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    chunk_count = len(pieces) + 1
    eid = episode.episode_id
    for index, (name, part) in enumerate(pieces):
        yield encode_chunk(Chunk(eid, ChunkKind.DATA, index, chunk_count, name, part))
    manifest = {
        "protocol_version": PROTOCOL_VERSION,
        "episode_id": eid,
        "chunk_count": chunk_count,
        "streams": manifest_streams,
    }
    payload = json.dumps(manifest, sort_keys=True).encode()
    yield encode_chunk(Chunk(eid, ChunkKind.MANIFEST, chunk_count - 1, chunk_count, MANIFEST_STREAM, payload))
