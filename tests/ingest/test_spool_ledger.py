"""The spool's ledger: the durable history of what an uploader produced (read by `pilake audit`)."""

from __future__ import annotations

from pathlib import Path

from pi_ingest import Spool, read_ledger
from pi_ingest.spool import LEDGER_NAME

MESSAGES = [b"first message", b"manifest"]


def test_submit_and_confirm_are_recorded_and_outlive_the_entry(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.add("ep-1", MESSAGES)
    spool.add("ep-1", MESSAGES)  # idempotent re-add of a pending entry: no second line
    spool.add("ep-2", MESSAGES[:1])
    assert spool.confirm("ep-1", status="quarantined", attempt_id="a-1") is True
    assert spool.confirm("ep-1") is False  # not spooled any more: nothing recorded
    events = read_ledger(tmp_path)
    assert [(e.event, e.episode_id) for e in events] == [
        ("submitted", "ep-1"),
        ("submitted", "ep-2"),
        ("confirmed", "ep-1"),
    ]
    first, _, confirmed = events
    assert (first.message_count, first.size_bytes) == (2, sum(len(m) for m in MESSAGES))
    assert len(first.sha256) == 64
    assert (confirmed.status, confirmed.attempt_id) == ("quarantined", "a-1")
    assert spool.get("ep-1") is None  # the entry is gone, its history is not


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.add("ep-1", MESSAGES)
    with open(tmp_path / LEDGER_NAME, "ab") as f:
        f.write(b'{"event": "submitted", "episode_id": "ep-')  # killed mid-append
    assert [e.episode_id for e in read_ledger(tmp_path)] == ["ep-1"]
    spool.add("ep-2", MESSAGES)  # the next line is not glued to the torn one
    assert [e.episode_id for e in read_ledger(tmp_path)] == ["ep-1", "ep-2"]


def test_restart_adds_the_line_a_crash_inside_add_lost(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.add("ep-1", MESSAGES)
    spool.add("ep-2", MESSAGES)
    (tmp_path / LEDGER_NAME).unlink()  # as if killed after the state file, before the ledger line
    Spool(tmp_path)
    Spool(tmp_path)  # a second start finds both lines and adds nothing
    assert sorted(e.episode_id for e in read_ledger(tmp_path)) == ["ep-1", "ep-2"]


def test_no_ledger_reads_empty(tmp_path: Path) -> None:
    assert read_ledger(tmp_path / "nowhere") == []
