"""`python -m benchmarks.scale._compact`, production's compaction of an uncompacted grown lake in
windows that each commit, run as a user runs it on a lake of one episodes file per episode:
each window is one commit of its own, `--max-windows` and a stop file leave whole windows
committed (the rest still small, planned again by the next run), the loader reads the same
episodes and samples after it, and a window of one group is refused by name.

Tests never import `benchmarks` (pyproject's import contracts): they run its command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pi_loader
from deltalake import DeltaTable

from tests.fixtures.lake_factory import write_lake

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}


def _compact(lake: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "benchmarks.scale._compact", "--lake", str(lake), *args]
    return subprocess.run(
        command, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300, check=False
    )


def _files(lake: Path, table: str) -> int:
    return len(DeltaTable(str(lake / table)).file_uris())


def _samples(lake: Path) -> tuple[list[str], list[np.ndarray]]:
    ds = pi_loader.Dataset(str(lake), seed=3, action_horizon=2)
    return list(ds.episode_ids), [np.asarray(ds[i]["observation.state"]) for i in range(0, len(ds), 7)]


def test_windows_commit_one_by_one_and_the_loader_reads_the_same(tmp_path: Path) -> None:
    fake = write_lake(tmp_path / "lake", episodes=7, steps=4, cameras=("front",), size=(16, 16), group=1)
    lake = Path(fake.layout.root)
    before_ids, before = _samples(lake)
    files = _files(lake, "episodes")
    log = lake / "episodes" / "_delta_log"
    commits = len(list(log.glob("*.json")))
    stop = tmp_path / "stop"
    first = _compact(lake, "--window-groups", "2", "--max-windows", "1", "--json", str(tmp_path / "a.json"))
    assert first.returncode == 0, first.stderr[-3000:]
    figures = json.loads((tmp_path / "a.json").read_text())
    assert len(figures["windows"]) == 1 and figures["windows"][0]["groups"] == 2
    assert _files(lake, "episodes") == files - 1
    assert len(list(log.glob("*.json"))) == commits + 1
    stop.touch()  # a stop file present: no window runs, nothing changes
    stopped = _compact(lake, "--window-groups", "2", "--stop-file", str(stop))
    assert stopped.returncode == 0 and "found before window 1" in stopped.stdout
    assert _files(lake, "episodes") == files - 1
    stop.unlink()
    rest = _compact(lake, "--window-groups", "2", "--json", str(tmp_path / "b.json"))
    assert rest.returncode == 0, rest.stderr[-3000:]
    assert _files(lake, "episodes") < files - 1
    assert len(list(log.glob("*.json"))) == commits + 1 + len(
        json.loads((tmp_path / "b.json").read_text())["windows"]
    )
    after_ids, after = _samples(lake)
    assert after_ids == before_ids
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_window_of_one_group_is_refused(tmp_path: Path) -> None:
    fake = write_lake(tmp_path / "lake", episodes=2, steps=3, cameras=("front",), size=(16, 16), group=1)
    done = _compact(Path(fake.layout.root), "--window-groups", "1")
    assert done.returncode != 0 and "window_groups must be >= 2" in done.stderr
