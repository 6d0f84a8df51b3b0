"""The JSON-line event log (pi_format.jsonlog): one parseable object per event, per file."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from pi_format.jsonlog import (
    EVENT_LOG_DIR_ENV,
    JsonLineFormatter,
    default_event_log,
    event_logger,
    log_event,
    read_events,
)


def test_event_line_has_envelope_and_fields(tmp_path: Path) -> None:
    path = tmp_path / "events" / "uploader.jsonl"  # parent made on demand
    log = event_logger("test.events.a", path, "uploader")
    log_event(log, "sent", episode_id="e1", attempt_id=None, messages=7, offsets=[[0, 3]])
    log_event(log, "quarantined", episode_id="e2", attempt_id="a2", level=logging.WARNING, reason="bad_magic")
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert {k: first[k] for k in ("level", "component", "event", "episode_id", "attempt_id")} == {
        "level": "info",
        "component": "uploader",
        "event": "sent",
        "episode_id": "e1",
        "attempt_id": None,
    }
    assert first["messages"] == 7 and first["offsets"] == [[0, 3]]
    assert isinstance(first["ts_ns"], int) and first["ts"].endswith("+00:00")
    assert second["level"] == "warning" and second["reason"] == "bad_magic" and second["attempt_id"] == "a2"
    assert second["ts_ns"] >= first["ts_ns"]


def test_fields_cannot_overwrite_envelope_and_odd_values_are_text() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "sent", None, None)
    record.pilake_event = {"event": "sent", "episode_id": "e1", "component": "evil", "path": Path("/a b")}
    doc = json.loads(JsonLineFormatter("stream").format(record))
    assert doc["component"] == "stream"
    assert doc["path"] == "/a b"


def test_plain_record_becomes_log_event_with_message() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "disk %s full", ("sda",), None)
    doc = json.loads(JsonLineFormatter("loader").format(record))
    got = (doc["event"], doc["message"], doc["level"], doc["episode_id"])
    assert got == ("log", "disk sda full", "error", None)


def test_empty_component_rejected() -> None:
    with pytest.raises(ValueError, match="component"):
        JsonLineFormatter("")


def test_same_path_one_handler_different_paths_separate(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    log_a = event_logger("test.events.b", a, "uploader")
    assert event_logger("test.events.b", a, "uploader") is log_a
    assert len(log_a.handlers) == 1
    log_b = event_logger("test.events.b", b, "uploader")
    log_event(log_a, "sent", episode_id="only-a", attempt_id=None)
    log_event(log_b, "sent", episode_id="only-b", attempt_id=None)
    assert [e["episode_id"] for e in read_events(a)] == ["only-a"]
    assert [e["episode_id"] for e in read_events(b)] == ["only-b"]


def test_no_path_is_off_and_silent(capsys: pytest.CaptureFixture[str]) -> None:
    logging.basicConfig(level=logging.INFO)  # an application that logs INFO to the console
    log = event_logger("test.events.off", None, "uploader")
    assert not log.isEnabledFor(logging.INFO)
    log_event(log, "sent", episode_id="e1", attempt_id=None)
    captured = capsys.readouterr()
    assert "e1" not in captured.err + captured.out


def test_default_event_log_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(EVENT_LOG_DIR_ENV, raising=False)
    assert default_event_log("uploader") is None
    monkeypatch.setenv(EVENT_LOG_DIR_ENV, str(tmp_path))
    path = default_event_log("uploader")
    assert path is not None and path.parent == tmp_path and path.name.startswith("uploader-")
    assert default_event_log("loader", tmp_path / "x") is not None


def test_read_events_skips_a_cut_line(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_text('{"event": "sent", "episode_id": "e1"}\n[1, 2]\n{"event": "ack')
    assert read_events(path) == [{"event": "sent", "episode_id": "e1"}]


def test_event_time_can_be_given(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    log = event_logger("test.events.ts", path, "stream")
    log_event(log, "committed", episode_id="e1", attempt_id="a1", ts_ns=1_700_000_000_123_456_789)
    (doc,) = read_events(path)
    assert doc["ts_ns"] == 1_700_000_000_123_456_789
    assert doc["ts"] == "2023-11-14T22:13:20.123457+00:00"
