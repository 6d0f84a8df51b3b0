"""TrainConfig and ProcessGroup: every validation branch names the option, and JSON round-trips."""

from __future__ import annotations

import pytest
from pi_train import ProcessGroup, TrainConfig
from pi_train._config import compute_threads


def test_json_round_trip() -> None:
    config = TrainConfig(
        lake="/lake",
        sql="SELECT episode_id FROM episodes",
        catalog="/cat",
        framework="jax",
        cameras=("front",),
        image_size=(32, 48),
        threads=1,
    )
    assert TrainConfig.from_json(config.to_json()) == config
    assert str(config.checkpoints) == "runs/train/checkpoints"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lake": ""}, "lake must be a non-empty path"),
        ({"framework": "mxnet"}, "framework must be one of"),
        ({"steps": 0}, "steps must be an int >= 1, got 0"),
        ({"batch_size": True}, "batch_size must be an int >= 1"),
        ({"workers": -1}, "workers must be an int >= 0, got -1"),
        ({"checkpoint_every": -5}, "checkpoint_every must be an int >= 0"),
        ({"log_every": 0}, "log_every must be an int >= 1"),
        ({"seed": -1}, "seed must be an int >= 0"),
        ({"threads": 0}, "threads must be an int >= 1"),
        ({"sql": "SELECT 1", "dataset": "x", "catalog": "/c"}, "pass sql or dataset"),
        ({"sql": "SELECT 1"}, "sql and dataset need catalog"),
        ({"learning_rate": 0.0}, "learning_rate must be > 0"),
        ({"loss": "huber"}, "loss must be one of"),
        ({"normalization": "minmax"}, "normalization must be one of"),
        ({"device": "tpu"}, "device must be one of"),
        ({"image_size": (16, 32)}, "image_size must be \\(height, width\\) with ints >= 20"),
        ({"image_size": (32,)}, "image_size must be"),
    ],
)
def test_bad_options_name_themselves(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TrainConfig(**{"lake": "/lake", **kwargs})


def test_cameras_must_not_be_a_single_string() -> None:
    with pytest.raises(TypeError, match="cameras must be a sequence of names"):
        TrainConfig(lake="/lake", cameras="front")  # type: ignore[arg-type]


def test_unknown_json_fields_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown TrainConfig fields \['bogus'\]"):
        TrainConfig.from_json('{"lake": "/lake", "bogus": 1}')
    with pytest.raises(ValueError, match="must be an object"):
        TrainConfig.from_json("[1]")


def test_process_group_from_torchrun_variables() -> None:
    group = ProcessGroup.from_env(
        {
            "RANK": "1",
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "1234",
            "LOCAL_WORLD_SIZE": "2",
        }
    )
    assert group == ProcessGroup(rank=1, world_size=2, address="10.0.0.1", port=1234, local_world_size=2)
    assert group.distributed and not ProcessGroup.from_env({}).distributed
    with pytest.raises(ValueError, match="rank must be < world_size=2, got 2"):
        ProcessGroup(rank=2, world_size=2)
    with pytest.raises(ValueError, match="RANK must be a whole number"):
        ProcessGroup.from_env({"RANK": "one"})


def test_compute_threads_leave_cores_to_the_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert compute_threads(TrainConfig(lake="/l", workers=2)) == 6
    assert compute_threads(TrainConfig(lake="/l", workers=2), local_processes=2) == 2
    assert compute_threads(TrainConfig(lake="/l", workers=9)) == 1
    assert compute_threads(TrainConfig(lake="/l", threads=3)) == 3
