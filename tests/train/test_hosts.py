"""Who is who in a multi-host run: torchrun's variables and `HostPlan` refuse every bad value with
a message that names the variable, the value and the fix, before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_train import HostPlan, ProcessGroup, TrainConfig, launch
from pi_train._hosts import TIMEOUT_ENV, group_from_env

from tests.train.conftest import REPO, child_env


def test_torchrun_variables_of_a_two_host_run() -> None:
    env = {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "MASTER_ADDR": "10.0.0.5",
        "MASTER_PORT": "29400",
        TIMEOUT_ENV: "20",
    }
    assert group_from_env(env) == ProcessGroup(
        rank=3, world_size=4, address="10.0.0.5", port=29400, local_world_size=2, node_rank=1,
        rendezvous_timeout_s=20.0,
    )  # fmt: skip
    # the host's rank from RANK // LOCAL_WORLD_SIZE when the launcher sets neither GROUP_RANK nor NODE_RANK
    assert group_from_env({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}).node_rank == 1
    # what launch gives each process is what group_from_env reads back
    plan = HostPlan(nnodes=2, node_rank=1, nproc_per_node=2, master_addr="10.0.0.5", master_port=29400)
    assert [group_from_env(plan.rank_env(local, 29400)).rank for local in (0, 1)] == [2, 3]
    assert group_from_env(plan.rank_env(1, 29400)).node_rank == 1


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "one"}, "RANK must be a whole number >= 0, got 'one'"),
        ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK must be >= 0, got '-1'"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE must be >= 1, got '0'"),
        ({"WORLD_SIZE": "2.0"}, "WORLD_SIZE must be a whole number"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK must be < WORLD_SIZE=2, got RANK=2"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT must be a TCP port in 1..65535, got '70000'"),
        ({"MASTER_PORT": "0"}, "MASTER_PORT must be >= 1"),
        ({"MASTER_ADDR": ""}, "MASTER_ADDR must be host 0's address"),
        ({"MASTER_ADDR": "host 0"}, "MASTER_ADDR must be host 0's address"),
        ({"MASTER_ADDR": "10.0.0.1\x00"}, "MASTER_ADDR must be host 0's address"),
        (
            {"WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2"},
            "WORLD_SIZE=3 is not a multiple of LOCAL_WORLD_SIZE=2",
        ),
        (
            {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "2"},
            "GROUP_RANK=2 is out of range for 2",
        ),
        ({"NODE_RANK": "x1"}, "NODE_RANK must be a whole number"),
        ({TIMEOUT_ENV: "nan"}, f"{TIMEOUT_ENV} must be seconds in"),
        ({TIMEOUT_ENV: "-5"}, f"{TIMEOUT_ENV} must be seconds in"),
    ],
)
def test_garbage_in_the_environment_is_a_clear_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        ProcessGroup.from_env(env)


_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", TIMEOUT_ENV)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(_NAMES), st.text(max_size=12) | st.integers(-3, 70000).map(str)))
def test_any_environment_gives_a_valid_group_or_names_the_variable(env: dict[str, str]) -> None:
    try:
        group = group_from_env(env)
    except ValueError as err:
        assert any(name in str(err) for name in (*_NAMES, "NODE_RANK")), err
        return
    assert 0 <= group.rank < group.world_size and 1 <= group.port <= 65535
    assert 0 <= group.node_rank < group.world_size // group.local_world_size
    assert group.address and 0 < group.rendezvous_timeout_s <= 86400


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"nnodes": 2, "node_rank": 2, "master_port": 29500},
            r"node_rank must be in 0\.\.1 \(nnodes=2\), got 2",
        ),
        ({"nnodes": 2, "node_rank": -1, "master_port": 29500}, "node_rank must be an int >= 0, got -1"),
        ({"nnodes": 0}, "nnodes must be an int >= 1, got 0"),
        ({"nnodes": 2, "node_rank": 1}, "a run of nnodes=2 hosts needs master_port"),
        ({"nnodes": 2, "master_port": 65536}, "the rendezvous port must be an int in 1..65535"),
        ({"master_addr": " "}, "master_addr must be host 0's address"),
        ({"rendezvous_timeout_s": 0}, "rendezvous_timeout_s must be seconds"),
        ({"rendezvous_timeout_s": float("inf")}, "rendezvous_timeout_s must be seconds"),
    ],
)
def test_host_plan_refuses_out_of_range_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HostPlan(**kwargs)  # type: ignore[arg-type]


def test_launch_refuses_a_node_rank_out_of_range_before_starting_anything(tmp_path: Path) -> None:
    config = TrainConfig(lake=str(tmp_path / "lake"), out_dir=str(tmp_path / "run"))
    with pytest.raises(ValueError, match=r"node_rank must be in 0\.\.1"):
        launch(config, 1, nnodes=2, node_rank=2, master_port=29500)
    assert not (tmp_path / "run").exists()  # nothing written, no process started


def test_pilake_train_with_a_node_rank_out_of_range_says_so(tmp_path: Path) -> None:
    argv = ["train", "--lake", str(tmp_path / "lake"), "--out", str(tmp_path / "run")]
    argv += ["--nnodes", "2", "--node-rank", "5", "--master-port", "29500"]
    env = dict(child_env(), PILAKE_HOME=str(tmp_path / "home"))
    done = subprocess.run(
        [sys.executable, "-m", "pi_jobs.cli", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "node_rank must be in 0..1 (nnodes=2), got 5" in done.stdout + done.stderr
