"""Resume after a hard kill: a new process restored from the last saved state continues with
exactly the samples that would have come next."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pi_loader import Dataset

from tests.fixtures.lake_factory import FakeLake
from tests.loader.delivery.resume_child import make_loader

ROOT = Path(__file__).resolve().parents[3]
CHILD = "tests.loader.delivery.resume_child"


def _lines(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by the kill
            break
    return out


def test_state_restored_in_a_fresh_process_after_sigkill(loader_lake: FakeLake, tmp_path: Path) -> None:
    snapshot = Dataset(loader_lake.layout, cameras=[], action_horizon=2).snapshot.save(tmp_path / "snap.json")
    reference = make_loader(str(snapshot))
    expected = []
    for _ in range(2):
        expected += [
            [str(e), int(s)] for b in reference for e, s in zip(b["episode_id"], b["step"], strict=True)
        ]
    reference.close()

    kill_after = 7  # batches: mid first epoch (the shard has 28 samples: 10 batches per epoch)
    log = tmp_path / "first.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-m", CHILD, str(snapshot), str(log), str(kill_after)],
        cwd=ROOT,
        env=env,
    )
    deadline = time.monotonic() + 120
    while len(_lines(log)) < kill_after:
        assert child.poll() is None, f"child exited early with {child.returncode}"
        assert time.monotonic() < deadline, "child made no progress"
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    first = _lines(log)
    assert len(first) == kill_after
    state_path = tmp_path / "state.json"
    state_path.write_text(json.dumps(first[-1]["state"]))

    log2 = tmp_path / "second.jsonl"
    subprocess.run(
        [sys.executable, "-m", CHILD, str(snapshot), str(log2), "0", str(state_path)],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )
    got = [i for line in first for i in line["ids"]] + [i for line in _lines(log2) for i in line["ids"]]  # type: ignore[attr-defined]
    # killed in epoch 0; the new process finished epoch 0 from the saved position, then epoch 1
    assert got == expected
