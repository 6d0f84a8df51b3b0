"""Unit tests of pi_jobs.stream.connector_jars (the download itself runs in the integration tests)."""

from __future__ import annotations

from pathlib import Path

from pi_jobs.stream.connector_jars import CONNECTOR_JARS, ensure_connector_jars


def test_present_jars_are_used_without_download(tmp_path: Path) -> None:
    for name in CONNECTOR_JARS.values():
        (tmp_path / name).write_bytes(b"PK jar")
    paths = ensure_connector_jars(tmp_path)
    assert [p.name for p in paths] == ["flink-connector-kafka.jar", "kafka-clients.jar"]
    assert all(p.read_bytes() == b"PK jar" for p in paths)  # untouched
