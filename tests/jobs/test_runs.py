"""Lineage end to end: `pilake train` registers its run (pin, content hash, snapshot versions,
code version) in the real chdb catalog, `pilake runs` and `pilake dataset show` list it, the
checkpoint carries it; a catalog that is down costs a warning, not the run, and `pilake runs
--rebuild` records it later from the out dir; corrupt run files are refused with a clear error.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from pi_catalog import Catalog, _engine, training_runs
from pi_format.lake import PinStore
from pi_jobs.cli import main
from pi_jobs.ops.runs import RecorderOptions, RunRecorder, RunRecordError, read_run_dir

from tests.fixtures.lake_factory import FakeLake, write_lake

TRAIN = [
    "--steps",
    "2",
    "--batch-size",
    "4",
    "--action-horizon",
    "4",
    "--workers",
    "0",
    "--checkpoint-every",
    "0",
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    lake = write_lake(
        tmp_path_factory.mktemp("runs_lake"), episodes=2, steps=12, cameras=("front",), size=(32, 32)
    )
    assert main_env_free(["dataset", "create", "pick-v1"], lake) == 0
    return lake


def main_env_free(argv: list[str], lake: FakeLake) -> int:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PILAKE_LAKE", lake.layout.root)
        return main(argv)


@pytest.fixture
def env(lake: FakeLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PILAKE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PILAKE_LAKE", lake.layout.root)
    monkeypatch.setenv("PILAKE_CATALOG", str(tmp_path / "catalog"))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.delenv("PILAKE_RUN_ID", raising=False)
    return tmp_path


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_pilake_train_records_its_run_and_runs_and_dataset_show_list_it(
    lake: FakeLake, env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    pin = PinStore(lake.layout).get("pick-v1")
    out = env / "run1"
    assert main(["train", "--dataset", "pick-v1", *TRAIN, "--out", str(out)]) == 0
    # the training process never opened the embedded catalog: a child process wrote the rows
    current = _engine._current
    assert current is None or current.path != str(env / "catalog")
    (run,) = _json(capsys, ["runs", "--json"])
    assert run["status"] == "finished" and run["out_dir"] == str(out.resolve())
    (read,) = run["pins"]
    assert (read["name"], read["content_hash"], read["episodes"]) == ("pick-v1", pin.content_hash, 2)
    assert read["table_versions"] == dict(pin.table_versions)
    assert run["code_version"] == importlib.metadata.version("pi-lake")
    assert len(run["git_commit"]) == 40 or run["git_commit"] == "unknown"
    assert (run["host_count"], run["world_size"], run["framework"]) == (1, 1, "torch")
    lineage = json.loads((out / "lineage.json").read_text())
    assert lineage["run_id"] == run["run_id"]

    capsys.readouterr()
    assert main(["runs"]) == 0
    text = capsys.readouterr().out
    assert run["run_id"] in text and f"pick-v1@{pin.content_hash[:12]}" in text

    shown = _json(capsys, ["dataset", "show", "pick-v1", "--json"])
    assert [(r["run_id"], r["same_content"]) for r in shown["runs"]] == [(run["run_id"], True)]

    extra = torch.load(out / "checkpoints" / "step_000000002.pt", weights_only=False)["extra"]
    assert extra["lineage"]["run_id"] == run["run_id"]
    assert extra["lineage"]["pins"][0]["content_hash"] == pin.content_hash
    assert extra["lineage"]["code"]["package"] == run["code_version"] and len(extra["loader"]) == 1


def test_training_goes_on_when_the_catalog_is_down_and_rebuild_records_the_run_later(
    env: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    out = env / "run2"
    with caplog.at_level(logging.WARNING, logger="pi_jobs.ops.runs"):
        code = main(
            ["train", "--dataset", "pick-v1", *TRAIN, "--out", str(out), "--catalog", "http://127.0.0.1:9"]
        )
    assert code == 0
    warnings = [r.getMessage() for r in caplog.records if "could not record run" in r.getMessage()]
    assert len(warnings) == 1 and "pilake runs --rebuild" in warnings[0]  # once per failure streak
    state = json.loads((out / "run.json").read_text())
    assert state["status"] == "finished"
    assert training_runs(Catalog(str(env / "catalog"))) == []
    assert main(["runs", "--rebuild", str(out)]) == 0
    (run,) = _json(capsys, ["runs", "--json", "--pin", "pick-v1"])
    assert (run["run_id"], run["status"]) == (state["run_id"], "finished")


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\xff\xfe\x00garbage",
        b'{"format": "pi_train.lineage/1", "run_id": "r", "pins": [',
        b'{"format": "something-else/1"}',
        b"[1, 2, 3]",
        b'{"format": "pi_train.lineage/1", "run_id": "", "pins": []}',
        b'{"format": "pi_train.lineage/1", "run_id": "r", "pins": "not a list"}',
    ],
)
def test_a_corrupt_lineage_file_is_refused_clearly_and_the_good_run_beside_it_is_recorded(
    env: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    good = env / "good"
    good.mkdir()
    (good / "lineage.json").write_text(
        json.dumps({"format": "pi_train.lineage/1", "run_id": "good-1", "pins": [], "started_at_ns": 1})
    )
    bad = env / "bad"
    bad.mkdir()
    (bad / "lineage.json").write_bytes(content)
    with pytest.raises(RunRecordError, match=r"bad/lineage.json .*(lineage|run_id)"):
        read_run_dir(str(bad))
    capsys.readouterr()
    assert main(["runs", "--rebuild", str(good), str(bad)]) == 1  # all or nothing
    err = capsys.readouterr().err
    assert "bad/lineage.json" in err and "move" in err
    assert main(["runs", "--rebuild", str(good)]) == 0
    assert [r.run_id for r in training_runs(Catalog(str(env / "catalog")))] == ["good-1"]


def test_a_recorder_meeting_a_corrupt_lineage_file_warns_and_records_the_run_without_pins(env: Path) -> None:
    bad = env / "bad"
    bad.mkdir()
    (bad / "lineage.json").write_bytes(b"\xff\xfe\x00garbage")
    options = RecorderOptions(catalog=str(env / "catalog"), out_dir=str(bad), run_id="bad-1", heartbeat_s=0.1)
    catalog = Catalog(str(env / "catalog"))
    with RunRecorder(options) as recorder:
        (first,) = training_runs(catalog, run_id="bad-1")
        beats = {first.heartbeat_at_ns}
        for _ in range(600):  # the heartbeat thread records again (each write is a child process)
            beats |= {r.heartbeat_at_ns for r in training_runs(catalog, run_id="bad-1")}
            if len(beats) > 1:
                break
            time.sleep(0.1)
        assert len(beats) > 1
        catalog.close()  # hand the path back to the recorder's writer
        recorder.finish("failed")
    assert any("lineage" in w for w in recorder.warnings)
    (row,) = training_runs(Catalog(str(env / "catalog")), run_id="bad-1")
    assert (row.status, row.pin_names) == ("failed", ())


def test_a_corrupt_run_json_is_refused_clearly(env: Path) -> None:
    out = env / "r"
    out.mkdir()
    (out / "lineage.json").write_text(json.dumps({"format": "pi_train.lineage/1", "run_id": "r", "pins": []}))
    (out / "run.json").write_text(json.dumps({"format": "pilake.run/1", "status": "exploded'; --"}))
    with pytest.raises(
        RunRecordError, match=r"run\.json is not a readable run record \(missing \'started_at_ns\'\)"
    ):
        read_run_dir(str(out))


def test_runs_shows_a_running_run_without_a_fresh_heartbeat_as_lost() -> None:
    from pi_catalog import LIVE_WINDOW_S, TrainingRun
    from pi_jobs.cli._runs import run_dicts

    now = time.time_ns()
    old = now - int((LIVE_WINDOW_S + 1) * 1e9)
    runs = [
        TrainingRun(run_id="fresh", status="running", started_at_ns=old, heartbeat_at_ns=now),
        TrainingRun(run_id="dead", status="running", started_at_ns=old, heartbeat_at_ns=old),
        TrainingRun(
            run_id="done", status="finished", started_at_ns=old, heartbeat_at_ns=old, finished_at_ns=old
        ),
    ]
    assert [r["status"] for r in run_dicts(runs, now)] == ["running", "lost", "finished"]
