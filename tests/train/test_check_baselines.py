"""`python -m benchmarks.check_baselines`: compares ratios, never absolute figures, and fails
naming the ratio and by how much. Run as a command (tests never import benchmarks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.train.conftest import REPO, child_env


def _spread(*values: float) -> dict:
    """A ratio as the benchmarks write it (benchmarks._figures): median and spread of repeats."""
    ordered = sorted(values)
    return {
        "median": ordered[len(ordered) // 2],
        "min": ordered[0],
        "max": ordered[-1],
        "repeats": len(values),
        "values": list(values),
    }


def _trainer(speedup: dict, not_waiting: dict, samples_per_s: float) -> dict:
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
    # 10x slower in absolute terms (another machine), the whole spread within 25%: passes
    base = _trainer(_spread(1.1, 1.2, 1.3), _spread(0.85, 0.9, 0.95), 100.0)
    done = _check(tmp_path, "trainer", base, _trainer(_spread(1.0, 1.05, 1.1), _spread(0.8, 0.82, 0.9), 10.0))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every ratio within 25%" in done.stdout


def test_a_regressed_ratio_fails_naming_it_by_how_much_and_its_spread(tmp_path: Path) -> None:
    base = _trainer(_spread(1.1, 1.2, 1.3), _spread(0.85, 0.9, 0.95), 100.0)
    done = _check(tmp_path, "trainer", base, _trainer(_spread(1.1, 1.2, 1.3), _spread(0.4, 0.45, 0.5), 100.0))
    assert done.returncode == 1
    assert (
        "ratios.torch.not_waiting_2_workers regressed by 50%: 0.45 (0.4–0.5) now vs 0.9 (0.85–0.95) in the "
        "baseline; its whole spread is past the bound 0.675" in done.stderr
    ), done.stderr
    assert "speedup" not in done.stderr
    looser = _check(
        tmp_path,
        "trainer",
        base,
        _trainer(_spread(1.1, 1.2, 1.3), _spread(0.4, 0.45, 0.5), 100.0),
        "--tolerance",
        "0.6",
    )
    assert looser.returncode == 0, looser.stdout + looser.stderr


def test_a_spread_that_straddles_the_bound_is_not_a_pass(tmp_path: Path) -> None:
    # median 0.8 is within 25% of 0.9 (bound 0.675), but one repeat fell below it: undecided
    base = _trainer(_spread(1.1, 1.2, 1.3), _spread(0.85, 0.9, 0.95), 100.0)
    noisy = _trainer(_spread(1.1, 1.2, 1.3), _spread(0.6, 0.8, 0.85), 100.0)
    done = _check(tmp_path, "trainer", base, noisy)
    assert done.returncode == 1
    assert "its spread straddles (rerun with more repeats) the bound 0.675" in done.stderr, done.stderr


def test_a_figure_without_spread_is_never_compared(tmp_path: Path) -> None:
    legacy = {"legacy": 1.2, "needs_rerun": "one run"}
    base = _trainer(legacy, _spread(0.85, 0.9, 0.95), 100.0)
    now = _trainer(_spread(1.1, 1.2, 1.3), _spread(0.85, 0.9, 0.95), 100.0)
    done = _check(tmp_path, "trainer", base, now)
    assert done.returncode == 0, done.stderr
    assert "baseline has no spread: rerun it (skipped)" in done.stdout
    # a rerun that reports a bare number (one run) fails: it is not a median with its spread
    bare = _trainer(1.2, _spread(0.85, 0.9, 0.95), 100.0)  # type: ignore[arg-type]
    done = _check(tmp_path, "trainer", now, bare)
    assert done.returncode == 1 and "FAIL: no spread (< 3 repeats)" in done.stdout, done.stdout
    # two repeats dressed as a spread are refused too
    two = dict(_spread(1.1, 1.2, 1.3), values=[1.1, 1.3], repeats=2)
    done = _check(tmp_path, "trainer", now, _trainer(two, _spread(0.85, 0.9, 0.95), 100.0))
    assert done.returncode == 1 and "at least 3 are needed" in done.stderr, done.stderr


def test_a_baseline_with_no_spread_at_all_is_not_a_pass(tmp_path: Path) -> None:
    legacy = {"legacy": 1.2, "needs_rerun": "one run"}
    now = _trainer(_spread(1.1, 1.2, 1.3), _spread(0.85, 0.9, 0.95), 100.0)
    done = _check(tmp_path, "trainer", _trainer(legacy, legacy, 100.0), now)
    assert done.returncode == 2 and "no ratio compared" in done.stderr, done.stdout + done.stderr


def test_lower_is_better_ratios_and_missing_ones(tmp_path: Path) -> None:
    base = {
        "throughput": {
            "ratios": {
                "2": {
                    "pi_loader_vs_lerobot": _spread(9, 10, 11),
                    "pi_loader_vs_limit": _spread(0.8, 0.8, 0.8),
                }
            },
            "bytes_per_sample": {"read_vs_encoded_chunks": 1.1},  # a count: one number is exact
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
