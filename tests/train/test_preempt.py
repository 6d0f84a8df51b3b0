"""Preemption: SIGTERM (to one rank, to every rank, or to the launcher) or a deadline stops a run
at a step boundary, checkpointed, every process exiting 0; the resumed run then yields exactly
the batches (digests and sample ids) and losses of a run that never stopped. A SIGKILL instead
redoes at most `checkpoint_every` steps, counted from the logs.

The step where the signal lands is drawn from a seeded generator (printed, so a failure can be
replayed). Steps are paced (`TRAIN_CHILD_PACE_S`): a CPU step here takes ~10 ms, and a signal
sent after a step is logged must find the run still going. The time from the signal to each
process's exit is printed, not asserted (this machine is shared); only a generous grace bound
is, as a cluster would enforce one.
"""

from __future__ import annotations

import dataclasses
import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pi_train import DEADLINE_ENV, TrainConfig, read_jsonl
from pi_train._launch import free_port

from tests.fixtures.lake_factory import FakeLake
from tests.train.conftest import REPO, child_env
from tests.train.train_child import PACE_ENV

STEPS = 10  # 2 ranks x batch 4 over 48 samples: 6 steps an epoch, so the run crosses an epoch
CHECKPOINT_EVERY = 4
PACE_S = 0.25
SEED = 34
GRACE_S = 120  # Kubernetes' default grace is 30 s; generous for a shared 2-core machine

_started: list[subprocess.Popen[bytes]] = []
_references: dict[tuple[str, int], tuple[list[list[tuple[Any, ...]]], list[Any]]] = {}


@pytest.fixture(autouse=True)
def _no_process_left() -> Iterator[None]:
    """A failed test leaves no rank behind (one waiting in a collective would wait 10 minutes)."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _config(lake: FakeLake, out: Path, framework: str, **changes: Any) -> TrainConfig:
    return TrainConfig(
        lake=lake.layout.root,
        framework=framework,  # type: ignore[arg-type]
        steps=STEPS,
        batch_size=4,
        action_horizon=4,
        workers=1,
        prefetch_batches=3,
        threads=1,
        checkpoint_every=CHECKPOINT_EVERY,
        log_every=4,
        log_batches=True,
        out_dir=str(out),
        plot=False,
        **changes,
    )


def _write(config: TrainConfig) -> Path:
    path = Path(config.out_dir).parent / f"{Path(config.out_dir).name}-{int(config.resume)}.json"
    path.write_text(config.to_json())
    return path


def _start_ranks(
    config: TrainConfig, nproc: int, *, pace: float = 0.0, extra: tuple[str, ...] = (), env: Any = None
) -> list[subprocess.Popen[bytes]]:
    """Rank processes as `pi_train.launch` starts them, with pids the test can signal."""
    path, port = _write(config), free_port()
    procs = []
    for rank in range(nproc):
        rank_env = dict(
            child_env(),
            **{PACE_ENV: str(pace)},
            **((env or {}).get(rank, {})),
            RANK=str(rank),
            WORLD_SIZE=str(nproc),
            LOCAL_WORLD_SIZE=str(nproc),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        with open(path.with_suffix(f".rank{rank}.out"), "ab") as output:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.train.train_child", str(path), *extra],
                    cwd=REPO,
                    env=rank_env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
            )
    _started.extend(procs)
    return procs


def _outputs(config: TrainConfig) -> str:
    return "\n".join(p.read_text()[-3000:] for p in sorted(Path(config.out_dir).parent.glob("*.out")))


def _wait(procs: list[subprocess.Popen[bytes]], config: TrainConfig, timeout: float = 600) -> list[int]:
    codes = [p.wait(timeout=timeout) for p in procs]
    assert codes == [0] * len(procs), f"exit codes {codes}:\n{_outputs(config)}"
    return codes


def _curves(out: Path, nproc: int) -> list[list[tuple[Any, ...]]]:
    logs = [read_jsonl(out / f"steps.rank{rank}.jsonl") for rank in range(nproc)]
    return [[(r["step"], r["loss"], r["batch"], r["samples"]) for r in log] for log in logs]


def _finals(out: Path, nproc: int) -> list[Any]:
    return [json.loads((out / f"final.rank{rank}.json").read_text()) for rank in range(nproc)]


def _reference(lake: FakeLake, root: Path, framework: str, nproc: int) -> tuple[list[Any], list[Any]]:
    """A run that never stops (computed once per framework and process count)."""
    if (framework, nproc) not in _references:
        config = _config(lake, root / f"reference-{framework}-{nproc}", framework)
        _wait(_start_ranks(config, nproc), config)
        curves = _curves(Path(config.out_dir), nproc)
        assert [[s for s, *_ in c] for c in curves] == [list(range(1, STEPS + 1))] * nproc
        _references[framework, nproc] = curves, _finals(Path(config.out_dir), nproc)
    return _references[framework, nproc]


def _wait_for_step(config: TrainConfig, step: int, procs: list[subprocess.Popen[bytes]]) -> None:
    log = Path(config.out_dir) / "steps.rank0.jsonl"
    deadline = time.monotonic() + 480
    while time.monotonic() < deadline:
        if any(r.get("step", 0) >= step for r in read_jsonl(log)):
            return
        if any(p.poll() is not None for p in procs):
            raise AssertionError(f"a process exited before step {step}:\n{_outputs(config)}")
        time.sleep(0.02)
    raise AssertionError(f"step {step} was never logged in {log}")


def _checkpoint_steps(config: TrainConfig) -> list[int]:
    names = [p.name for p in config.checkpoints.iterdir()]
    if config.framework == "torch":
        return sorted(int(n[5:14]) for n in names if n.startswith("step_") and n.endswith(".pt"))
    return sorted(int(n) for n in names if n.isdigit())  # orbax: one directory per step


def _resume_and_compare(
    config: TrainConfig, nproc: int, reference: tuple[list[Any], list[Any]], stop_step: int
) -> None:
    """Resume without pacing or signals: the whole log, every rank, equals the reference."""
    resumed = dataclasses.replace(config, resume=True)
    _wait(_start_ranks(resumed, nproc), resumed)
    out = Path(config.out_dir)
    assert _curves(out, nproc) == reference[0]  # steps 1..stop kept, the rest computed: the same
    assert _finals(out, nproc) == reference[1]  # the same parameters
    summary = json.loads((out / "summary.json").read_text())
    assert summary["start_step"] == stop_step and summary["stopped"] is None  # nothing redone


@pytest.mark.parametrize(
    ("framework", "nproc", "target"),
    [
        ("torch", 1, "all"),
        ("torch", 2, "one"),
        ("torch", 2, "all"),
        ("torch", 2, "launcher"),
        ("jax", 1, "all"),
        ("jax", 2, "one"),
    ],
)
def test_sigterm_checkpoints_exits_0_and_resumes_exactly(
    train_lake: FakeLake,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    framework: str,
    nproc: int,
    target: str,
) -> None:
    reference = _reference(train_lake, tmp_path_factory.getbasetemp(), framework, nproc)
    rng = random.Random(f"{SEED}-{framework}-{nproc}-{target}")
    # a step with no periodic checkpoint, so that the stop's own checkpoint is usually written
    at = rng.choice([s for s in range(1, STEPS - 4) if s % CHECKPOINT_EVERY])
    delay = rng.uniform(0.0, PACE_S)
    config = _config(train_lake, tmp_path / "run", framework)
    if target == "launcher":  # as `pilake train --nproc N`, SIGTERM to it alone (Kubernetes' PID 1)
        path = _write(config)
        with open(tmp_path / "launcher.out", "wb") as output:
            launcher = subprocess.Popen(
                [sys.executable, "-m", "tests.train.train_child", "--launch", str(nproc), str(path)],
                cwd=REPO,
                env=dict(child_env(), **{PACE_ENV: str(PACE_S)}),
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        procs, targets = [launcher], [launcher]
        _started.append(launcher)
    else:
        procs = _start_ranks(config, nproc, pace=PACE_S)
        targets = procs if target == "all" else [rng.choice(procs)]
    _wait_for_step(config, at, procs)
    time.sleep(delay)
    sent = time.monotonic()
    for p in targets:
        p.send_signal(signal.SIGTERM)
    exits = []
    for p in procs:
        p.wait(timeout=GRACE_S)
        exits.append(round(time.monotonic() - sent, 2))
    _wait(procs, config)

    out = Path(config.out_dir)
    stops = [read_jsonl(out / f"stops.rank{rank}.jsonl") for rank in range(nproc)]
    assert [len(s) for s in stops] == [1] * nproc, stops
    records = [s[0] for s in stops]
    step = records[0]["step"]
    assert at <= step < STEPS
    for rank, record in enumerate(records):  # every rank stopped after the same step, checkpointed
        assert (record["reason"], record["step"], record["checkpoint_step"]) == ("SIGTERM", step, step)
        got = target != "one" or procs.index(targets[0]) == rank
        assert record["received_signal"] is got, (rank, record)
    assert _checkpoint_steps(config)[-1] == step
    before = _curves(out, nproc)
    assert before == [c[:step] for c in reference[0]]  # what ran before the signal is the reference's
    print(
        f"\n{framework} nproc={nproc} SIGTERM to {target} (seed {SEED}: after step {at} + {delay:.2f} s): "
        f"stopped after step {step}; signal to exit {exits} s (measured outside); inside each rank "
        f"request->stop {[r['request_to_stop_s'] for r in records]} s, checkpoint "
        f"{[r['checkpoint_s'] for r in records]} s, "
        f"request->exit {[r['request_to_exit_s'] for r in records]} s"
    )
    _resume_and_compare(config, nproc, reference, step)


def test_a_deadline_on_one_rank_stops_both_at_the_same_step(
    train_lake: FakeLake, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """PILAKE_TRAIN_DEADLINE set on rank 1 only (a Unix time); both ranks pause PAUSE_S after
    step 2, so the deadline, PAUSE_S after the start, has passed once step 2 is done."""
    pause = 12.0
    reference = _reference(train_lake, tmp_path_factory.getbasetemp(), "torch", 2)
    config = _config(train_lake, tmp_path / "run", "torch")
    deadline = {1: {DEADLINE_ENV: str(time.time() + pause)}}
    _wait(_start_ranks(config, 2, extra=(f"2:{pause}",), env=deadline), config)
    records = [read_jsonl(Path(config.out_dir) / f"stops.rank{rank}.jsonl")[0] for rank in range(2)]
    step = records[0]["step"]
    assert step <= 2  # 2 unless starting up took longer than the pause
    assert [(r["reason"], r["step"]) for r in records] == [("deadline", step)] * 2
    if step:
        assert _checkpoint_steps(config)[-1] == step
    print(f"\ndeadline on rank 1: both stopped after step {step}, records {records}")
    _resume_and_compare(config, 2, reference, step)


def test_sigkill_redoes_at_most_checkpoint_every_steps(
    train_lake: FakeLake, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reference = _reference(train_lake, tmp_path_factory.getbasetemp(), "torch", 2)
    rng = random.Random(f"{SEED}-sigkill")
    config = _config(train_lake, tmp_path / "run", "torch")
    redone: list[int] = []
    reached = 0
    first = Path(config.out_dir) / "steps.rank0.jsonl"
    for high in (4, STEPS - 1):  # killed twice, at random steps, resumed each time
        procs = _start_ranks(config, 2, pace=PACE_S)
        # past every step the log already holds (the resumed run cuts it back only once started)
        at, delay = rng.randint(reached + 1, max(high, reached + 1)), rng.uniform(0.0, PACE_S)
        _wait_for_step(config, at, procs)
        time.sleep(delay)
        for p in procs:
            p.send_signal(signal.SIGKILL)
        assert [p.wait(timeout=60) for p in procs] == [-signal.SIGKILL] * 2
        reached = max(r["step"] for r in read_jsonl(first))  # a torn last line is skipped
        config = dataclasses.replace(config, resume=True)
        latest = _checkpoint_steps(config)
        resumed_from = latest[-1] if latest else 0
        redone.append(reached - resumed_from)
        assert 0 <= reached - resumed_from <= CHECKPOINT_EVERY, (reached, latest)
    _wait(_start_ranks(config, 2), config)
    out = Path(config.out_dir)
    assert _curves(out, 2) == reference[0] and _finals(out, 2) == reference[1]
    assert json.loads((out / "summary.json").read_text())["start_step"] == resumed_from
    print(f"\nSIGKILL twice (seed {SEED}): steps redone {redone} (checkpoint_every={CHECKPOINT_EVERY})")
