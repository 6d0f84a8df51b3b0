"""Records of the stream job's sink: a source message, and the raw and quarantine rows made from
messages (pure: no I/O)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pi_format import QUARANTINE_SCHEMA, RAW_SCHEMA, QuarantineReason

# Key of messages that carry no usable episode id: they all land on one assembler-free path
# and go straight to quarantine.
NO_KEY = "__nokey__"
# An oversize message is kept in raw only up to the protocol's limit: it can never be
# re-admitted, and a 256 MiB message must not bloat the bronze table (SPEC.md 7.5).
OVERSIZE_KEEP_BYTES = 1_000_000


def episode_key(row: Any) -> str:
    """The key_by key of a source row: its Kafka key as text, or NO_KEY."""
    key = row[0]
    if not key:
        return NO_KEY
    try:
        text = bytes(key).decode("utf-8")
    except UnicodeDecodeError:
        return NO_KEY
    return text if text and text != NO_KEY else NO_KEY


@dataclass(slots=True)
class SourceMessage:
    """One Kafka record as the sink received it."""

    topic: str
    partition: int
    offset: int
    received_at_ns: int
    key: str | None
    value: bytes
    chunk_index: int | None = None
    # the Kafka record timestamp (the producer's send time, CreateTime), when the source has one
    published_at_ns: int | None = None


def record_time_ns(value: Any) -> int | None:
    """A Kafka record timestamp as Flink hands it to Python (TIMESTAMP_LTZ: a pyflink Instant
    or a datetime; a number of epoch milliseconds), in epoch nanoseconds; None when absent."""
    if value is None:
        return None
    if hasattr(value, "to_epoch_milli"):  # pyflink.common.time.Instant
        return int(value.seconds) * 1_000_000_000 + int(value.nanos)
    if hasattr(value, "getEpochSecond"):  # java.time.Instant, as PyFlink's thread mode passes it
        return int(value.getEpochSecond()) * 1_000_000_000 + int(value.getNano())
    if hasattr(value, "timestamp"):  # datetime.datetime
        return round(value.timestamp() * 1e6) * 1000
    if isinstance(value, int | float):
        return int(value) * 1_000_000
    return None


# raw.chunk_index is int32: a header's uint32 index beyond it is stored as null (the message
# itself is kept whole), never an overflow that fails the write.
_INT32_MAX = 2**31 - 1


def raw_rows(messages: list[SourceMessage], attempt_id: str, chunk_indices: list[int | None]) -> pa.Table:
    """The raw (bronze) rows of `messages`, one per message, under `attempt_id`.

    Example:
        >>> raw_rows([message], "attempt-1", [0]).num_rows
        1
    """
    return pa.Table.from_pydict(
        {
            "episode_id": [m.key for m in messages],
            "chunk_index": [i if i is not None and 0 <= i <= _INT32_MAX else None for i in chunk_indices],
            "kafka_topic": [m.topic for m in messages],
            "kafka_partition": [m.partition for m in messages],
            "kafka_offset": [m.offset for m in messages],
            "received_at_ns": [m.received_at_ns for m in messages],
            "attempt_id": [attempt_id] * len(messages),
            "message": [m.value for m in messages],
        },
        schema=RAW_SCHEMA,
    )


def freshness_rows(
    episode_ids: list[str],
    attempt_ids: list[str],
    published_at_ns: dict[str, int | None],
    lake_committed_at_ns: int,
    readable_at_ns: int,
    episodes_version: int,
) -> pa.Table:
    """The catalog's `episode_freshness` rows of one group commit (pi_catalog)."""
    n = len(episode_ids)
    return pa.table(
        {
            "episode_id": pa.array(episode_ids, pa.string()),
            "attempt_id": pa.array(attempt_ids, pa.string()),
            "published_at_ns": pa.array([published_at_ns.get(e) for e in episode_ids], pa.int64()),
            "lake_committed_at_ns": pa.array([lake_committed_at_ns] * n, pa.int64()),
            "readable_at_ns": pa.array([readable_at_ns] * n, pa.int64()),
            "episodes_version": pa.array([episodes_version] * n, pa.int64()),
        }
    )


def quarantine_row(
    *,
    episode_id: str | None,
    reason: QuarantineReason,
    details: str,
    messages: list[SourceMessage],
    attempt_id: str,
    size_bytes: int | None = None,
) -> pa.Table:
    first = messages[0]
    offsets = [m.offset for m in messages]
    pointer = (
        f"raw: attempt_id={attempt_id} topic={first.topic} partition={first.partition} "
        f"offsets={offsets[0]}..{offsets[-1]}"
        if len(offsets) > 1
        else f"raw: attempt_id={attempt_id} topic={first.topic} partition={first.partition} "
        f"offset={offsets[0]}"
    )
    return pa.Table.from_pylist(
        [
            {
                "quarantine_id": str(uuid.uuid4()),
                "episode_id": episode_id,
                "reason": reason.value,
                "details": details[:2000],
                "kafka_topic": first.topic,
                "kafka_partition": first.partition,
                "kafka_offsets": offsets,
                "raw_pointer": pointer,
                "size_bytes": size_bytes if size_bytes is not None else sum(len(m.value) for m in messages),
                "attempt_id": attempt_id,
                "quarantined_at_ns": time.time_ns(),
            }
        ],
        schema=QUARANTINE_SCHEMA,
    )
