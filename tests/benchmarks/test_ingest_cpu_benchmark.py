"""benchmarks/ingest/cpu.py without a stream job, run as a user runs it (tests never import
`benchmarks`): its transcode leg in its own process, and its refusal of an unknown mode. The
ingest legs run Flink; the benchmark itself exercises them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cpu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.ingest.cpu", *args],
        cwd=ROOT,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_transcode_leg_encodes_and_counts_cpu(tmp_path: Path) -> None:
    result = tmp_path / "leg.json"
    done = _cpu(
        *("--leg", "transcode", "--episodes", "1", "--duration-s", "0.5", "--seed", "3"),
        *("--out", str(tmp_path), "--leg-result", str(result), "--home", str(tmp_path / "home")),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(result.read_text())
    assert figures["encoded_bytes"] > 0 and figures["cpu_s"] > 0


@pytest.mark.parametrize("modes", ["", "loopback", "process,beam"])
def test_unknown_modes_are_refused(modes: str, tmp_path: Path) -> None:
    done = _cpu("--modes", modes, "--out", str(tmp_path))
    assert done.returncode == 2
    assert "--modes must name some of ['process', 'thread']" in done.stderr


def test_sink_split_times_each_stage_and_the_transcode(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks.ingest.sink_split"),
            *("--episodes", "1", "--duration-s", "0.5", "--repeats", "1", "--out", str(tmp_path)),
        ],
        cwd=ROOT,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    stages = json.loads((tmp_path / "ingest_sink_split.json").read_text())["cpu_ms_per_episode"]
    # the verification decode is seen (patched into featurize's module, not the same-named function)
    assert stages["verify_decode"]["median"] > 0
    assert stages["featurize"]["median"] > stages["verify_decode"]["median"]
    assert stages["transcode_alone"]["median"] > 0


PROC_CPU_PROBE = """
import json, os, subprocess, sys
from benchmarks.ingest import _proc_cpu
busy = (
    "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.4: pass\\n"
    "print(1, flush=True)\\ntime.sleep(60)"
)
before = _proc_cpu.snapshot(os.getpid())
child = subprocess.Popen([sys.executable, "-c", busy], stdout=subprocess.PIPE, text=True)
child.stdout.readline()  # its 0.4 CPU seconds are spent
after = _proc_cpu.snapshot(os.getpid())
child.kill()
print(json.dumps(_proc_cpu.difference(before, after)))
"""


def test_proc_cpu_splits_a_process_tree_by_role() -> None:
    # the probe's own process is the root ("cli"); its busy child, started between the two
    # snapshots, counts from zero under its role; nothing outside the tree (this test) counts
    done = subprocess.run(
        [sys.executable, "-c", PROC_CPU_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    split = json.loads(done.stdout.strip().splitlines()[-1])
    roles = split["roles"]
    assert set(roles) == {"cli", "python_other"}, roles
    assert roles["python_other"] >= 0.35  # the child's 0.4 s busy loop (clock ticks: 10 ms)
    assert split["jvm_threads"] == {"threads_exited": 0}
