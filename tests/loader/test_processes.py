"""pi_loader._processes: workers start from the preloaded forkserver even where the user's temp
dir is too deep for a Unix socket path (an HPC job's scratch dir), which failed with "AF_UNIX path
too long" before multiprocessing's temp dir was moved under /tmp for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.lake_factory import FakeLake

_CHILD = """
import sys
from pi_loader import Dataset, Loader, SampleSpec, ShardSpec
ds = Dataset(sys.argv[1], spec=SampleSpec(cameras=("wrist",), action_horizon=3), seed=2)
with Loader(ds, batch_size=4, shard=ShardSpec(0, 1), num_workers=2) as loader:
    n = sum(len(batch["episode_id"]) for batch in loader)
import multiprocessing.process as p
print(n, p.current_process()._config.get("tempdir"))
"""


def test_workers_start_under_a_temp_dir_too_deep_for_a_socket(tmp_path: Path, loader_lake: FakeLake) -> None:
    from pi_loader._processes import FORKSERVER, default_start_method

    if default_start_method() != FORKSERVER:
        pytest.skip("no forkserver on this platform")
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    assert len(str(deep)) + 33 >= 107  # the socket path would not fit
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, loader_lake.layout.root],
        env={**os.environ, "TMPDIR": str(deep)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    samples, socket_dir = run.stdout.split()
    assert int(samples) == 5 * 11
    assert socket_dir.startswith("/tmp/pymp-"), socket_dir
