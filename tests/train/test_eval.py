"""Evaluation (issue 34 item 4) on a real lake: a run with a held-out split never trains on the
held-out episodes and scores them at the same steps with the same numbers every run;
`pilake eval` scores its checkpoint per horizon step, robot and task; damaged checkpoints,
checkpoints of another shape and unknown pins are refused with errors that say what to do."""

from __future__ import annotations

import json
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from pi_jobs.cli import main
from pi_jobs.maintenance.datasets import create_dataset
from pi_train import (
    CheckpointError,
    EvalConfig,
    EvalError,
    PiTrainError,
    TrainConfig,
    evaluate_checkpoint,
    launch,
    read_jsonl,
    train,
)

from tests.fixtures.lake_factory import FakeLake
from tests.train.conftest import child_env

HELD_OUT = ["ep-001", "ep-003"]  # split_hash < 0.1 of the train lake's 4 ids (test_split pins it)


def _config(lake: FakeLake, out: Path, **changes: Any) -> TrainConfig:
    options: dict[str, Any] = {
        "lake": lake.layout.root,
        "framework": "torch",
        "steps": 4,
        "batch_size": 4,
        "action_horizon": 4,
        "workers": 0,
        "threads": 1,
        "checkpoint_every": 2,
        "eval_fraction": 0.1,
        "eval_every": 2,
        "eval_samples": 6,
        "log_batches": True,
        "out_dir": str(out),
        "plot": False,
    }
    return TrainConfig(**{**options, **changes})


@pytest.fixture(scope="module")
def trained(train_lake: FakeLake, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("eval_run") / "run"
    train(_config(train_lake, out))
    create_dataset(train_lake.layout, "eval-val", episode_ids=["ep-000", "ep-001"])
    create_dataset(train_lake.layout, "eval-held", episode_ids=HELD_OUT)
    return out


def _evals(out: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "eval_s"} for r in read_jsonl(out / "eval.jsonl")]


def test_training_holds_out_the_split_and_scores_it_at_the_same_steps_identically(
    trained: Path, train_lake: FakeLake, tmp_path: Path
) -> None:
    split = json.loads((trained / "eval_split.json").read_text())
    assert split["held_out"] == HELD_OUT and split["train"] == ["ep-000", "ep-002"]
    assert split["salt"] == "pi-lake.eval-split/1" and split["fraction"] == 0.1
    trained_on = {e for r in read_jsonl(trained / "steps.rank0.jsonl") for e, _ in r["samples"]}
    assert trained_on == {"ep-000", "ep-002"}  # never a held-out episode
    first = _evals(trained)
    assert [r["step"] for r in first] == [2, 4] and all(r["samples"] == 6 for r in first)
    assert all(r["eval_loss"] > 0 and r["eval_l1"] > 0 for r in first)
    assert first[0]["eval_loss"] != first[1]["eval_loss"]  # the weights moved between evals
    train(_config(train_lake, tmp_path / "again"))
    assert _evals(tmp_path / "again") == first  # same samples, same weights: same numbers
    policy = json.loads((trained / "policy.json").read_text())
    assert policy["shape"]["horizon"] == 4 and policy["framework"] == "torch"


def test_pilake_eval_scores_per_horizon_step_robot_and_task(
    trained: Path, train_lake: FakeLake, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["eval", str(trained), "--dataset", "eval-val", "--lake", train_lake.layout.root]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "per robot:" in printed and "robot-0" in printed and "per task:" in printed
    out = trained / "eval-eval-val-step4"
    report = json.loads((out / "eval.json").read_text())
    assert (out / "eval.png").stat().st_size > 10_000
    assert report["step"] == 4 and report["samples"] == 24 and report["episodes"] == 2
    horizon = report["horizon"]
    # 2 episodes of 12 steps: the last h steps of each have no action h ahead (padding, not scored)
    assert [r["count"] for r in horizon] == [24, 22, 20, 18]
    assert all(r["l1"] > 0 and r["l2"] >= r["l1"] ** 2 * 0.99 / 14 for r in horizon)
    pooled = sum(r["l1"] * r["count"] for r in horizon) / sum(r["count"] for r in horizon)
    assert report["l1"] == pytest.approx(pooled, rel=1e-12)
    assert sorted(report["by_robot"]) == ["robot-0", "robot-1"]
    assert sorted(report["by_task"]) == ["pick", "place"]
    for table in (report["by_robot"], report["by_task"]):
        assert sum(r["samples"] for r in table.values()) == 24
        assert all(len(r["horizon"]) == 4 for r in table.values())


def test_offline_scoring_equals_the_training_eval_of_the_same_checkpoint(
    trained: Path, train_lake: FakeLake, tmp_path: Path
) -> None:
    report = evaluate_checkpoint(
        EvalConfig(
            checkpoint=str(trained / "checkpoints"),
            lake=train_lake.layout.root,
            dataset="eval-held",
            samples=6,
            out_dir=str(tmp_path),
            plot=False,
        )
    )
    last = _evals(trained)[-1]
    assert report["step"] == last["step"] == 4
    assert report["loss"] == pytest.approx(last["eval_loss"], rel=1e-5)
    assert report["l2"] == pytest.approx(last["eval_l2"], rel=1e-5)


def _bad_checkpoints(real: bytes) -> list[tuple[str, bytes]]:
    rng = random.Random(34)
    return [
        ("empty", b""),
        ("truncated", real[: len(real) // 2]),
        ("random", rng.randbytes(4096)),
        ("zip-header", b"PK\x03\x04" + rng.randbytes(512)),
        ("other-pickle", pickle.dumps({"format": "something else", "model": [1, 2, 3]})),
        ("flipped", bytes(b ^ 0xFF if i % 97 == 0 else b for i, b in enumerate(real))),
    ]


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # torch's, on the foreign pickle
def test_damaged_checkpoints_are_refused_and_the_good_one_beside_them_scores(
    trained: Path, train_lake: FakeLake, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    good = run / "checkpoints" / "step_000000004.pt"
    bad = run / "checkpoints" / "step_000000099.pt"
    for name, data in _bad_checkpoints(good.read_bytes()):
        bad.write_bytes(data)
        for target in (bad, run):  # named, or the newest of the run
            config = EvalConfig(
                checkpoint=str(target), lake=train_lake.layout.root, dataset="eval-val", plot=False
            )
            with pytest.raises(CheckpointError, match=r"step_000000099|step 99") as info:
                evaluate_checkpoint(config)
            assert "checkpoint" in str(info.value), name
    bad.unlink()
    config = EvalConfig(checkpoint=str(good), lake=train_lake.layout.root, dataset="eval-val", plot=False)
    assert evaluate_checkpoint(config)["samples"] == 24


def test_a_checkpoint_of_another_shape_is_refused(
    trained: Path, train_lake: FakeLake, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    policy = json.loads((run / "policy.json").read_text())
    policy["shape"]["horizon"] = 2  # the weights are of a horizon-4 head
    policy["checkpoints"] = str(run / "checkpoints")
    (run / "policy.json").write_text(json.dumps(policy))
    config = EvalConfig(checkpoint=str(run), lake=train_lake.layout.root, dataset="eval-val", plot=False)
    with pytest.raises(CheckpointError, match="another shape") as info:
        evaluate_checkpoint(config)
    assert "size mismatch" in str(info.value)
    (run / "policy.json").write_bytes(b"\x00garbage{")
    with pytest.raises(CheckpointError, match=r"not a readable pi_train policy record.*--run"):
        evaluate_checkpoint(config)


def test_unknown_pins_missing_checkpoints_and_empty_splits_say_what_to_do(
    trained: Path, train_lake: FakeLake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = train_lake.layout.root
    assert main(["eval", str(trained), "--dataset", "no-such-pin", "--lake", root]) == 1
    err = capsys.readouterr().err
    assert "'no-such-pin'" in err and "pilake dataset list" in err
    assert main(["eval", str(tmp_path / "nothing"), "--dataset", "eval-val", "--lake", root]) == 1
    assert "no checkpoint at" in capsys.readouterr().err
    assert main(["eval", str(tmp_path), "--dataset", "eval-val", "--lake", root]) == 1
    assert "--run" in capsys.readouterr().err  # no policy.json anywhere above
    with pytest.raises(EvalError, match=r"'no-such-pin'.*pilake dataset list"):
        train(_config(train_lake, tmp_path / "a", eval_fraction=None, eval_dataset="no-such-pin"))
    with pytest.raises(EvalError, match=r"eval_fraction=0\.01 holds out no episode of the selection's 4"):
        train(_config(train_lake, tmp_path / "b", eval_fraction=0.01))
    with pytest.raises(PiTrainError, match="covers all 2 episodes"):
        pin = {"dataset": "eval-held", "catalog": str(tmp_path / "catalog")}  # a lake pin: no catalog read
        train(_config(train_lake, tmp_path / "c", eval_fraction=None, eval_dataset="eval-held", **pin))


def test_a_resumed_run_logs_the_evals_of_a_run_that_never_stopped(
    trained: Path, train_lake: FakeLake, tmp_path: Path
) -> None:
    out = tmp_path / "resumed"
    train(_config(train_lake, out, steps=3))  # checkpoints at 2 and 3; evals at 2 and 3
    assert [r["step"] for r in _evals(out)] == [2, 3]
    train(_config(train_lake, out, steps=4, resume=True))  # the step-3 eval stays: it was real
    assert [r["step"] for r in _evals(out)] == [2, 3, 4]
    assert [_evals(out)[i] for i in (0, 2)] == _evals(trained)


def test_jax_runs_evaluate_and_their_orbax_checkpoints_score_offline(
    trained: Path, train_lake: FakeLake, tmp_path: Path
) -> None:
    out = tmp_path / "jax"
    pin = {"eval_fraction": None, "eval_dataset": "eval-val"}
    train(_config(train_lake, out, framework="jax", device="cpu", **pin))
    split = json.loads((out / "eval_split.json").read_text())
    assert split["dataset"] == "eval-val" and split["train"] == ["ep-002", "ep-003"]
    # what a live run reads beyond its snapshot: the held-out pin's pairs (GC keeps them)
    from pi_jobs.ops._run_files import read_pairs

    read = read_pairs(out)
    assert read is not None
    held = set(zip(split["held_out"], split["held_out_attempts"], strict=True))
    assert held and held <= set(zip(*read, strict=True))
    last = _evals(out)[-1]
    assert last["step"] == 4 and last["samples"] == 6
    step_dir = out / "checkpoints" / "4"
    report = evaluate_checkpoint(
        EvalConfig(
            checkpoint=str(step_dir), lake=train_lake.layout.root, dataset="eval-val", samples=6, plot=False
        )
    )
    assert report["framework"] == "jax" and report["step"] == 4
    assert report["loss"] == pytest.approx(last["eval_loss"], rel=1e-5)


def test_two_processes_split_alike_and_rank_0_scores(
    trained: Path, train_lake: FakeLake, tmp_path: Path
) -> None:
    config = _config(train_lake, tmp_path / "two", batch_size=2, threads=None)
    assert launch(config, 2, env=child_env()) == 0  # agree() passed: both ranks hold one train side
    out = Path(config.out_dir)
    for rank in (0, 1):
        seen = {e for r in read_jsonl(out / f"steps.rank{rank}.jsonl") for e, _ in r["samples"]}
        assert seen and seen <= {"ep-000", "ep-002"}
    assert [r["step"] for r in _evals(out)] == [2, 4] and all(r["samples"] == 6 for r in _evals(out))
