"""Two processes in data parallel (torch DDP over gloo, `jax.distributed` on the CPU), each
reading its own shard of one snapshot they agree on: together they see every sample of an epoch
exactly once, run the same number of steps, log the same (averaged) loss and end with the same
parameters, which they could not with different data unless the gradients were averaged.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pi_train import TrainConfig, launch, read_jsonl

from tests.fixtures.lake_factory import FakeLake
from tests.train.conftest import TRAIN_EPISODES, TRAIN_STEPS, child_env

RANKS = 2
BATCH = 4
EPOCH_STEPS = TRAIN_EPISODES * TRAIN_STEPS // (RANKS * BATCH)  # 48 samples: 6 steps of 2 x 4


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_two_processes_share_one_epoch_exactly_once(
    train_lake: FakeLake, tmp_path: Path, framework: str
) -> None:
    config = TrainConfig(
        lake=train_lake.layout.root,
        framework=framework,  # type: ignore[arg-type]
        steps=EPOCH_STEPS,
        batch_size=BATCH,
        action_horizon=4,
        workers=0,
        checkpoint_every=3,
        log_every=3,
        log_batches=True,
        out_dir=str(tmp_path / "run"),
    )
    assert launch(config, RANKS, env=child_env()) == 0
    out = Path(config.out_dir)
    logs = [read_jsonl(out / f"steps.rank{rank}.jsonl") for rank in range(RANKS)]

    # in step: the same steps on both ranks, and the same loss (the mean over both)
    assert [[r["step"] for r in log] for log in logs] == [list(range(1, EPOCH_STEPS + 1))] * RANKS
    assert [r["loss"] for r in logs[0]] == [r["loss"] for r in logs[1]]

    # every sample of the epoch exactly once, across the ranks
    seen = Counter((e, s) for log in logs for r in log for e, s in r["samples"])
    expected = {(e, s) for e in train_lake.episode_ids for s in range(TRAIN_STEPS)}
    assert set(seen) == expected
    assert set(seen.values()) == {1}
    # ... and each rank its own half: no sample of rank 0 in rank 1's batches
    halves = [{(e, s) for r in log for e, s in r["samples"]} for log in logs]
    assert not halves[0] & halves[1]

    # gradients averaged: different data, the same parameters after every step
    finals = [json.loads((out / f"final.rank{rank}.json").read_text()) for rank in range(RANKS)]
    assert finals[0] == finals[1]

    # the decomposition is the maximum over both ranks, written once, with a verdict and a plot
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ranks"] == RANKS and summary["steps"] == EPOCH_STEPS - 1  # the warm-up step apart
    assert summary["samples_per_s"] > 0 and summary["verdict"].split(":")[0].endswith("-bound")
    assert [w["step"] for w in read_jsonl(out / "timing.jsonl")] == [3, 6]
    assert (out / "timing.png").stat().st_size > 0
    # the one snapshot both opened is pinned for a resume
    snapshot = json.loads((out / "snapshot.json").read_text())
    assert sorted(snapshot["episode_ids"]) == train_lake.episode_ids
    if framework == "torch":  # one checkpoint holds both ranks' loader states, in rank order
        import torch

        extra = torch.load(out / "checkpoints" / f"step_{EPOCH_STEPS:09d}.pt", weights_only=True)["extra"]
        assert [s["shard_index"] for s in extra["loader"]] == list(range(RANKS))
        assert {s["position"] for s in extra["loader"]} == {EPOCH_STEPS * BATCH}
