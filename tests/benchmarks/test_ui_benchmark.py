"""The UI benchmark (`python -m benchmarks.ui.run`) on a tiny lake, run as a user runs it: every
page measured on a real lake at two sizes (the second grown in bulk group commits, compacted,
then a tail of the sink's small group commits), the JSON's figures and the PNG. No timing
asserts: the exit code says whether every page met 1 s, and must agree with the JSON.

Tests never import `benchmarks` (pyproject's import contracts): they run its command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = {
    "overview",
    "query",
    "query_page_100",
    "query_group_by",
    "episode",
    "episode_latest",
    "episode_cold",
    "video_cached",
    "video_cold_remux",
    "quarantine",
    "quarantine_last_page",
    "pins",
    "episodes",
    "episodes_filtered",
    "episode_from_list",
    "dataset_all",
    "dataset_sql",
    "dataset_pin",
}


def test_every_page_is_measured_on_a_real_lake_at_each_size(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "benchmarks.ui.run", "--sizes", "60,400"]
    command += ["--bulk-group", "100", "--tail-episodes", "64"]
    command += ["--repeats", "3", "--out", str(tmp_path / "out"), "--workdir", str(tmp_path / "work")]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    result = json.loads((tmp_path / "out" / "ui.json").read_text())
    assert proc.returncode == (0 if result["all_pages_under_target"] else 1), (
        proc.stdout[-4000:] + proc.stderr[-4000:]
    )
    assert set(result["sizes"]) == {"60", "400"}
    large = result["sizes"]["400"]["lake"]
    assert large["episodes"] + large["quarantined"] == 400 and large["quarantined"] == 4
    # bulk group commits, the project's compaction, then the uncompacted tail of the sink's groups
    assert [p["phase"] for p in large["phases"]] == ["tail", "bulk", "compact", "tail"]
    assert large["phases"][1]["group_commit_episodes"] == 100
    assert large["phases"][3] == {**large["phases"][3], "episodes": 64, "group_commit_episodes": 32}
    assert large["tables"]["steps"]["data_files"] >= 3  # compacted group(s) plus the tail's files
    assert result["sizes"]["400"]["pins"]["all-400"] == 396
    for size in result["sizes"].values():
        assert set(size["pages"]) == PAGES
        for page in size["pages"].values():
            seconds = page["seconds"]
            assert seconds["repeats"] == 3 and 0 < seconds["min"] <= seconds["median"] <= seconds["max"]
            assert page["target"]["verdict"] in ("met", "missed", "undecided")
            assert page["response_bytes"] > 0
    assert set(result["growth"]) == PAGES
    assert (tmp_path / "out" / "ui.png").stat().st_size > 0
    assert "target < 1 s" in proc.stdout
