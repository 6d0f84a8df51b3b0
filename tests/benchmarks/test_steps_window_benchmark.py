"""The steps-window benchmark (`python -m benchmarks.steps_window.run`) on tiny lakes, run as a
user runs it: one short episode featurized, written in both steps layouts, read cold. Checks the
JSON's figures and what the layout guarantees whatever the machine: a sample (50 steps of actions)
of an episode many row groups long reads fewer steps bytes from row groups of 64 steps than from
one row group per episode. No timing asserts.

Tests never import `benchmarks` (pyproject's import contracts): they run its command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_row_groups_of_64_steps_read_fewer_steps_bytes_than_one_per_episode(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "benchmarks.steps_window.run", "--durations", "12", "--px", "32"]
    command += ["--episodes", "24", "--samples", "24", "--repeats", "3", "--out", str(tmp_path / "out")]
    command += ["--work", str(tmp_path)]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads((tmp_path / "out" / "steps_window.json").read_text())
    (entry,) = result["durations"]
    assert entry["steps_per_episode"] == 600  # 12 s at 50 Hz: 10 row groups (9 of 64 steps)
    grouped, whole = entry["layouts"]["groups_of_64"], entry["layouts"]["one_per_episode"]
    for layout in (grouped, whole):
        assert layout["bytes_read_per_sample"] > layout["steps_bytes_per_sample"] > 0
        assert layout["read_vs_encoded_chunks"] > 0 and layout["cpu_ms_per_sample"]["min"] > 0
        assert layout["cpu_ms_per_sample"]["repeats"] == 3
    assert entry["cpu_groups_vs_one_per_episode"]["repeats"] == 3  # a ratio of interleaved legs
    assert grouped["steps_bytes_per_sample"] < whole["steps_bytes_per_sample"]
    assert (tmp_path / "out" / "steps_window.png").stat().st_size > 0
    assert "groups_of_64" in proc.stdout and "one_per_episode" in proc.stdout
