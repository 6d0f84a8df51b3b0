"""pi_train lineage (`_lineage`): lineage.json and every checkpoint say which pin (name, content
hash, snapshot versions), which code and which run; a resume keeps the run id and its first
start; a corrupt lineage.json stops a resume with a clear error instead of a new identity."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pi_format.lake import PinStore
from pi_jobs.maintenance.datasets import create_dataset
from pi_train import LineageError, TrainConfig, code_version, read_lineage, train
from pi_train._lineage import RUN_ID_ENV

from tests.fixtures.lake_factory import FakeLake, write_lake


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    """A lake of its own (the shared lake gets no pins): 2 episodes of 12 steps."""
    lake = write_lake(
        tmp_path_factory.mktemp("lineage_lake"), episodes=2, steps=12, cameras=("front",), size=(32, 32)
    )
    create_dataset(lake.layout, "lineage-pin", episode_ids=["ep-000", "ep-001"])
    return lake


def _config(lake: FakeLake, out: Path, **kw: object) -> TrainConfig:
    options: dict[str, object] = {
        "lake": lake.layout.root,
        "catalog": str(out.parent / "catalog"),
        "framework": "torch",
        "steps": 2,
        "batch_size": 4,
        "action_horizon": 4,
        "workers": 0,
        "checkpoint_every": 0,
        "log_every": 1,
        "out_dir": str(out),
        "plot": False,
    }
    return TrainConfig(**{**options, **kw})  # type: ignore[arg-type]


def test_lineage_json_and_checkpoints_name_the_pin_and_a_resume_keeps_the_run(
    lake: FakeLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setenv(RUN_ID_ENV, "run-'ü'-1")
    pin = PinStore(lake.layout).get("lineage-pin")
    out = tmp_path / "out"
    train(_config(lake, out, dataset="lineage-pin"))
    first = read_lineage(out / "lineage.json")
    assert first["run_id"] == "run-'ü'-1" and first["mixture"] is None
    (read,) = first["pins"]
    assert (read["name"], read["content_hash"]) == ("lineage-pin", pin.content_hash)
    assert read["table_versions"] == dict(pin.table_versions) and read["episodes"] == 2
    assert first["code"] == code_version() and first["world_size"] == first["host_count"] == 1

    monkeypatch.setenv(RUN_ID_ENV, "another-id")  # a resume is the same run whatever the launcher says
    train(_config(lake, out, dataset="lineage-pin", steps=3, resume=True))
    second = read_lineage(out / "lineage.json")
    assert second["run_id"] == first["run_id"] and second["started_at_ns"] == first["started_at_ns"]
    assert second["opened_at_ns"] > first["opened_at_ns"]
    extra = torch.load(out / "checkpoints" / "step_000000003.pt", weights_only=False)["extra"]
    assert extra["lineage"]["run_id"] == first["run_id"]
    assert extra["lineage"]["pins"] == first["pins"] and "opened_at_ns" not in extra["lineage"]

    # a corrupt lineage.json: the resume stops before training, saying what and what to do
    (out / "lineage.json").write_bytes(b'{"format": "pi_train.lineage/1", "run_id": \xff')
    with pytest.raises(LineageError, match=r"lineage\.json is not a readable lineage record.*'lineage'"):
        train(_config(lake, out, dataset="lineage-pin", steps=4, resume=True))


def test_a_selection_by_sql_has_no_pin_hash_but_a_fingerprint(
    lake: FakeLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(RUN_ID_ENV, raising=False)
    out = tmp_path / "sql"
    config = _config(lake, out, steps=1)  # every committed episode: no sql, no pin
    train(config)
    record = json.loads((out / "lineage.json").read_text())
    (read,) = record["pins"]
    assert read["name"] is None and read["content_hash"] is None and len(read["fingerprint"]) == 16
    assert record["run_id"].startswith("sql-")  # derived from the out dir: the same on every rank


def test_code_version_says_unknown_without_git(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_git(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("git")

    code_version.cache_clear()
    monkeypatch.setattr(subprocess, "run", no_git)
    try:
        assert code_version()["git_commit"] == "unknown"
    finally:
        code_version.cache_clear()
