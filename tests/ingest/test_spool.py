"""Tests of the durable spool: add/confirm/mark_sent, restart, crash leftovers, conflicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pi_format.wire import write_bundle
from pi_ingest import Spool, SpoolError

MESSAGES = [b"first message", b"second", b"manifest \x00\x01"]


def test_add_get_messages(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    entry = spool.add("ep-1", MESSAGES)
    assert entry.episode_id == "ep-1"
    assert entry.message_count == 3
    assert entry.size_bytes == sum(len(m) for m in MESSAGES)
    assert entry.attempts == 0 and entry.last_sent_ns is None
    assert entry.bundle_path.exists()
    assert spool.get("ep-1") == entry
    assert spool.get("ep-2") is None
    assert spool.messages("ep-1") == MESSAGES
    assert len(spool) == 1


def test_add_is_idempotent_for_same_bytes(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    first = spool.add("ep-1", MESSAGES)
    spool.mark_sent("ep-1", 123)
    again = spool.add("ep-1", list(MESSAGES))
    assert again.attempts == 1 and again.last_sent_ns == 123  # the existing entry, untouched
    assert again.bundle_path == first.bundle_path
    assert len(spool) == 1


def test_add_conflict(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.add("ep-1", MESSAGES)
    with pytest.raises(SpoolError, match="already spooled with different bytes"):
        spool.add("ep-1", [*MESSAGES[:2], b"other manifest"])
    assert spool.messages("ep-1") == MESSAGES


def test_add_validation(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    with pytest.raises(ValueError, match="episode_id must be"):
        spool.add("../escape", MESSAGES)
    with pytest.raises(ValueError, match="at least one message"):
        spool.add("ep-1", [])


def test_mark_sent_and_confirm(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.add("ep-1", MESSAGES)
    spool.add("ep-2", MESSAGES[:1])
    e = spool.mark_sent("ep-1", 1_000)
    e = spool.mark_sent("ep-1", 2_000)
    assert (e.attempts, e.last_sent_ns) == (2, 2_000)
    assert spool.get("ep-1") == e
    assert spool.confirm("ep-1") is True
    assert spool.confirm("ep-1") is False
    assert spool.get("ep-1") is None
    assert [x.episode_id for x in spool.entries()] == ["ep-2"]
    with pytest.raises(KeyError, match="ep-1"):
        spool.mark_sent("ep-1", 3_000)
    with pytest.raises(KeyError, match="ep-1"):
        spool.messages("ep-1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep-2.json", "ep-2.piep", "ledger.jsonl"]


def test_entries_sorted_by_spool_time(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    for eid in ("c", "a", "b"):
        spool.add(eid, [eid.encode()])
    assert [e.episode_id for e in spool.entries()] == ["c", "a", "b"]


def test_restart_sees_entries(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.add("ep-1", MESSAGES)
    spool.add("ep-2", MESSAGES[:2])
    spool.mark_sent("ep-2", 42)
    del spool
    again = Spool(tmp_path)
    entries = {e.episode_id: e for e in again.entries()}
    assert set(entries) == {"ep-1", "ep-2"}
    assert entries["ep-2"].attempts == 1 and entries["ep-2"].last_sent_ns == 42
    assert again.messages("ep-2") == MESSAGES[:2]


def test_leftover_tmp_files_are_ignored_and_removed(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.add("ep-1", MESSAGES)
    # A crash in the middle of write_bundle / a state write leaves *.tmp files behind.
    (tmp_path / "ep-9.piep.tmp").write_bytes(b"PIBUNDL1\x00\x00")
    (tmp_path / "ep-1.json.tmp").write_bytes(b'{"half": ')
    assert [e.episode_id for e in spool.entries()] == ["ep-1"]
    again = Spool(tmp_path)
    assert [e.episode_id for e in again.entries()] == ["ep-1"]
    assert not list(tmp_path.glob("*.tmp"))


def test_crash_between_bundle_and_state_recovers_the_bundle(tmp_path: Path) -> None:
    # Killed inside add(): the bundle is on disk, its state file is not.
    write_bundle(tmp_path / "ep-7.piep", MESSAGES)
    spool = Spool(tmp_path)
    entry = spool.get("ep-7")
    assert entry is not None and entry.attempts == 0 and entry.last_sent_ns is None
    assert spool.messages("ep-7") == MESSAGES


def test_orphan_state_is_garbage(tmp_path: Path) -> None:
    # Killed inside confirm(): the bundle is gone, its state file is not.
    spool = Spool(tmp_path)
    spool.add("ep-1", MESSAGES)
    (tmp_path / "ep-1.piep").unlink()
    assert spool.get("ep-1") is None
    assert len(spool) == 0
    Spool(tmp_path)
    assert not (tmp_path / "ep-1.json").exists()


def test_damaged_bundle_is_reported(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.add("ep-1", MESSAGES)
    path = tmp_path / "ep-1.piep"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(SpoolError, match="does not match its recorded digest"):
        spool.messages("ep-1")


def test_state_file_is_json(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.add("ep-1", MESSAGES)
    doc = json.loads((tmp_path / "ep-1.json").read_text())
    assert doc["message_count"] == 3 and doc["attempts"] == 0 and doc["last_sent_ns"] is None
    assert doc["first_spooled_ns"] > 0
