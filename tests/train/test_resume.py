"""Resuming after SIGKILL gives the same batches and the same loss curve, bit for bit on the CPU.

For each framework: a run that never stops; a run SIGKILLed mid-way (after step 7, its last
checkpoint at step 6, with the loader's next batches in flight in its worker) and resumed with
`resume=True`. Every step's loss, batch digest and (episode_id, step) ids must be equal, both in
what the killed process logged before it died and in the resumed run's final log.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pi_train import TrainConfig, read_jsonl

from tests.fixtures.lake_factory import FakeLake
from tests.train.conftest import REPO, child_env, run_child

STEPS = 10  # 48 samples / batch 4 = 12 batches an epoch: one run, one epoch
CHECKPOINT_EVERY = 3
KILL_AFTER = 7  # past the checkpoint at 6: step 7 is computed twice, before and after the kill


def _config(lake: FakeLake, out: Path, framework: str) -> TrainConfig:
    return TrainConfig(
        lake=lake.layout.root,
        framework=framework,  # type: ignore[arg-type]
        steps=STEPS,
        batch_size=4,
        action_horizon=4,
        workers=1,
        prefetch_batches=3,
        checkpoint_every=CHECKPOINT_EVERY,
        log_every=4,
        log_batches=True,
        out_dir=str(out),
        plot=False,
    )


def _write(config: TrainConfig, path: Path) -> Path:
    path.write_text(config.to_json())
    return path


def _wait_for_step(log: Path, step: int, child: subprocess.Popen[str], timeout: float = 480) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.get("step") == step for r in read_jsonl(log)):
            return
        if child.poll() is not None:
            raise AssertionError(f"the child exited ({child.returncode}) before step {step}: {child.stderr}")
        time.sleep(0.2)
    raise AssertionError(f"step {step} was never logged in {log}")


def _curve(records: list[dict]) -> list[tuple]:
    return [(r["step"], r["loss"], r["batch"], r["samples"]) for r in records]


def _start(config: TrainConfig, path: Path, *hang_at: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.train.train_child", str(_write(config, path)), *hang_at],
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_resume_after_sigkill_is_bit_identical(train_lake: FakeLake, tmp_path: Path, framework: str) -> None:
    straight = _config(train_lake, tmp_path / "straight", framework)
    killed = _config(train_lake, tmp_path / "killed", framework)
    # Side by side (the machine is small): one run that never stops, one killed after step 7.
    never_stopped = _start(straight, tmp_path / "straight.json")
    child = _start(killed, tmp_path / "killed.json", str(KILL_AFTER))
    log = Path(killed.out_dir) / "steps.rank0.jsonl"
    try:
        _wait_for_step(log, KILL_AFTER, child)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        _, err = never_stopped.communicate(timeout=600)
    assert child.returncode == -signal.SIGKILL
    assert never_stopped.returncode == 0, err[-3000:]
    expected = _curve(read_jsonl(Path(straight.out_dir) / "steps.rank0.jsonl"))
    assert [s for s, *_ in expected] == list(range(1, STEPS + 1))
    before_kill = _curve(read_jsonl(log))
    assert before_kill == expected[:KILL_AFTER]

    # What a kill during a save leaves behind, which must never be resumed from: a temporary
    # file (torch.save through a rename) or an orbax temporary step directory.
    if framework == "torch":
        (killed.checkpoints / ".step_000000009.pt.tmp-4242").write_bytes(b"torn")
    else:
        (killed.checkpoints / "9.orbax-checkpoint-tmp-4242" / "state").mkdir(parents=True)
    resumed = dataclasses.replace(killed, resume=True)
    again = run_child(_write(resumed, tmp_path / "resumed.json"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert _curve(read_jsonl(log)) == expected  # steps 1-6 kept, 7-10 recomputed: the same
    final = read_jsonl(Path(killed.out_dir) / "final.rank0.json")
    assert final == read_jsonl(Path(straight.out_dir) / "final.rank0.json")  # same parameters
