"""The attack benchmark (`python -m benchmarks.attack.run`) run tiny, as a user runs it: one case
of every mutation class and a few valid episodes through the real broker and `pilake stream`,
a quiet leg beside it. Checks the JSON's shape and that the bound held; no timing asserts.

Tests never import `benchmarks` (pyproject's import contracts): they run its command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def test_a_tiny_attack_reports_the_bound_and_freshness(tmp_path: Path) -> None:
    from pi_jobs.local.faults import MUTATIONS

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    out = tmp_path / "out"
    command = [sys.executable, "-m", "benchmarks.attack.run", "--cases", str(len(MUTATIONS))]
    command += ["--valid", "3", "--flood-keys", "5", "--seed", "11", "--out", str(out)]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads((out / "attack.json").read_text())
    assert doc["bound_held"] is True and doc["seed"] == 11
    attack, quiet = doc["legs"]["attack"], doc["legs"]["quiet"]
    assert set(attack["cases_by_mutation"]) == set(MUTATIONS)
    assert quiet["size"]["cases"] == 0 and quiet["failure_count"] == attack["failure_count"] == 0
    for leg in (attack, quiet):
        assert 0 < leg["peak_worker_rss_bytes"] < doc["rss_bound_bytes"]
        assert leg["freshness_s"]["repeats"] == 3  # one value per valid episode
        assert leg["audit"]["ok"] and leg["rss_timeline"]
    assert attack["limits_acted"].get("max_chunks_per_episode", 0) >= 1
    assert "bound held: True" in proc.stdout
    assert (out / "attack.png").stat().st_size > 0
