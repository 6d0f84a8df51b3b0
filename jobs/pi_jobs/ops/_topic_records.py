"""The audit's read of the raw topic record by record: every (partition, offset, key) the broker
still holds, so that a message that reached neither `raw` nor `quarantine` is named, not only
counted as lag (issue 31: a message that crashed the job was in neither, and the audit said OK).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pi_jobs.stream.config import StreamJobConfig

# Key of records that carry no usable episode id (the stream job's rule, pi_jobs.stream._records).
_NO_KEY = "__nokey__"
# How long the read waits without a record before it decides a partition is drained.
QUIET_S = 1.0


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """One record of the raw topic: where it is and the episode id its key names (None: none)."""

    partition: int
    offset: int
    key: str | None


def _key_text(key: bytes | None) -> str | None:
    if not key:
        return None
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if text == _NO_KEY else text


def read_topic_records(config: StreamJobConfig, ends: dict[int, int]) -> list[TopicRecord]:
    """Every record of the raw topic below `ends` (the true end offsets), from the earliest the
    broker keeps; keys only are kept (values are read and dropped).

    Example:
        >>> records = read_topic_records(config, {0: 12, 1: 0})
        >>> (records[0].partition, records[0].offset)
        (0, 0)
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    wanted = {p: end for p, end in ends.items() if end > 0}
    if not wanted:
        return []
    consumer = Consumer(
        {
            **config.client_options,
            "bootstrap.servers": config.bootstrap_servers,
            "group.id": f"pilake-audit-{uuid.uuid4()}",  # never committed: reads only
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "fetch.message.max.bytes": 16 * 1024 * 1024,
        }
    )
    out: list[TopicRecord] = []
    done: set[int] = set()
    try:
        consumer.assign([TopicPartition(config.raw_topic, p, 0) for p in sorted(wanted)])
        quiet_since = time.monotonic()
        while len(done) < len(wanted) and time.monotonic() - quiet_since < QUIET_S * 10:
            batch = consumer.consume(num_messages=500, timeout=0.2)
            if batch:
                quiet_since = time.monotonic()
            for m in batch:
                err = m.error()
                p = int(m.partition() or 0)
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and int(m.offset() or 0) >= wanted.get(p, 0):
                        done.add(p)
                    continue
                offset = int(m.offset() or 0)
                if offset < wanted.get(p, 0):
                    out.append(TopicRecord(p, offset, _key_text(m.key())))
                if offset + 1 >= wanted.get(p, 0):
                    done.add(p)
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r.partition, r.offset))


@dataclass(frozen=True, slots=True)
class Unaccounted:
    """Records of the topic that reached neither `raw` nor `quarantine` (every message the stream
    job handles gets a raw row, quarantined or not), as the audit counts them."""

    records: tuple[TopicRecord, ...]
    topic: str = ""

    @property
    def episode_ids(self) -> set[str]:
        """Keys named by such records: "in" the audit, missing unless visible or quarantined."""
        return {r.key for r in self.records if r.key is not None}

    @property
    def keyless(self) -> set[str]:
        """Counting keys (SPEC 7.5) of keyless records: always missing, nothing else names them."""
        return {f"kafka:{self.topic}/{r.partition}/{r.offset}" for r in self.records if r.key is None}

    def lines(self, limit: int = 20) -> tuple[str, ...]:
        return tuple(f"{r.partition}:{r.offset} key={r.key or '-'}" for r in self.records[:limit])


def unaccounted(
    records: list[TopicRecord] | tuple[TopicRecord, ...], raw_positions: set[tuple[int, int]], topic: str
) -> Unaccounted:
    """The records whose (partition, offset) has no raw row (pure).

    Example:
        >>> unaccounted([TopicRecord(0, 1, "e1"), TopicRecord(0, 2, None)], {(0, 1)}, "t").keyless
        {'kafka:t/0/2'}
    """
    return Unaccounted(tuple(r for r in records if (r.partition, r.offset) not in raw_positions), topic)


def topic_unaccounted(config: StreamJobConfig, ends: dict[int, int], raw: Any) -> Unaccounted:
    """Read the topic's records and find those without a raw row (`raw`: the raw table's
    kafka_topic, kafka_partition, kafka_offset columns as Arrow, or None when it does not exist).

    Example:
        >>> topic_unaccounted(config, {0: 3}, raw_table).records
        ()
    """
    positions: set[tuple[int, int]] = set()
    if raw is not None:
        columns = (raw.column(c).to_pylist() for c in ("kafka_topic", "kafka_partition", "kafka_offset"))
        for topic, partition, offset in zip(*columns, strict=True):
            if topic == config.raw_topic:
                positions.add((int(partition), int(offset)))
    return unaccounted(read_topic_records(config, ends), positions, config.raw_topic)
