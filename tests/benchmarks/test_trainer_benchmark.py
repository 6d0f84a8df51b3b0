"""The trainer benchmarks' command lines (`benchmarks.trainer.run` and `.scaling`, sharing
`benchmarks.trainer._legs`): what cannot give a median with its spread is refused before any
lake is built or leg run. The legs themselves are pi_train runs, tested in tests/train.

Tests never import `benchmarks` (pyproject's import contracts): they run its commands.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*argv: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", *argv, "--out", str(out)], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("module", ["benchmarks.trainer.run", "benchmarks.trainer.scaling"])
@pytest.mark.parametrize("repeats", ["2", "0", "-1"])
def test_fewer_than_three_repeats_are_refused(module: str, repeats: str, tmp_path: Path) -> None:
    done = _run(module, "--quick", "--repeats", repeats, out=tmp_path / "out")
    assert done.returncode == 2
    assert f"--repeats must be >= 3 (a median with its spread), got {repeats}" in done.stderr
    assert not (tmp_path / "out").exists(), "refused before anything is written"


def test_scaling_without_one_process_is_refused(tmp_path: Path) -> None:
    done = _run("benchmarks.trainer.scaling", "--quick", "--nproc", "2,4", out=tmp_path / "out")
    assert done.returncode == 2
    assert "--nproc must include 1 (the base of the efficiency), got '2,4'" in done.stderr
