"""Two hosts on this machine (two `pilake train --nnodes 2 --node-rank K` launches, each its own
process group launcher, out dir and loader workers; one shared checkpoint dir, as a cluster's
volume) train exactly as one host with the same global batch: the same samples in every step
(batch digests), the same losses and the same final parameters. SIGTERM to one host's launcher
stops both hosts at one checkpointed step, and the resumed hosts continue with the batches and
losses of the run that never stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pi_train import TrainConfig, launch, read_jsonl
from pi_train._launch import free_port

from tests.fixtures.lake_factory import FakeLake
from tests.train.conftest import REPO, child_env
from tests.train.train_child import PACE_ENV

STEPS = 8  # 6 steps make an epoch of the train lake at 2 x 4: the run crosses an epoch
BATCH = 4
CHECKPOINT_EVERY = 4


@pytest.fixture(scope="module")
def one_host(train_lake: FakeLake, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The out dir of a one-host run per framework (run once per module)."""
    runs: dict[str, Path] = {}

    def get(framework: str) -> Path:
        if framework not in runs:
            out = tmp_path_factory.mktemp("one-host")
            runs[framework] = Path(_reference(train_lake, out, framework).out_dir)
        return runs[framework]

    return get


def _reference(lake: FakeLake, out: Path, framework: str) -> TrainConfig:
    """One host, two processes (global batch 2 x 4), loader in the training loop."""
    config = TrainConfig(
        lake=lake.layout.root,
        framework=framework,  # type: ignore[arg-type]
        steps=STEPS,
        batch_size=BATCH,
        action_horizon=4,
        workers=0,
        checkpoint_every=CHECKPOINT_EVERY,
        log_every=4,
        log_batches=True,
        device="cpu",
        plot=False,
        out_dir=str(out),
    )
    assert launch(config, 2, env=child_env()) == 0
    return config


def _curve(path: Path) -> list[tuple[Any, ...]]:
    return [(r["step"], r["loss"], r["batch"], r["samples"]) for r in read_jsonl(path)]


def _host_argv(lake: FakeLake, root: Path, framework: str, node: int, port: int) -> list[str]:
    return [
        sys.executable, "-m", "pi_jobs.cli", "train",
        "--lake", lake.layout.root, "--framework", framework, "--steps", str(STEPS),
        "--batch-size", str(BATCH), "--action-horizon", "4", "--workers", "1",
        "--checkpoint-every", str(CHECKPOINT_EVERY), "--log-every", "4", "--log-batches", "--device", "cpu",
        "--out", str(root / f"host{node}"), "--checkpoint-dir", str(root / "shared-checkpoints"),
        "--nnodes", "2", "--node-rank", str(node), "--master-port", str(port), "--rendezvous-timeout", "120",
    ]  # fmt: skip


def _wait_all(procs: list[subprocess.Popen[str]], timeout: float = 300) -> list[str]:
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = [p.returncode for p in procs]
    assert codes == [0] * len(procs), f"exit codes {codes}:\n" + "\n---\n".join(o[-4000:] for o in outputs)
    return outputs


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_two_hosts_train_as_one_host_with_the_same_global_batch(
    train_lake: FakeLake, tmp_path: Path, framework: str, one_host: Callable[[str], Path]
) -> None:
    reference = one_host(framework)
    port = free_port()
    env = dict(child_env(), PILAKE_HOME=str(tmp_path / "home"))
    procs = [
        subprocess.Popen(
            _host_argv(train_lake, tmp_path, framework, node, port),
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (1, 0)  # host 1 first: it waits for host 0's rendezvous, as on a cluster
    ]
    _wait_all(procs)
    hosts = [tmp_path / "host0", tmp_path / "host1"]
    # each host logged its own rank only, in its own out dir
    assert sorted(p.name for p in hosts[0].glob("steps.rank*.jsonl")) == ["steps.rank0.jsonl"]
    assert sorted(p.name for p in hosts[1].glob("steps.rank*.jsonl")) == ["steps.rank1.jsonl"]
    for rank in (0, 1):  # the same samples in every step, the same global mean loss
        two = _curve(hosts[rank] / f"steps.rank{rank}.jsonl")
        one = _curve(reference / f"steps.rank{rank}.jsonl")
        assert [(s, b, ids) for s, _, b, ids in two] == [(s, b, ids) for s, _, b, ids in one]
        assert [loss for _, loss, _, _ in two] == pytest.approx([loss for _, loss, _, _ in one], rel=1e-6)
    finals = [json.loads((hosts[r] / f"final.rank{r}.json").read_text()) for r in (0, 1)]
    assert finals[0] == finals[1] == json.loads((reference / "final.rank0.json").read_text())
    # the one snapshot both hosts read is pinned by host 0 (rank 0), as on one host
    pinned = [json.loads((d / "snapshot.json").read_text()) for d in (hosts[0], reference)]
    assert dict(pinned[0], created_at_ns=0) == dict(pinned[1], created_at_ns=0)
    assert not (hosts[1] / "snapshot.json").exists()
    if framework == "torch":  # one checkpoint holds both hosts' loader states, in rank order
        import torch

        path = tmp_path / "shared-checkpoints" / f"step_{STEPS:09d}.pt"
        extra = torch.load(path, weights_only=True)["extra"]
        assert [s["shard_index"] for s in extra["loader"]] == [0, 1] and extra["world_size"] == 2


def _start_host(config: TrainConfig, node: int, port: int, root: Path) -> subprocess.Popen[str]:
    path = root / f"host{node}-{int(config.resume)}.json"
    path.write_text(config.to_json())
    argv = ["-m", "tests.train.train_child", "--launch", "1", str(path), "2", str(node), str(port)]
    env = dict(child_env(), **{PACE_ENV: "0.25"})  # a step every 0.25 s: SIGTERM lands mid-run
    out, err = subprocess.PIPE, subprocess.STDOUT
    return subprocess.Popen([sys.executable, *argv], cwd=REPO, env=env, stdout=out, stderr=err, text=True)


def test_sigterm_to_one_host_stops_both_and_the_resumed_hosts_continue_exactly(
    tmp_path: Path, one_host: Callable[[str], Path]
) -> None:
    reference = one_host("torch")
    configs = [
        TrainConfig.from_json(
            json.dumps(
                dict(
                    json.loads((reference / "config.json").read_text()),
                    out_dir=str(tmp_path / f"host{node}"),
                    checkpoint_dir=str(tmp_path / "shared-checkpoints"),
                    workers=1,
                )
            )
        )
        for node in (0, 1)
    ]
    port = free_port()
    procs = [_start_host(configs[node], node, port, tmp_path) for node in (0, 1)]
    log = Path(configs[1].out_dir) / "steps.rank1.jsonl"
    deadline = time.monotonic() + 240
    while not (log.exists() and len(log.read_text().splitlines()) >= 2):  # step 2 done on host 1
        assert all(p.poll() is None for p in procs) and time.monotonic() < deadline, [
            p.communicate()[0][-3000:] for p in procs if p.poll() is not None
        ]
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGTERM)  # to host 1's launcher only, as a drained node's
    _wait_all(procs)
    stops = [read_jsonl(Path(configs[r].out_dir) / f"stops.rank{r}.jsonl") for r in (0, 1)]
    stopped_at = {s[-1]["step"] for s in stops}
    assert len(stopped_at) == 1 and 2 <= next(iter(stopped_at)) < STEPS, stops  # one step, both hosts
    step = next(iter(stopped_at))
    import torch

    extra = torch.load(tmp_path / "shared-checkpoints" / f"step_{step:09d}.pt", weights_only=True)["extra"]
    assert [s["shard_index"] for s in extra["loader"]] == [0, 1]  # every host's loader state

    port = free_port()
    resumed = [TrainConfig.from_json(json.dumps(dict(json.loads(c.to_json()), resume=True))) for c in configs]
    _wait_all([_start_host(resumed[node], node, port, tmp_path) for node in (0, 1)])
    for rank in (0, 1):
        two = _curve(Path(configs[rank].out_dir) / f"steps.rank{rank}.jsonl")
        one = _curve(reference / f"steps.rank{rank}.jsonl")
        assert [(s, b, ids) for s, _, b, ids in two] == [(s, b, ids) for s, _, b, ids in one]
        assert [loss for _, loss, _, _ in two] == pytest.approx([loss for _, loss, _, _ in one], rel=1e-6)
    assert os.environ.get("RANK") is None  # nothing leaked into this process's environment
