"""Wire protocol v1: round trips, limits, determinism and damage detection (format/SPEC.md)."""

from __future__ import annotations

import hashlib
import json
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pi_format import CameraSpec, CameraVideo, Episode, EpisodeMeta, ProtocolError, QuarantineReason
from pi_format.wire import (
    HEADER_SIZE,
    MAX_CHUNK_BYTES,
    PROTOCOL_VERSION,
    Chunk,
    ChunkKind,
    EpisodeAssembler,
    decode_chunk,
    encode_chunk,
    encode_episode,
    episode_streams,
    peek_episode_id,
)
from pi_format.wire._header import HEADER
from pi_format.wire.writer import MANIFEST_STREAM, META_STREAM, PROPRIO_STREAM, episode_meta_document

from tests.strategies import assert_episodes_identical, episodes, payload_sizes

R = QuarantineReason
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _episode(eid: str = "r1-000001", steps: int = 5, video: bytes = b"\x00\x01video") -> Episode:
    meta = EpisodeMeta(
        episode_id=eid,
        robot_id="r1",
        robot_type="aloha",
        task="stack",
        start_time_ns=7,
        control_rate_hz=50.0,
        success=True,
        tags=("sim",),
    )
    rng = np.random.default_rng(0)
    cam = CameraVideo(
        CameraSpec("cam_high", "h264", "mp4", 64, 48, 30.0), np.arange(3, dtype=np.int64) * 33, video
    )
    return Episode(
        meta,
        np.arange(steps, dtype=np.int64) * 20_000_000,
        rng.standard_normal((steps, 3)).astype(np.float32),
        rng.standard_normal((steps, 2)).astype(np.float32),
        (cam,),
    )


def _assemble(messages: list[bytes], episode_id: str) -> Episode:
    """What the stream job does for one key: decode, add, assemble. Raises ProtocolError."""
    asm = EpisodeAssembler(episode_id)
    for m in messages:
        asm.add(decode_chunk(m))
    return asm.assemble()


def _reason(messages: list[bytes], episode_id: str) -> QuarantineReason:
    with pytest.raises(ProtocolError) as info:
        _assemble(messages, episode_id)
    return info.value.reason


def _with_header(message: bytes, **fields: int | bytes) -> bytes:
    """Rewrite header fields of an encoded message (the CRC stays as it was)."""
    names = ("magic", "version", "kind", "flags", "index", "count", "crc", "id_len", "stream_len")
    values = dict(zip(names, HEADER.unpack_from(message), strict=True))
    values.update(fields)
    return HEADER.pack(*values.values()) + message[HEADER_SIZE:]


def _encode_streams(
    eid: str, streams: list[tuple[str, bytes]], manifest_extra: dict | None = None
) -> list[bytes]:
    """Encode arbitrary streams with a correct manifest, one chunk per stream (for crafted input)."""
    count = len(streams) + 1
    out = [encode_chunk(Chunk(eid, ChunkKind.DATA, i, count, n, d)) for i, (n, d) in enumerate(streams)]
    manifest = {
        "protocol_version": PROTOCOL_VERSION,
        "episode_id": eid,
        "chunk_count": count,
        "streams": [
            {
                "name": n,
                "first_chunk": i,
                "chunk_count": 1,
                "size_bytes": len(d),
                "sha256": hashlib.sha256(d).hexdigest(),
            }
            for i, (n, d) in enumerate(streams)
        ],
        **(manifest_extra or {}),
    }
    payload = json.dumps(manifest).encode()
    out.append(encode_chunk(Chunk(eid, ChunkKind.MANIFEST, count - 1, count, MANIFEST_STREAM, payload)))
    return out


# --- round trip -------------------------------------------------------------------------------


@FAST
@given(ep=episodes(), payload_bytes=payload_sizes(), data=st.data())
def test_round_trip_any_order_with_duplicates(ep: Episode, payload_bytes: int, data: st.DataObject) -> None:
    messages = encode_episode(ep, payload_bytes=payload_bytes)
    order = data.draw(st.permutations(range(len(messages))))
    dups = data.draw(st.lists(st.sampled_from(range(len(messages))), max_size=5))
    asm = EpisodeAssembler(ep.episode_id)
    seen: set[int] = set()
    for i in [*order[:1], *dups, *order[1:]]:
        added = asm.add(decode_chunk(messages[i]))
        assert added == (i not in seen)
        seen.add(i)
    assert asm.is_complete
    assert asm.duplicate_count == len(dups)
    assert asm.size_bytes == sum(len(m) for m in messages)
    assert_episodes_identical(asm.assemble(), ep)


@FAST
@given(ep=episodes(), payload_bytes=payload_sizes())
def test_encoding_is_deterministic_and_within_limits(ep: Episode, payload_bytes: int) -> None:
    messages = encode_episode(ep, payload_bytes=payload_bytes)
    assert messages == encode_episode(ep, payload_bytes=payload_bytes)
    # Re-encoding what was decoded gives the same bytes: a re-send is byte-identical.
    assert encode_episode(_assemble(messages, ep.episode_id), payload_bytes=payload_bytes) == messages
    assert all(len(m) <= MAX_CHUNK_BYTES for m in messages)
    chunks = [decode_chunk(m) for m in messages]
    assert [c.chunk_index for c in chunks] == list(range(len(messages)))
    assert all(c.chunk_count == len(messages) for c in chunks)
    assert [c.kind for c in chunks] == [ChunkKind.DATA] * (len(messages) - 1) + [ChunkKind.MANIFEST]
    assert all(len(c.payload) <= payload_bytes for c in chunks[:-1])
    # Chunks of each stream are contiguous and in stream order.
    names = [name for name, _ in episode_streams(ep)]
    runs = [c.stream for i, c in enumerate(chunks[:-1]) if i == 0 or chunks[i - 1].stream != c.stream]
    assert runs == names


def test_largest_payload_stays_under_message_limit() -> None:
    eid, cam = "e" * 128, "c" * 128
    big = bytes(range(256)) * 9000  # 2.3 MB of video: several full chunks
    ep = _episode(eid, video=big)
    ep = Episode(
        ep.meta,
        ep.timestamps_ns,
        ep.proprio,
        ep.action,
        (CameraVideo(CameraSpec(cam, "h264", "mp4", 64, 48, 30.0), ep.cameras[0].frame_timestamps_ns, big),),
    )
    limit = MAX_CHUNK_BYTES - HEADER_SIZE - 512
    messages = encode_episode(ep, payload_bytes=limit)
    assert max(len(m) for m in messages) <= MAX_CHUNK_BYTES
    assert_episodes_identical(_assemble(messages, eid), ep)
    assert len(encode_episode(ep)) > 4  # default payload 512 KiB splits the video


@pytest.mark.parametrize("payload_bytes", [0, -1, MAX_CHUNK_BYTES])
def test_payload_bytes_out_of_range(payload_bytes: int) -> None:
    with pytest.raises(ValueError, match="payload_bytes must be in"):
        encode_episode(_episode(), payload_bytes=payload_bytes)


def test_encode_chunk_refuses_oversize() -> None:
    chunk = Chunk("e1", ChunkKind.DATA, 0, 2, "meta", b"x" * MAX_CHUNK_BYTES)
    with pytest.raises(ValueError, match="exceeds MAX_CHUNK_BYTES"):
        encode_chunk(chunk)


# --- damage -----------------------------------------------------------------------------------


def _flip(message: bytes, bit: int) -> bytes:
    damaged = bytearray(message)
    damaged[bit // 8] ^= 1 << (bit % 8)
    return bytes(damaged)


def test_every_single_bit_flip_in_every_message_is_detected() -> None:
    """Exhaustive over a small episode: no flipped bit anywhere passes silently."""
    ep = _episode(steps=2, video=b"v" * 40)
    messages = encode_episode(ep, payload_bytes=24)
    reasons: set[QuarantineReason] = set()
    for i, m in enumerate(messages):
        for bit in range(len(m) * 8):
            damaged = [*messages[:i], _flip(m, bit), *messages[i + 1 :]]
            reasons.add(_reason(damaged, ep.episode_id))
    # Damage is caught by many different rules, each with its own reason.
    assert {R.BAD_MAGIC, R.UNSUPPORTED_VERSION, R.BAD_HEADER, R.CHUNK_CHECKSUM} <= reasons


@FAST
@given(ep=episodes(max_steps=4), payload_bytes=st.integers(1, 256), data=st.data())
def test_random_bit_flip_detected_in_any_order(ep: Episode, payload_bytes: int, data: st.DataObject) -> None:
    messages = encode_episode(ep, payload_bytes=payload_bytes)
    i = data.draw(st.integers(0, len(messages) - 1))
    bit = data.draw(st.integers(0, len(messages[i]) * 8 - 1))
    damaged = [*messages[:i], _flip(messages[i], bit), *messages[i + 1 :]]
    _reason(data.draw(st.permutations(damaged)), ep.episode_id)


@FAST
@given(ep=episodes(max_steps=4), payload_bytes=st.integers(1, 256), data=st.data())
def test_truncated_message(ep: Episode, payload_bytes: int, data: st.DataObject) -> None:
    message = data.draw(st.sampled_from(encode_episode(ep, payload_bytes=payload_bytes)))
    cut = data.draw(st.integers(0, len(message) - 1))
    with pytest.raises(ProtocolError) as info:
        decode_chunk(message[:cut])
    assert info.value.reason in (R.TRUNCATED, R.CHUNK_CHECKSUM)
    if cut < HEADER_SIZE:
        assert info.value.reason is R.TRUNCATED


@pytest.mark.parametrize("version", [0, 2, 0xFFFF])
def test_unknown_version_is_unsupported(version: int) -> None:
    message = encode_episode(_episode())[0]
    with pytest.raises(ProtocolError, match="version") as info:
        decode_chunk(_with_header(message, version=version))
    assert info.value.reason is R.UNSUPPORTED_VERSION
    # Also when the writer itself speaks another version: the CRC is right, the version is not.
    chunk = decode_chunk(message)
    other = Chunk(
        chunk.episode_id,
        chunk.kind,
        chunk.chunk_index,
        chunk.chunk_count,
        chunk.stream,
        chunk.payload,
        version=version,
    )
    with pytest.raises(ProtocolError) as info:
        decode_chunk(encode_chunk(other))
    assert info.value.reason is R.UNSUPPORTED_VERSION


def test_oversize_message() -> None:
    message = encode_episode(_episode())[0]
    with pytest.raises(ProtocolError, match="allows 1000000") as info:
        decode_chunk(message + b"\x00" * (MAX_CHUNK_BYTES + 1 - len(message)))
    assert info.value.reason is R.OVERSIZE


def test_bad_magic() -> None:
    message = encode_episode(_episode())[0]
    with pytest.raises(ProtocolError, match="magic") as info:
        decode_chunk(b"XXXX" + message[4:])
    assert info.value.reason is R.BAD_MAGIC


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"kind": 3}, "unreadable header field"),
        ({"kind": 0}, "unreadable header field"),
        ({"flags": 1}, "flags must be 0"),
        ({"count": 0}, "chunk_count=0"),
        ({"index": 99}, "chunk_index=99"),
        ({"kind": int(ChunkKind.MANIFEST)}, "the manifest is exactly the last chunk"),
    ],
)
def test_bad_header(fields: dict[str, int], match: str) -> None:
    message = encode_episode(_episode())[0]
    with pytest.raises(ProtocolError, match=match) as info:
        decode_chunk(_with_header(message, **fields))
    assert info.value.reason is R.BAD_HEADER


def test_bad_header_utf8_and_empty_id() -> None:
    message = encode_episode(_episode())[0]
    bad_utf8 = message[:HEADER_SIZE] + b"\xff" + message[HEADER_SIZE + 1 :]
    with pytest.raises(ProtocolError, match="unreadable header field") as info:
        decode_chunk(bad_utf8)
    assert info.value.reason is R.BAD_HEADER
    chunk = decode_chunk(message)
    no_id = encode_chunk(Chunk("", chunk.kind, 0, chunk.chunk_count, chunk.stream, chunk.payload))
    with pytest.raises(ProtocolError, match="episode_id=''") as info:
        decode_chunk(no_id)
    assert info.value.reason is R.BAD_HEADER


def test_duplicate_with_different_bytes_conflicts() -> None:
    messages = encode_episode(_episode())
    asm = EpisodeAssembler("r1-000001")
    first = decode_chunk(messages[0])
    assert asm.add(first)
    assert not asm.add(decode_chunk(messages[0]))
    assert asm.duplicate_count == 1
    other = Chunk(first.episode_id, first.kind, 0, first.chunk_count, first.stream, first.payload + b"!")
    with pytest.raises(ProtocolError, match="arrived twice with different bytes") as info:
        asm.add(decode_chunk(encode_chunk(other)))
    assert info.value.reason is R.DUPLICATE_CONFLICT


@pytest.mark.parametrize("drop", [0, 2, -1])
def test_missing_chunk_is_incomplete(drop: int) -> None:
    messages = encode_episode(_episode())
    del messages[drop]
    asm = EpisodeAssembler("r1-000001")
    for m in messages:
        asm.add(decode_chunk(m))
    assert not asm.is_complete
    with pytest.raises(ProtocolError, match=f"has {len(messages)} of") as info:
        asm.assemble()
    assert info.value.reason is R.COUNT_MISMATCH


def test_empty_assembler_cannot_assemble() -> None:
    with pytest.raises(ProtocolError, match="has 0 of None chunks") as info:
        EpisodeAssembler("e1").assemble()
    assert info.value.reason is R.COUNT_MISMATCH


def test_chunk_of_another_episode() -> None:
    asm = EpisodeAssembler("r1-000001")
    with pytest.raises(ProtocolError, match="was routed to 'r1-000001'") as info:
        asm.add(decode_chunk(encode_episode(_episode("r1-000002"))[0]))
    assert info.value.reason is R.KEY_MISMATCH


def test_chunk_count_disagreement() -> None:
    a = encode_episode(_episode())
    b = encode_episode(_episode(steps=5, video=b"v" * 10), payload_bytes=4)
    asm = EpisodeAssembler("r1-000001")
    asm.add(decode_chunk(a[0]))
    with pytest.raises(ProtocolError, match="earlier chunks said") as info:
        asm.add(decode_chunk(b[0]))
    assert info.value.reason is R.COUNT_MISMATCH


def test_payload_replaced_with_valid_crc_fails_stream_checksum() -> None:
    messages = encode_episode(_episode())
    chunk = decode_chunk(messages[2])
    forged = Chunk(
        chunk.episode_id,
        chunk.kind,
        chunk.chunk_index,
        chunk.chunk_count,
        chunk.stream,
        bytes(len(chunk.payload)),
    )
    messages[2] = encode_chunk(forged)
    assert _reason(messages, "r1-000001") is R.STREAM_CHECKSUM


# --- well-formed chunks, bad content (a producer bug must end in quarantine, not a crash) -----


def _streams(ep: Episode) -> list[tuple[str, bytes]]:
    return episode_streams(ep)


@pytest.mark.parametrize(
    ("manifest_extra", "reason", "match"),
    [
        ({"episode_id": "other"}, R.KEY_MISMATCH, "manifest names 'other'"),
        ({"chunk_count": 99}, R.COUNT_MISMATCH, "manifest says 99 chunks"),
        ({"streams": [{"name": "meta"}]}, R.BAD_METADATA, "unreadable manifest"),
        (
            {
                "streams": [
                    {"name": "meta", "first_chunk": "0", "chunk_count": 1, "size_bytes": 1, "sha256": ""}
                ]
            },
            R.BAD_METADATA,
            "bad stream entry",
        ),
        ({"streams": 5}, R.BAD_METADATA, "unreadable manifest"),
        # a declared span sizes nothing (decision 13): refused before any list is built from it
        (
            {
                "streams": [
                    {"name": "meta", "first_chunk": 0, "chunk_count": 2**40, "size_bytes": 1, "sha256": ""}
                ]
            },
            R.COUNT_MISMATCH,
            "past the",
        ),
        ({"streams": []}, R.COUNT_MISMATCH, "manifest covers 0 data chunks"),
    ],
)
def test_bad_manifest(manifest_extra: dict, reason: QuarantineReason, match: str) -> None:
    messages = _encode_streams("r1-000001", _streams(_episode()), manifest_extra)
    with pytest.raises(ProtocolError, match=match) as info:
        _assemble(messages, "r1-000001")
    assert info.value.reason is reason


def test_manifest_not_json() -> None:
    messages = _encode_streams("r1-000001", _streams(_episode()))
    n = len(messages)
    messages[-1] = encode_chunk(Chunk("r1-000001", ChunkKind.MANIFEST, n - 1, n, MANIFEST_STREAM, b"{"))
    assert _reason(messages, "r1-000001") is R.BAD_METADATA


def test_manifest_naming_a_stream_twice() -> None:
    streams = _streams(_episode())
    messages = _encode_streams("r1-000001", [*streams, streams[0]])
    with pytest.raises(ProtocolError, match="names a stream twice") as info:
        _assemble(messages, "r1-000001")
    assert info.value.reason is R.BAD_METADATA


def _with_meta(ep: Episode, **changes: object) -> list[tuple[str, bytes]]:
    doc = {**episode_meta_document(ep), **changes}
    return [(META_STREAM, json.dumps(doc).encode()), *_streams(ep)[1:]]


@pytest.mark.parametrize(
    ("changes", "reason", "match"),
    [
        ({"episode_id": "r1-000002"}, R.KEY_MISMATCH, "meta names 'r1-000002'"),
        ({"robot_id": None}, R.BAD_METADATA, "robot_id must be"),
        ({"control_rate_hz": -1}, R.BAD_METADATA, "control_rate_hz must be > 0"),
        ({"cameras": [{"name": "c"}]}, R.BAD_METADATA, "meta of r1-000001 is invalid"),
        ({"step_count": 4}, R.COUNT_MISMATCH, "stream 'timestamps_ns' has 40 bytes"),
        ({"proprio_dim": 4}, R.COUNT_MISMATCH, "stream 'proprio' has 60 bytes"),
        ({"cameras": []}, R.BAD_METADATA, None),
    ],
)
def test_bad_meta(changes: dict, reason: QuarantineReason, match: str | None) -> None:
    ep = _episode()
    messages = _encode_streams("r1-000001", _with_meta(ep, **changes))
    if changes == {"cameras": []}:
        # Streams the meta does not mention are ignored: the episode has no cameras then.
        assert _assemble(messages, "r1-000001").cameras == ()
        return
    with pytest.raises(ProtocolError, match=match) as info:
        _assemble(messages, "r1-000001")
    assert info.value.reason is reason


def test_missing_stream() -> None:
    streams = [s for s in _streams(_episode()) if s[0] != PROPRIO_STREAM]
    with pytest.raises(ProtocolError, match="stream 'proprio' is missing") as info:
        _assemble(_encode_streams("r1-000001", streams), "r1-000001")
    assert info.value.reason is R.BAD_METADATA


def test_meta_not_json() -> None:
    streams = [(META_STREAM, b"\xff"), *_streams(_episode())[1:]]
    assert _reason(_encode_streams("r1-000001", streams), "r1-000001") is R.BAD_METADATA


# --- peek_episode_id --------------------------------------------------------------------------


def test_peek_episode_id() -> None:
    message = encode_episode(_episode())[0]
    assert peek_episode_id(message) == "r1-000001"
    # Payload damage does not hide the id: the quarantine row can still name the episode.
    assert peek_episode_id(_flip(message, len(message) * 8 - 1)) == "r1-000001"
    assert peek_episode_id(b"") is None
    assert peek_episode_id(message[: HEADER_SIZE - 1]) is None
    assert peek_episode_id(b"XXXX" + message[4:]) is None
    assert peek_episode_id(message[: HEADER_SIZE + 3]) is None  # id cut short
    assert peek_episode_id(_with_header(message, id_len=0)) is None
    assert peek_episode_id(message[:HEADER_SIZE] + b"\xff" + message[HEADER_SIZE + 1 :]) is None


@FAST
@given(st.binary(max_size=64))
def test_junk_never_crashes(junk: bytes) -> None:
    peek_episode_id(junk)
    with pytest.raises(ProtocolError):
        decode_chunk(junk)


def test_crc_is_of_payload() -> None:
    message = encode_episode(_episode())[0]
    chunk = decode_chunk(message)
    assert HEADER.unpack_from(message)[6] == zlib.crc32(chunk.payload)
    assert message[:4] == b"PIEP" and HEADER_SIZE == 24
