"""`pilake view EPISODE --rerun OUT.rrd`, read back with the Rerun SDK's dataframe API."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pi_format.video import decode_container
from pi_jobs.cli import main
from pi_jobs.ui import NotFound, write_rerun

from tests.jobs.ui.conftest import UiLake


def _column(table, name: str) -> list:
    return [v for v in table.column(name).to_pylist() if v is not None]


def test_rerun_recording_reads_back(ui_lake: UiLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rerun as rr  # the `rerun` extra (dev installs it): a missing SDK fails, never skips

    ep = ui_lake.lake.episodes["ep-001"]
    out = tmp_path / "ep-001.rrd"
    monkeypatch.setenv("PILAKE_LAKE", ui_lake.layout.root)
    assert main(["view", "ep-001", "--rerun", str(out)]) == 0
    recording = rr.dataframe.load_recording(str(out))
    table = recording.view(index="time", contents="/**").select().read_all()
    steps = len(ep.proprio)
    for d in range(ep.proprio.shape[1]):
        values = [v[0] for v in _column(table, f"/proprio/{d}:Scalar")]
        np.testing.assert_allclose(values, ep.proprio[:, d], rtol=0)
    for d in range(ep.action.shape[1]):
        np.testing.assert_allclose([v[0] for v in _column(table, f"/action/{d}:Scalar")], ep.action[:, d])
    # one timeline: step t at t / 10 s (the fixture's control rate), frames on the same clock
    times = table.column("time").to_pylist()
    step_times = [t for t, v in zip(times, table.column("/proprio/0:Scalar").to_pylist(), strict=True) if v]
    assert [int(t.value) if hasattr(t, "value") else t for t in step_times] == [
        round(i * 1e9 / 10) for i in range(steps)
    ]
    for camera in ep.cameras:
        # one frame reference per frame, and the asset: an MP4 of exactly the camera's frames
        assert len(_column(table, f"/cameras/{camera}:VideoTimestamp")) == len(ep.frames[camera])
        assert table.column(f"/cameras/{camera}:MediaType").to_pylist()[0] == ["video/mp4"]
        mp4 = bytes(table.column(f"/cameras/{camera}:Blob").to_pylist()[0][0])
        assert sum(1 for _ in decode_container(mp4)) == len(ep.frames[camera])
    summary = write_rerun(ui_lake.layout, "ep-001", tmp_path / "again.rrd")
    assert summary.frames == {c: len(ep.frames[c]) for c in ep.cameras} and summary.steps == steps


def test_rerun_unknown_episode(ui_lake: UiLake, tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="not in the lake"):
        write_rerun(ui_lake.layout, "ep-404", tmp_path / "x.rrd")
