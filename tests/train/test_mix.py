"""`pilake train --mix A=0.7,B=0.3`: the reference trainer on a pi_loader.Mixture of two dataset
pins: it trains, records what it read (`mixture.json`), and a resumed run continues with the
same batches as a run that never stopped."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pi_jobs.cli import build_parser
from pi_jobs.cli._train import train_config_from_args
from pi_jobs.maintenance.datasets import create_dataset
from pi_jobs.settings import Settings
from pi_train import TrainConfig, read_jsonl, train

from tests.fixtures.lake_factory import FakeLake


def _config(lake: FakeLake, out: Path, steps: int, resume: bool = False) -> TrainConfig:
    return TrainConfig(
        lake=lake.layout.root,
        mix=(("mix-a", 0.7), ("mix-b", 0.3)),
        steps=steps,
        batch_size=4,
        action_horizon=2,
        workers=0,
        checkpoint_every=3,
        log_batches=True,
        out_dir=str(out),
        resume=resume,
        plot=False,
    )


def test_the_command_line_takes_weighted_pins(tmp_path: Path) -> None:
    args = build_parser().parse_args(["train", "--mix", "pick-v1=0.7,place-v2=0.3"])
    config = train_config_from_args(Settings(home=tmp_path), args)
    assert config.mix == (("pick-v1", 0.7), ("place-v2", 0.3))
    assert TrainConfig.from_json(config.to_json()) == config
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--mix", "pick-v1=0"])
    with pytest.raises(ValueError, match="not both"):
        TrainConfig(lake="x", mix=(("a", 1.0),), sql="SELECT 1", catalog="c")


def test_training_on_a_mixture_resumes_exactly(train_lake: FakeLake, tmp_path: Path) -> None:
    ids = train_lake.episode_ids
    for name, chosen in (("mix-a", ids[:3]), ("mix-b", ids[3:])):
        create_dataset(train_lake.layout, name, episode_ids=chosen)  # the same pin again: a no-op
    straight = train(_config(train_lake, tmp_path / "straight", 6))
    assert len(straight.losses) == 6 and np.isfinite(straight.losses).all()
    record = json.loads((tmp_path / "straight" / "mixture.json").read_text())
    assert [s["name"] for s in record["sources"]] == ["mix-a", "mix-b"]
    assert record["counts"] == {"mix-a": 34, "mix-b": 14}  # 48 samples an epoch at 0.7 / 0.3
    train(_config(train_lake, tmp_path / "split", 3))
    train(_config(train_lake, tmp_path / "split", 6, resume=True))
    logged = {r["step"]: r["samples"] for r in read_jsonl(tmp_path / "split" / "steps.rank0.jsonl")}
    expected = {r["step"]: r["samples"] for r in read_jsonl(tmp_path / "straight" / "steps.rank0.jsonl")}
    assert logged == expected
    from_b = sum(1 for samples in expected.values() for e, _ in samples if e in ids[3:])
    assert 0 < from_b < 24  # both pins are read
