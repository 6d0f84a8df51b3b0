"""benchmarks/gpu_host/decode.py dry-runs its CPU legs on a host without a GPU: interleaved
spreads for each size and batch, the GPU leg skipped with what is missing named, no GPU win
claimed; on a GPU host the GPU leg runs beside them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pi_loader.decoding import gpu_unavailable_reason

ROOT = Path(__file__).resolve().parents[2]


def test_the_cpu_legs_dry_run_and_the_gpu_leg_says_why_it_is_skipped(tmp_path: Path) -> None:
    # tests never import benchmarks (an import-linter contract): run it as its users do
    command = [sys.executable, "-m", "benchmarks.gpu_host.decode", "--out", str(tmp_path)]
    command += ["--sizes", "64x48,96x64", "--batches", "4,8", "--workers", "1", "--measure-s", "0.02"]
    command += ["--chunks", "2", "--repeats", "3"]
    missing = gpu_unavailable_reason()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / "gpu_decode.json").read_text())
    assert sorted(result["legs"]) == ["64x48_b4", "64x48_b8", "96x64_b4", "96x64_b8"]
    for entry in result["legs"].values():
        for leg in ("cpu_pool_samples_per_s", "cpu_1_samples_per_s"):
            assert entry[leg]["repeats"] == 3 and entry[leg]["min"] > 0
        if missing is not None:
            assert "gpu_samples_per_s" not in entry and "gpu_over_cpu_pool" not in entry
        else:  # a GPU host: the GPU leg ran beside the CPU legs, its ratio judged
            assert entry["gpu_samples_per_s"]["repeats"] == 3 and "verdict" in entry["gpu_wins"]
    if missing is not None:
        assert result["gpu"] == f"skipped: {missing}" and result["gpu_wins"] == []
