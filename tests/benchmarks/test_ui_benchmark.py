"""The UI benchmark (`python -m benchmarks.ui.run`) on a tiny lake, run as a user runs it: every
page measured at two catalog sizes, the JSON's figures and the PNG. No timing asserts: the exit
code says whether every page met 1 s, and must agree with the JSON.

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
    "video_cached",
    "quarantine",
    "pins",
}


def test_every_page_is_measured_at_each_catalog_size(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "benchmarks.ui.run", "--lake-episodes", "60", "--sizes", "60,400"]
    command += ["--repeats", "3", "--out", str(tmp_path / "out"), "--workdir", str(tmp_path / "work")]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    result = json.loads((tmp_path / "out" / "ui.json").read_text())
    assert proc.returncode == (0 if result["all_pages_under_target"] else 1), (
        proc.stdout[-4000:] + proc.stderr[-4000:]
    )
    assert set(result["sizes"]) == {"60", "400"}
    assert result["sizes"]["400"]["catalog_episodes"] == 400
    for size in result["sizes"].values():
        assert set(size["pages"]) == PAGES | {"video_cold_remux"}
        for page in size["pages"].values():
            seconds = page["seconds"]
            assert seconds["repeats"] == 3 and 0 < seconds["min"] <= seconds["median"] <= seconds["max"]
            assert page["target"]["verdict"] in ("met", "missed", "undecided")
            assert page["response_bytes"] > 0
    assert set(result["growth"]) == PAGES | {"video_cold_remux"}
    assert (tmp_path / "out" / "ui.png").stat().st_size > 0
    assert "target < 1 s" in proc.stdout
