"""`python -m benchmarks.scale.cold_open_profile` run as a user runs it on a small lake: the open's
steps are named with their cumulative seconds, the open path's functions are found (a renamed
one would show as null), and a lake that is not there fails with the open's own error.

Tests never import `benchmarks` (pyproject's import contracts): they run its command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures.lake_factory import write_lake

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "benchmarks.scale.cold_open_profile", *args]
    return subprocess.run(
        command, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_profile_names_the_open_paths_steps(tmp_path: Path) -> None:
    fake = write_lake(tmp_path / "lake", episodes=4, steps=3, cameras=("front",), size=(16, 16), group=1)
    done = _run("--lake", fake.layout.root, "--out", str(tmp_path / "p.json"), "--horizon", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "p.json").read_text())
    assert result["episodes"] == 4 and result["episodes_files"] >= 4 and result["open_s"] > 0
    assert result["open_warm_host_s"] > 0
    steps = {s["function"]: s["s"] for s in result["steps"]}
    # the page walk runs in a thread cProfile does not see; every other step is on this path
    found = [f for f, s in steps.items() if s is not None]
    for function in (
        "samples/_dataset.py:__init__",
        "selection/_selection.py:select_episodes",
        "reading/_lake.py:_read",
        "lake/visibility.py:latest_commits",
        "reading/_lake.py:pooled_stats",
        "reading/_locators.py:from_rows",
    ):
        assert function in found, (function, steps)


def test_a_missing_lake_fails_with_the_reason(tmp_path: Path) -> None:
    done = _run("--lake", str(tmp_path / "nothing"))
    assert done.returncode != 0 and done.stderr.strip()
