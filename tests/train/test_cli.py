"""`pilake train` on a lake, as a user runs it: a run, a refused second run into the same
checkpoints, and a resume that continues to more steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pi_jobs.cli import build_parser, main
from pi_jobs.cli._train import train_config_from_args
from pi_jobs.settings import Settings
from pi_train import read_jsonl

from tests.fixtures.lake_factory import FakeLake


def test_arguments_become_a_train_config(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    args = build_parser().parse_args(
        [
            "train",
            "--sql",
            "SELECT episode_id FROM episodes",
            "--framework",
            "jax",
            "--steps",
            "7",
            "--image-size",
            "96x128",
            "--cameras",
            "front,wrist",
            "--resume",
        ]
    )
    config = train_config_from_args(settings, args)
    assert (config.framework, config.steps, config.image_size, config.cameras) == (
        "jax",
        7,
        (96, 128),
        ("front", "wrist"),
    )
    assert config.resume and config.lake == settings.lake_root and config.catalog == settings.catalog_path
    assert train_config_from_args(
        settings, build_parser().parse_args(["train", "--image-size", "64"])
    ).image_size == (64, 64)


def test_sql_and_dataset_are_exclusive() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--sql", "SELECT 1", "--dataset", "pick-v1"])


def test_pilake_train_runs_refuses_to_overwrite_and_resumes(
    train_lake: FakeLake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = [
        "train",
        "--lake",
        train_lake.layout.root,
        "--framework",
        "torch",
        "--batch-size",
        "4",
        "--action-horizon",
        "4",
        "--workers",
        "0",
        "--log-every",
        "2",
        "--out",
        str(out),
    ]
    assert main([*argv, "--steps", "3"]) == 0
    assert (out / "timing.png").stat().st_size > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["framework"] == "torch" and summary["steps"] == 2  # step 1 is the warm-up
    assert "pi_train:" in capsys.readouterr().out

    assert main([*argv, "--steps", "3"]) == 1
    assert "already holds a checkpoint (step 3): pass resume=True (--resume)" in capsys.readouterr().err

    assert main([*argv, "--steps", "5", "--resume"]) == 0
    assert [r["step"] for r in read_jsonl(out / "steps.rank0.jsonl")] == [1, 2, 3, 4, 5]
    assert json.loads((out / "summary.json").read_text())["start_step"] == 3


def test_pilake_train_stop_after_s_exits_0_checkpointed_and_resumes(
    train_lake: FakeLake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["train", "--lake", train_lake.layout.root, "--batch-size", "4", "--action-horizon", "4"]
    argv += ["--workers", "0", "--checkpoint-every", "0", "--steps", "4", "--out", str(out)]
    # a deadline already passed: no step starts, nothing to checkpoint, and that is success
    assert main([*argv, "--stop-after-s", "0"]) == 0
    assert "pilake train: stopped by deadline at step 0 of 4" in capsys.readouterr().out
    (stop,) = read_jsonl(out / "stops.rank0.jsonl")
    assert (stop["reason"], stop["step"], stop["checkpoint_step"]) == ("deadline", 0, None)
    assert main([*argv, "--resume"]) == 0
    assert [r["step"] for r in read_jsonl(out / "steps.rank0.jsonl")] == [1, 2, 3, 4]
    assert main([*argv, "--stop-after-s", "-1", "--resume"]) == 1
    assert "stop_after_s must be a number of seconds >= 0" in capsys.readouterr().err
