"""Loader workers never outlive the process that made them: with the forkserver start method
their OS parent is the forkserver, so a worker must watch its creator, not getppid() (found as
idle workers left behind by SIGKILLed test processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.lake_factory import FakeLake

ROOT = Path(__file__).resolve().parents[3]
CHILD = """
import sys, time
from pi_loader import Dataset, Loader, SampleSpec, ShardSpec
ds = Dataset(sys.argv[1], spec=SampleSpec(cameras=("front",), action_horizon=2), seed=0)
loader = Loader(ds, batch_size=2, shard=ShardSpec(0, 1), num_workers=2, mp_context=sys.argv[2])
it = iter(loader)
next(it)
print(" ".join(str(p.pid) for p in loader._worker_pool._workers), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone for our purpose
        return stat.read().split()[2] != "Z"


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_workers_exit_when_the_loader_process_is_killed(loader_lake: FakeLake, method: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(loader_lake.layout.root), method],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    workers = [int(p) for p in child.stdout.readline().split()]
    assert len(workers) == 2 and all(_alive(p) for p in workers)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    deadline = time.monotonic() + 30  # workers poll every second; generous for a loaded machine
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in workers), f"workers {workers} outlived their loader ({method})"
