"""Decode wire protocol v1: single chunks, and whole episodes from their chunks.

`decode_chunk` checks one message on its own (magic, version, sizes, CRC). `EpisodeAssembler`
collects one episode's chunks in any order, tells harmless duplicates from conflicting ones,
and `assemble()` checks the manifest (counts, sizes, SHA-256) before building the `Episode`.
Every failure is a `ProtocolError` carrying a `QuarantineReason`.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np

from pi_format.checksum import crc32
from pi_format.episode import CameraSpec, CameraVideo, Episode, EpisodeMeta
from pi_format.errors import ProtocolError
from pi_format.errors import QuarantineReason as R
from pi_format.wire._header import (
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_CHUNK_BYTES,
    PROTOCOL_VERSION,
    Chunk,
    ChunkKind,
)
from pi_format.wire.writer import (
    ACTION_STREAM,
    MANIFEST_STREAM,
    META_STREAM,
    PROPRIO_STREAM,
    TIMESTAMPS_STREAM,
    camera_timestamps_stream,
    camera_video_stream,
)


def peek_episode_id(value: bytes) -> str | None:
    """Best-effort episode id of a message that may be damaged; None if unreadable."""
    if len(value) < HEADER_SIZE or value[:4] != MAGIC:
        return None
    id_len = HEADER.unpack_from(value)[7]
    raw = value[HEADER_SIZE : HEADER_SIZE + id_len]
    try:
        return raw.decode() if len(raw) == id_len and id_len else None
    except UnicodeDecodeError:
        return None


def decode_chunk(value: bytes) -> Chunk:
    """Parse and check one Kafka message value.

    Raises:
        ProtocolError: with reason oversize, truncated, bad_magic, unsupported_version,
            bad_header or chunk_checksum.

    Example:
        >>> chunk = decode_chunk(message)
        >>> chunk.episode_id, chunk.chunk_index
        ('r1-000001', 0)
    """
    if len(value) > MAX_CHUNK_BYTES:
        raise ProtocolError(
            R.OVERSIZE, f"message is {len(value)} bytes, protocol v1 allows {MAX_CHUNK_BYTES}"
        )
    if len(value) < HEADER_SIZE:
        raise ProtocolError(
            R.TRUNCATED, f"message is {len(value)} bytes, shorter than the {HEADER_SIZE}-byte header"
        )
    magic, version, kind, flags, index, count, crc, id_len, stream_len = HEADER.unpack_from(value)
    if magic != MAGIC:
        raise ProtocolError(R.BAD_MAGIC, f"magic is {magic!r}, expected {MAGIC!r}")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            R.UNSUPPORTED_VERSION,
            f"protocol version {version} is not supported (this reader speaks {PROTOCOL_VERSION})",
        )
    body_start = HEADER_SIZE + id_len + stream_len
    if len(value) < body_start:
        raise ProtocolError(
            R.TRUNCATED, f"message of {len(value)} bytes ends inside its {body_start}-byte prefix"
        )
    try:
        kind_enum = ChunkKind(kind)
        eid = value[HEADER_SIZE : HEADER_SIZE + id_len].decode()
        stream = value[HEADER_SIZE + id_len : body_start].decode()
    except (ValueError, UnicodeDecodeError) as err:
        raise ProtocolError(R.BAD_HEADER, f"unreadable header field: {err}") from err
    if not eid or count < 1 or index >= count:
        raise ProtocolError(
            R.BAD_HEADER,
            f"bad header: episode_id={eid!r} chunk_index={index} chunk_count={count}",
        )
    # The CRC covers only the payload, so every header field not otherwise cross-checked is
    # checked here: a flipped bit in flags, kind, index or stream name must not pass silently.
    if flags != 0:
        raise ProtocolError(R.BAD_HEADER, f"flags must be 0 in protocol v1, got {flags:#04x}")
    is_manifest = kind_enum is ChunkKind.MANIFEST
    if is_manifest != (index == count - 1) or is_manifest != (stream == MANIFEST_STREAM):
        raise ProtocolError(
            R.BAD_HEADER,
            f"bad header: kind={kind_enum.name} chunk_index={index} chunk_count={count} "
            f"stream={stream!r}; the manifest is exactly the last chunk and the {MANIFEST_STREAM!r} "
            "stream",
        )
    payload = value[body_start:]
    if crc32(payload) != crc:
        raise ProtocolError(
            R.CHUNK_CHECKSUM,
            f"chunk {index} of {eid}: payload CRC32 {crc32(payload):08x} != header {crc:08x}"
            " (corrupted or truncated in transit)",
        )
    return Chunk(eid, kind_enum, index, count, stream, payload, version)


class EpisodeAssembler:
    """Collects the chunks of one episode; pure logic, no I/O.

    Example:
        >>> asm = EpisodeAssembler("r1-000001")
        >>> for message in messages:
        ...     asm.add(decode_chunk(message))
        >>> episode = asm.assemble() if asm.is_complete else None
    """

    def __init__(self, episode_id: str) -> None:
        self.episode_id = episode_id
        self.chunk_count: int | None = None
        self.chunks: dict[int, Chunk] = {}
        self.duplicate_count = 0

    def add(self, chunk: Chunk) -> bool:
        """Add a chunk; returns False for an identical duplicate (ignored).

        Raises:
            ProtocolError: key_mismatch, count_mismatch or duplicate_conflict.
        """
        if chunk.episode_id != self.episode_id:
            raise ProtocolError(
                R.KEY_MISMATCH,
                f"chunk names episode {chunk.episode_id!r} but was routed to {self.episode_id!r}",
            )
        if self.chunk_count is None:
            self.chunk_count = chunk.chunk_count
        elif chunk.chunk_count != self.chunk_count:
            raise ProtocolError(
                R.COUNT_MISMATCH,
                f"chunk {chunk.chunk_index} says chunk_count={chunk.chunk_count}, earlier chunks "
                f"said {self.chunk_count}",
            )
        old = self.chunks.get(chunk.chunk_index)
        if old is not None:
            if old == chunk:
                self.duplicate_count += 1
                return False
            raise ProtocolError(
                R.DUPLICATE_CONFLICT,
                f"chunk {chunk.chunk_index} of {self.episode_id} arrived twice with different bytes",
            )
        self.chunks[chunk.chunk_index] = chunk
        return True

    @property
    def is_complete(self) -> bool:
        return self.chunk_count is not None and len(self.chunks) == self.chunk_count

    @property
    def size_bytes(self) -> int:
        return sum(c.size_bytes for c in self.chunks.values())

    def assemble(self) -> Episode:
        """Check the manifest against the chunks and build the episode.

        Raises:
            ProtocolError: count_mismatch, stream_checksum, bad_metadata or key_mismatch.
        """
        if not self.is_complete or self.chunk_count is None:
            have = len(self.chunks)
            raise ProtocolError(
                R.COUNT_MISMATCH,
                f"episode {self.episode_id} has {have} of {self.chunk_count} chunks",
            )
        manifest_chunk = self.chunks[self.chunk_count - 1]
        if manifest_chunk.kind is not ChunkKind.MANIFEST:
            raise ProtocolError(R.COUNT_MISMATCH, f"last chunk of {self.episode_id} is no manifest")
        entries = _parse_manifest(manifest_chunk.payload, self.episode_id, self.chunk_count)
        streams: dict[str, bytes] = {}
        covered = 0
        for name, first, count, size_bytes, sha256 in entries:
            # a declared span sizes nothing: it must lie within the chunks that arrived
            if first + count > self.chunk_count - 1:
                raise ProtocolError(
                    R.COUNT_MISMATCH,
                    f"stream {name!r} spans chunks {first}..{first + count - 1}, past the "
                    f"{self.chunk_count - 1} data chunks of {self.episode_id}",
                )
            parts = [self.chunks.get(i) for i in range(first, first + count)]
            if any(p is None or p.stream != name or p.kind is not ChunkKind.DATA for p in parts):
                raise ProtocolError(
                    R.COUNT_MISMATCH,
                    f"stream {name!r} should span chunks {first}..{first + count - 1}",
                )
            data = b"".join(p.payload for p in parts if p is not None)
            digest = hashlib.sha256(data).hexdigest()
            if len(data) != size_bytes or digest != sha256:
                raise ProtocolError(
                    R.STREAM_CHECKSUM,
                    f"stream {name!r} of {self.episode_id}: {len(data)} bytes, sha256 "
                    f"{digest[:12]}… does not match the manifest ({size_bytes} bytes, {sha256[:12]}…)",
                )
            streams[name] = data
            covered += count
        if covered != self.chunk_count - 1:
            raise ProtocolError(
                R.COUNT_MISMATCH,
                f"manifest covers {covered} data chunks, episode has {self.chunk_count - 1}",
            )
        return episode_from_streams(self.episode_id, streams)


def _parse_manifest(
    payload: bytes, episode_id: str, chunk_count: int
) -> list[tuple[str, int, int, int, str]]:
    """Parse the manifest JSON into (name, first_chunk, chunk_count, size_bytes, sha256) rows.

    Every shape error is a ProtocolError, never a KeyError/TypeError escaping to the job: a
    producer bug must end in quarantine, not in a crashed stream job.
    """
    try:
        manifest = json.loads(payload)
        if manifest["episode_id"] != episode_id:
            raise ProtocolError(
                R.KEY_MISMATCH, f"manifest names {manifest['episode_id']!r}, chunks name {episode_id!r}"
            )
        if manifest["chunk_count"] != chunk_count:
            raise ProtocolError(
                R.COUNT_MISMATCH,
                f"manifest says {manifest['chunk_count']} chunks, headers say {chunk_count}",
            )
        entries = []
        for entry in manifest["streams"]:
            name, first, count = entry["name"], entry["first_chunk"], entry["chunk_count"]
            size_bytes, sha256 = entry["size_bytes"], entry["sha256"]
            if not (
                isinstance(name, str)
                and isinstance(sha256, str)
                and all(type(v) is int and v >= 0 for v in (first, count, size_bytes))
            ):
                raise TypeError(f"bad stream entry {entry!r}")
            entries.append((name, first, count, size_bytes, sha256))
    except ProtocolError:
        raise
    except (ValueError, KeyError, TypeError) as err:
        raise ProtocolError(R.BAD_METADATA, f"unreadable manifest of {episode_id}: {err}") from err
    names = [e[0] for e in entries]
    if len(set(names)) != len(names):
        raise ProtocolError(R.BAD_METADATA, f"manifest of {episode_id} names a stream twice: {names}")
    return entries


def _array(streams: dict[str, bytes], name: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    data = streams.get(name)
    if data is None:
        raise ProtocolError(R.BAD_METADATA, f"stream {name!r} is missing")
    # exact integers: a huge declared shape must not wrap around in int64 and match by chance
    expected = math.prod(int(n) for n in shape) * np.dtype(dtype).itemsize
    if len(data) != expected:
        raise ProtocolError(
            R.COUNT_MISMATCH,
            f"stream {name!r} has {len(data)} bytes, meta implies {expected} for shape {shape}",
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape).astype(dtype[1:], copy=True)


def episode_from_streams(episode_id: str, streams: dict[str, bytes]) -> Episode:
    """Build an `Episode` from its decoded byte streams (see SPEC.md, "Streams")."""
    try:
        meta_doc: dict[str, Any] = json.loads(streams[META_STREAM])
        if meta_doc["episode_id"] != episode_id:
            raise ProtocolError(
                R.KEY_MISMATCH, f"meta names {meta_doc['episode_id']!r}, chunks name {episode_id!r}"
            )
        meta = EpisodeMeta(
            episode_id=meta_doc["episode_id"],
            robot_id=meta_doc["robot_id"],
            robot_type=meta_doc["robot_type"],
            task=str(meta_doc["task"]),
            start_time_ns=int(meta_doc["start_time_ns"]),
            control_rate_hz=float(meta_doc["control_rate_hz"]),
            success=bool(meta_doc["success"]),
            tags=tuple(str(t) for t in meta_doc["tags"]),
        )
        steps = int(meta_doc["step_count"])
        proprio_dim, action_dim = int(meta_doc["proprio_dim"]), int(meta_doc["action_dim"])
        cam_docs = list(meta_doc["cameras"])
        specs = [
            (
                CameraSpec(
                    name=c["name"],
                    codec=c["codec"],
                    container=c["container"],
                    width=int(c["width"]),
                    height=int(c["height"]),
                    fps=float(c["fps"]),
                ),
                int(c["frame_count"]),
            )
            for c in cam_docs
        ]
    except ProtocolError:
        raise
    except (KeyError, ValueError, TypeError) as err:
        raise ProtocolError(R.BAD_METADATA, f"meta of {episode_id} is invalid: {err}") from err
    cameras = []
    for spec, frame_count in specs:
        ts = _array(streams, camera_timestamps_stream(spec.name), "<i8", (frame_count,))
        video = streams.get(camera_video_stream(spec.name))
        if video is None:
            raise ProtocolError(R.BAD_METADATA, f"video stream of camera {spec.name!r} is missing")
        cameras.append(CameraVideo(spec, ts, video))
    try:
        return Episode(
            meta=meta,
            timestamps_ns=_array(streams, TIMESTAMPS_STREAM, "<i8", (steps,)),
            proprio=_array(streams, PROPRIO_STREAM, "<f4", (steps, proprio_dim)),
            action=_array(streams, ACTION_STREAM, "<f4", (steps, action_dim)),
            cameras=tuple(cameras),
        )
    except ValueError as err:
        raise ProtocolError(R.BAD_METADATA, f"episode {episode_id} is inconsistent: {err}") from err
