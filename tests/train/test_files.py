"""Atomic writes and JSONL logs that a resumed run cuts back to its checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pi_train import read_jsonl
from pi_train._files import JsonlLog, atomic_write


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.json"
    atomic_write(path, lambda f: f.write(b"old"))

    def fails(f) -> None:
        f.write(b"half")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        atomic_write(path, fails)
    assert path.read_bytes() == b"old"
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temporary left


def test_resumed_log_keeps_only_steps_up_to_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "steps.rank0.jsonl"
    with JsonlLog(path, keep_through_step=None) as log:
        for step in range(1, 8):
            log.write({"step": step, "loss": step / 10})
    with open(path, "a") as f:
        f.write('{"step": 8, "lo')  # torn by a SIGKILL
    with JsonlLog(path, keep_through_step=6) as log:
        log.write({"step": 7, "loss": 0.7})
    assert [r["step"] for r in read_jsonl(path)] == [1, 2, 3, 4, 5, 6, 7]
    with JsonlLog(path, keep_through_step=None):
        pass
    assert read_jsonl(path) == []
    log = JsonlLog(path, keep_through_step=None)
    log.close()
    with pytest.raises(ValueError, match="is closed"):
        log.write({"step": 1})


def test_read_jsonl_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_jsonl(tmp_path / "none.jsonl") == []
    (tmp_path / "x.jsonl").write_text(json.dumps([1, 2]) + "\n" + json.dumps({"step": 1}) + "\n")
    assert read_jsonl(tmp_path / "x.jsonl") == [{"step": 1}]
