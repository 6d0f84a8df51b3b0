"""Where the raw topic really ends and where the job's consumer group stands (confluent-kafka,
driver side): what `until_idle` and the audit compare the sink's progress against."""

from __future__ import annotations

import time
import uuid
from typing import Any

from pi_jobs.errors import StreamJobError
from pi_jobs.stream.config import StreamJobConfig


def _consumer(config: StreamJobConfig, group_id: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            **config.client_options,
            "bootstrap.servers": config.bootstrap_servers,
            "group.id": group_id,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            "fetch.message.max.bytes": 16 * 1024 * 1024,
        }
    )


def true_end_offsets(config: StreamJobConfig, *, quiet_s: float = 1.0) -> dict[int, int]:
    """The real end offset (last offset + 1) of every partition of the raw topic.

    The broker's ListOffsets LATEST (the high watermark) is the start of the last batch + 1,
    wrong when a batch holds several records (ARCHITECTURE.md), so read forward from just
    before it until polls come back empty for `quiet_s`.
    """
    from confluent_kafka import TopicPartition

    consumer = _consumer(config, f"pilake-endprobe-{uuid.uuid4()}")
    try:
        meta = consumer.list_topics(config.raw_topic, timeout=10)
        topic = meta.topics.get(config.raw_topic)
        if topic is None or topic.error is not None:
            raise StreamJobError(f"raw topic {config.raw_topic!r} not found: {topic and topic.error}")
        ends: dict[int, int] = {}
        assign = []
        for p in sorted(topic.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(config.raw_topic, p), timeout=10)
            ends[p] = max(int(high), 0)
            if high > low:
                # high-1 is where the last batch starts; a margin costs a few re-read records
                assign.append(TopicPartition(config.raw_topic, p, max(int(low), int(high) - 8)))
        if assign:
            consumer.assign(assign)
            quiet_since = time.monotonic()
            while time.monotonic() - quiet_since < quiet_s:
                msgs = consumer.consume(num_messages=500, timeout=0.2)
                for m in msgs:
                    if m.error() is None:
                        ends[m.partition()] = max(ends[m.partition()], m.offset() + 1)
                if msgs:
                    quiet_since = time.monotonic()
        return ends
    finally:
        consumer.close()


def committed_offsets(config: StreamJobConfig, partitions: list[int]) -> dict[int, int]:
    """Offsets the job's consumer group has committed (where this run starts); -1 if none."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(config, config.group_id)
    try:
        tps = consumer.committed([TopicPartition(config.raw_topic, p) for p in partitions], timeout=10)
        return {tp.partition: (tp.offset if tp.offset >= 0 else -1) for tp in tps}
    finally:
        consumer.close()
