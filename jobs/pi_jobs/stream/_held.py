"""What the sink holds in memory, made recoverable: each held message's Kafka position in Flink
keyed state, and the read that brings the messages back after a restore.

An episode the sink is assembling, or has completed and holds for its group commit, lives in the
Python worker's memory (its megabytes of chunks are not copied into Flink state). A checkpoint
that completes meanwhile moves the source's offsets past those messages, so after a TaskManager
or worker loss Flink restores past them and does not replay them. Their positions are small, so
they go into Flink keyed state instead: one `(partition, offset)` per message, added as it
arrives (PyFlink writes state back at the end of each bundle, before a checkpoint barrier
passes), cleared when the episode leaves memory for good (committed, quarantined, a duplicate)
and only once that commit has landed: a quarantine waits for its group commit like an episode.
A message refused on its own (undecodable, a conflicting chunk) is held as a *lone* position,
`lone_position` (a negative partition), so that a key committed before a restore still reads
its lone messages again and quarantines them.
After a restore a key whose state holds positions while its episode is not in memory is
recovered: `refetch` reads those messages from Kafka again and the sink assembles them anew.
What Kafka no longer has (retention ran out) is reported as missing; the episode then times out
as incomplete, with its raw rows, unless the uploader re-sends it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pi_jobs.stream._records import SourceMessage

log = logging.getLogger("pi_jobs.stream")

# How long a recovery read waits for the broker before it reports what it did not find.
REFETCH_TIMEOUT_S = 60.0
STATE_NAME = "pilake-held-positions"


def held_positions_descriptor() -> Any:
    """The ListState descriptor of the positions (partition, offset) held under one key."""
    from pyflink.common import Types
    from pyflink.datastream.state import ListStateDescriptor

    return ListStateDescriptor(STATE_NAME, Types.TUPLE([Types.INT(), Types.LONG()]))


def lone_position(partition: int, offset: int) -> tuple[int, int]:
    """The held form of a message refused on its own: the partition as `-1 - partition`.

    Example:
        >>> lone_position(0, 12), split_held([(0, 11), (-1, 12)])
        ((-1, 12), ([(0, 11), (0, 12)], {(0, 12)}))
    """
    return (-1 - int(partition), int(offset))


def split_held(held: Iterable[Any]) -> tuple[list[tuple[int, int]], set[tuple[int, int]]]:
    """Held state as real positions (each once, in order) and the set of those held as lone."""
    positions: set[tuple[int, int]] = set()
    lone: set[tuple[int, int]] = set()
    for p, o in held:
        position = (int(p), int(o)) if int(p) >= 0 else (-1 - int(p), int(o))
        positions.add(position)
        if int(p) < 0:
            lone.add(position)
    return sorted(positions), lone


@dataclass(frozen=True, slots=True)
class Refetched:
    """The messages a recovery read found again, in (partition, offset) order, and the
    positions it did not find."""

    messages: tuple[SourceMessage, ...]
    missing: tuple[tuple[int, int], ...]


def refetch(
    *,
    bootstrap_servers: str,
    client_options: Mapping[str, str],
    topic: str,
    key: str,
    positions: Iterable[tuple[int, int]],
    timeout_s: float = REFETCH_TIMEOUT_S,
) -> Refetched:
    """Read the messages at `positions` of `topic` again (a consumer of its own, no group offsets).

    Example:
        >>> found = refetch(bootstrap_servers="127.0.0.1:19092", client_options={},
        ...                 topic="episodes.raw.v1", key="r1-000001", positions=[(0, 12), (0, 13)])
        >>> [m.offset for m in found.messages], found.missing
        ([12, 13], ())
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    wanted = sorted(set(positions))
    if not wanted:
        return Refetched((), ())
    last: dict[int, int] = {}
    first: dict[int, int] = {}
    for partition, offset in wanted:
        first.setdefault(partition, offset)
        last[partition] = offset
    consumer = Consumer(
        {
            **client_options,
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"pilake-refetch-{uuid.uuid4()}",  # never committed: reads only
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # an offset retention deleted: start at the earliest kept; the position is missing
            "auto.offset.reset": "earliest",
        }
    )
    wanted_set = set(wanted)
    found: dict[tuple[int, int], SourceMessage] = {}
    done: set[int] = set()
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in first.items()])
        deadline = time.monotonic() + timeout_s
        while len(done) < len(first) and time.monotonic() < deadline:
            record = consumer.poll(0.5)
            if record is None:
                continue
            error = record.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    done.add(int(record.partition() or 0))
                    continue
                log.warning("recovery read of %s: %s", key, error)
                continue
            partition, offset = int(record.partition() or 0), int(record.offset() or 0)
            if (partition, offset) in wanted_set:
                kind, ms = record.timestamp()
                found[(partition, offset)] = SourceMessage(
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    received_at_ns=time.time_ns(),
                    key=key,
                    value=bytes(record.value() or b""),
                    published_at_ns=int(ms) * 1_000_000 if kind != 0 and ms is not None else None,
                )
            if offset >= last.get(partition, -1):
                done.add(partition)
    finally:
        consumer.close()
    missing = tuple(p for p in wanted if p not in found)
    return Refetched(tuple(found[p] for p in wanted if p in found), missing)
