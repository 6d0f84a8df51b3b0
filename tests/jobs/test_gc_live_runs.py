"""GC keeps what a live training run reads (pi_jobs.maintenance.live_runs), with the real lake,
the real chdb catalog and a Dataset opened before GC, as a running loader holds it.

The run reads pin `p` (ep-000, ep-001). The pin is deleted and ep-000 is deleted too, and so is
ep-002 in the same file group: GC rewrites the group and, at retention 0, would delete the
files the open Dataset reads. While the run's heartbeat is fresh, GC keeps ep-000's rows and
every file removed since the run started, and the open Dataset reads every sample; once the
run is recorded finished, the next GC removes them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pi_catalog import Catalog, TrainingRun, record_run_reads, record_training_run
from pi_format.lake.file_groups import read_lake_files
from pi_format.lake.tombstones import data_files
from pi_jobs.cli import main
from pi_jobs.maintenance import GcConfig, gc
from pi_jobs.maintenance.datasets import create_dataset, delete_dataset
from pi_jobs.maintenance.deletion import delete_episodes
from pi_jobs.maintenance.live_runs import RunCheckError, live_run_holds
from pi_loader import Dataset, SampleSpec

from tests.fixtures.lake_factory import write_lake

SPEC = SampleSpec(cameras=("front",), action_horizon=3)
ZERO = GcConfig(retention_hours=0)


def _read_all(ds: Dataset) -> list[tuple[str, int]]:
    out = []
    for i in range(len(ds)):
        sample: dict[str, Any] = ds[i]
        out.append((str(sample["episode_id"]), int(sample["step"])))
    return out


def _stored(layout: Any) -> set[str]:
    """Episodes with an episodes row in the lake (deleted or not): what GC has not removed."""
    return set(read_lake_files(layout).markers.column("episode_id").to_pylist())


def _files(layout: Any) -> set[str]:
    return {f"{t}/{f.path}" for t in ("episodes", "steps", "video") for f in data_files(layout.table(t))}


def _run(run_id: str, status: str, started: int, beat: int) -> TrainingRun:
    return TrainingRun(
        run_id=run_id,
        status=status,
        started_at_ns=started,
        heartbeat_at_ns=beat,
        finished_at_ns=0 if status == "running" else beat,
        pin_names=("p",),
        content_hashes=("",),
    )


def test_gc_keeps_a_live_runs_rows_and_files_and_removes_them_after_it_ends(tmp_path: Path) -> None:
    lake = write_lake(tmp_path / "lake", episodes=3, steps=6, cameras=("front",), size=(24, 24))
    catalog = Catalog(str(tmp_path / "catalog"))
    pin = create_dataset(lake.layout, "p", episode_ids=["ep-000", "ep-001"])
    started = time.time_ns()
    run_id = "run 'live'; DROP TABLE training_runs; -- ü"
    record_training_run(catalog, _run(run_id, "running", started, started))
    record_run_reads(catalog, run_id, pin.episode_ids, pin.attempt_ids, at_ns=started)
    # a stale run (no heartbeat for longer than the window) protects nothing
    record_training_run(catalog, _run("stale", "running", started - 10**13, started - 10**13))
    record_run_reads(catalog, "stale", ["ep-002"], [lake.episodes["ep-002"].attempt_id], at_ns=started)

    ds = Dataset(lake.layout, snapshot="p", spec=SPEC, seed=0)  # the run's loader, opened now
    expected = _read_all(ds)
    opened = _files(lake.layout)  # the data files of the lake when the run opened it
    delete_dataset(lake.layout, "p")
    delete_episodes(lake.layout, ["ep-000", "ep-002"], reason="test", selection="ids")

    holds = live_run_holds(str(catalog.location))
    assert [h.run_id for h in holds] == [run_id]
    report = gc(lake.layout, ZERO, live_runs=holds)
    assert report.held_by_runs == {run_id: ["ep-000"]}
    assert report.files_kept_for_runs > 0, report.lines()
    assert any("live training run" in line for line in report.lines())
    assert "ep-000" in _stored(lake.layout)
    assert opened <= _files(lake.layout)  # every file the open loader may read is still there
    assert _read_all(ds) == expected

    # the run ends: the next gc removes ep-000 and the files removed while it ran
    record_training_run(catalog, _run(run_id, "finished", started, time.time_ns()))
    assert live_run_holds(str(catalog.location)) == []
    report = gc(lake.layout, ZERO, live_runs=[])
    assert report.files_kept_for_runs == 0 and sum(report.files_deleted.values()) > 0
    assert "ep-000" not in _stored(lake.layout)
    assert not opened <= _files(lake.layout)


def test_pilake_gc_stops_before_removing_anything_when_the_catalog_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lake = write_lake(tmp_path / "lake", episodes=2, steps=4, cameras=("front",), size=(24, 24))
    delete_episodes(lake.layout, ["ep-000"], reason="test", selection="ids")
    monkeypatch.setenv("PILAKE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PILAKE_LAKE", lake.layout.root)
    monkeypatch.setenv("PILAKE_CATALOG", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(RunCheckError, match="nothing was removed"):
        live_run_holds("http://127.0.0.1:9")
    assert main(["gc", "--retention-hours", "0"]) == 1
    assert "--no-run-check" in capsys.readouterr().err
    assert "ep-000" in _stored(lake.layout)
    assert main(["gc", "--retention-hours", "0", "--no-run-check"]) == 0
    assert "ep-000" not in _stored(lake.layout)
