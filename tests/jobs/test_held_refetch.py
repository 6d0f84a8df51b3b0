"""pi_jobs.stream._held.refetch on a real Tansu broker: the messages at the held positions come
back byte for byte with their timestamps, in order; positions the topic does not have are
reported missing, never invented."""

from __future__ import annotations

import uuid

import pytest


@pytest.mark.integration
def test_refetch_reads_back_held_positions_and_reports_missing(broker: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from pi_jobs.stream._held import refetch

    topic = f"held-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker, "enable.idempotence": True})
    sent: dict[tuple[int, int], tuple[bytes, int]] = {}

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        sent[(msg.partition(), msg.offset())] = (msg.value(), msg.timestamp()[1])  # type: ignore[attr-defined]

    for i in range(12):
        producer.produce(
            topic,
            key=f"ep-{i % 3}",
            value=f"chunk {i}".encode() * (i + 1),
            partition=i % 2,
            on_delivery=delivered,
        )
    assert producer.flush(30) == 0
    wanted = sorted(sent)[1::3]  # some of each partition, not contiguous
    beyond = (0, 10_000)  # an offset the partition never reached
    found = refetch(
        bootstrap_servers=broker,
        client_options={},
        topic=topic,
        key="ep-x",
        positions=[*wanted, beyond, wanted[0]],  # a duplicate position is read once
        timeout_s=30,
    )
    assert [(m.partition, m.offset) for m in found.messages] == wanted
    for m in found.messages:
        value, timestamp_ms = sent[(m.partition, m.offset)]
        assert m.value == value and m.key == "ep-x" and m.topic == topic
        assert m.published_at_ns == timestamp_ms * 1_000_000
    assert found.missing == (beyond,)
    assert (
        refetch(bootstrap_servers=broker, client_options={}, topic=topic, key="k", positions=[]).messages
        == ()
    )
