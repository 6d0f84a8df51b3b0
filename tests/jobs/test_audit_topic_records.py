"""`pilake audit` names every record of the raw topic that reached neither raw nor quarantine
(pi_jobs.ops._topic_records; issue 31: a message that crashed the stream job was in neither,
and the audit said OK)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from pi_format import LakeLayout
from pi_jobs.ops._topic_records import TopicRecord, read_topic_records, topic_unaccounted, unaccounted
from pi_jobs.ops.audit import AuditInputs, audit, format_report, reconcile


def test_a_record_no_table_names_is_missing() -> None:
    # the killer message: its key appears nowhere but on the topic
    lost = unaccounted([TopicRecord(0, 5, "killer"), TopicRecord(1, 0, "a")], {(1, 0)}, "raw")
    r = reconcile(AuditInputs(raw_episode_ids=["a"], visible_rows=[("a", "1")], unaccounted=lost))
    assert (r.episodes_in, r.visible, r.missing, r.missing_ids) == (2, 1, 1, ("killer",))
    assert r.topic_records_unaccounted == 1 and r.unaccounted_records == ("0:5 key=killer",)
    assert not r.ok
    assert "topic records in neither raw nor quarantine: 1  [0:5 key=killer]" in format_report(r)


def test_a_keyless_record_without_a_raw_row_is_missing_by_offset() -> None:
    lost = unaccounted([TopicRecord(2, 7, None)], set(), "raw")
    r = reconcile(AuditInputs(unaccounted=lost))
    assert r.missing_ids == ("kafka:raw/2/7",) and not r.ok


def test_a_lost_record_of_an_episode_committed_later_is_counted_not_failed() -> None:
    # e.g. a partial first send held in memory when the job was stopped, then re-sent and committed
    lost = unaccounted([TopicRecord(0, 1, "a")], set(), "raw")
    r = reconcile(AuditInputs(raw_episode_ids=["a"], visible_rows=[("a", "1")], unaccounted=lost))
    assert r.ok and r.missing == 0 and r.topic_records_unaccounted == 1


def test_records_not_read_say_so() -> None:
    r = reconcile(AuditInputs(visible_rows=[("a", "1")], raw_episode_ids=["a"]))
    assert r.topic_records_unaccounted is None
    assert "neither raw nor quarantine" not in format_report(r)


@pytest.mark.integration
def test_audit_reads_the_real_topic_record_by_record(broker: str, tmp_path: Path) -> None:
    """Records on a real broker, one of them with a raw row: the other two are named."""
    from confluent_kafka import Producer
    from pi_jobs.stream.config import StreamJobConfig

    topic = f"audit-records-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": broker})
    for key, value in ((b"e1", b"x"), (None, b"garbage"), (b"e2", b"y")):
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0
    config = StreamJobConfig(
        bootstrap_servers=broker,
        lake_root=str(tmp_path / "lake"),
        catalog_path=str(tmp_path / "catalog"),
        work_dir=tmp_path / "flink",
        jar_dir=tmp_path / "jars",
        raw_topic=topic,
        group_id=f"g-{topic}",
    )
    records = read_topic_records(config, {0: 3})
    assert [(r.partition, r.offset, r.key) for r in records] == [(0, 0, "e1"), (0, 1, None), (0, 2, "e2")]
    raw = pa.table({"kafka_topic": [topic], "kafka_partition": [0], "kafka_offset": [0]})
    found = topic_unaccounted(config, {0: 3}, raw)
    assert found.lines() == ("0:1 key=-", "0:2 key=e2")
    # the whole audit over an empty lake: both are missing, the audit fails
    report = audit(LakeLayout(str(tmp_path / "lake")), topic_config=config)
    assert report.topic_records_unaccounted == 3
    assert set(report.missing_ids) == {"e1", "e2", f"kafka:{topic}/0/1"} and not report.ok
