"""What a run reads, as GC asks it (`pi_jobs.ops._run_files.read_pairs`): its snapshot's pairs and
the held-out pin it scores (`--eval-dataset`), which need not be in the snapshot at all."""

from __future__ import annotations

import json
from pathlib import Path

from pi_jobs.ops._run_files import read_pairs


def _write(out: Path, name: str, doc: object) -> None:
    (out / name).write_text(json.dumps(doc))


def test_a_held_out_pin_outside_the_snapshot_is_read_too(tmp_path: Path) -> None:
    _write(tmp_path, "snapshot.json", {"episode_ids": ["a", "b"], "attempt_ids": ["1", "1"]})
    _write(tmp_path, "eval_split.json", {"held_out": ["x"], "held_out_attempts": ["7"], "dataset": "val"})
    assert read_pairs(tmp_path) == (["a", "b", "x"], ["1", "1", "7"])


def test_a_split_recorded_without_attempts_adds_nothing(tmp_path: Path) -> None:
    _write(tmp_path, "snapshot.json", {"episode_ids": ["a"], "attempt_ids": ["1"]})
    _write(tmp_path, "eval_split.json", {"held_out": ["x"], "fraction": 0.1})
    assert read_pairs(tmp_path) == (["a"], ["1"])
