"""`python -m benchmarks.check_baselines`: compares ratios, never absolute figures, and fails
naming the ratio and by how much. Run as a command (tests never import benchmarks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.train.conftest import REPO, child_env


def _trainer(speedup: float, not_waiting: float, samples_per_s: float) -> dict:
    ratios = {"speedup_2_vs_0_workers": speedup, "not_waiting_2_workers": not_waiting}
    return {
        "mode": "quick",
        "legs": [{"samples_per_s": samples_per_s}],
        "ratios": {"torch": ratios, "jax": ratios},
    }


def _check(tmp_path: Path, name: str, baseline: dict | None, current: dict, *extra: str):
    base, now = tmp_path / "baseline.json", tmp_path / "current.json"
    if baseline is not None:
        base.write_text(json.dumps(baseline))
    now.write_text(json.dumps(current))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.check_baselines",
            name,
            "--baseline",
            str(base),
            "--current",
            str(now),
            *extra,
        ],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_within_tolerance_passes_whatever_the_absolute_figures(tmp_path: Path) -> None:
    # 10x slower in absolute terms (another machine), the same ratios: passes
    done = _check(tmp_path, "trainer", _trainer(1.2, 0.9, 100.0), _trainer(1.0, 0.8, 10.0))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every ratio within 25%" in done.stdout


def test_a_regressed_ratio_fails_naming_it_and_by_how_much(tmp_path: Path) -> None:
    done = _check(tmp_path, "trainer", _trainer(1.2, 0.9, 100.0), _trainer(1.2, 0.45, 100.0))
    assert done.returncode == 1
    assert (
        "ratios.torch.not_waiting_2_workers regressed by 50%: 0.45 now vs 0.9 in the baseline" in done.stderr
    )
    assert "speedup" not in done.stderr
    looser = _check(
        tmp_path, "trainer", _trainer(1.2, 0.9, 100.0), _trainer(1.2, 0.45, 100.0), "--tolerance", "0.6"
    )
    assert looser.returncode == 0


def test_lower_is_better_ratios_and_missing_ones(tmp_path: Path) -> None:
    base = {
        "throughput": {
            "ratios": {"2": {"pi_loader_vs_lerobot": 10.0, "pi_loader_vs_limit": 0.8}},
            "bytes_per_sample": {"read_vs_encoded_chunks": 1.1},
        }
    }
    worse = json.loads(json.dumps(base))
    worse["throughput"]["bytes_per_sample"]["read_vs_encoded_chunks"] = 1.5
    del worse["throughput"]["ratios"]["2"]["pi_loader_vs_limit"]
    done = _check(tmp_path, "scale", base, worse)
    assert done.returncode == 1
    assert "read_vs_encoded_chunks regressed by 36%" in done.stderr
    assert "pi_loader_vs_limit was not measured in this run" in done.stderr


def test_no_baseline_is_exit_2(tmp_path: Path) -> None:
    done = _check(tmp_path, "loader", None, {"ratios": {}})
    assert done.returncode == 2 and "no baseline" in done.stderr
