"""`benchmarks._figures`, the one rule for reported figures (median and spread of >= 3
interleaved repeats; a target met only when the whole spread clears it), run as a command:
its examples are its tests (tests never import benchmarks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_rules_examples_hold() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "doctest", "-v", "benchmarks/_figures.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # the examples that pin the rule ran: straddling is undecided, 2 repeats are refused
    assert "'undecided'" in done.stdout and "FiguresError" in done.stdout
    assert " 0 failed" in done.stdout
