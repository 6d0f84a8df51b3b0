"""Snapshots: a dataset opened from a snapshot reads the same data, whatever happened since."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from deltalake import DeltaTable, write_deltalake
from pi_catalog import Catalog, PiCatalogError
from pi_loader import Dataset, Loader, SampleSpec, Snapshot, SnapshotDataMissingError, SnapshotError

from tests.fixtures.lake_factory import FakeLake, append_episodes, make_episode, write_lake

SPEC = SampleSpec(cameras=("front",), action_horizon=2)


@pytest.fixture
def small_lake(tmp_path: Path) -> FakeLake:
    return write_lake(tmp_path / "lake", episodes=2, steps=5, cameras=("front",), size=(32, 32))


def _append_episode(lake: FakeLake, index: int) -> None:
    ep = make_episode(index, steps=5, cameras=("front",), size=lake.size, seed=0)
    append_episodes(lake.layout, [ep], lake.size)


def _all(ds: Dataset) -> list[tuple[str, int, bytes, bytes]]:
    out = []
    for batch in Loader(ds, batch_size=4):
        for i in range(len(batch["step"])):
            out.append(
                (
                    str(batch["episode_id"][i]),
                    int(batch["step"][i]),
                    batch["observation.images.front"][i].tobytes(),
                    batch["action"][i].tobytes(),
                )
            )
    return out


def test_snapshot_file_reopens_the_same_data_after_new_commits(small_lake: FakeLake, tmp_path: Path) -> None:
    ds = Dataset(small_lake.layout, spec=SPEC, seed=2)
    snap = ds.snapshot
    assert snap.table_versions == ds.table_versions and snap.episode_ids == ("ep-000", "ep-001")
    path = snap.save(tmp_path / "runs" / "snapshot.json")
    before = _all(ds)
    _append_episode(small_lake, 7)
    now = Dataset(small_lake.layout, spec=SPEC, seed=2)
    assert "ep-007" in now.episode_ids and now.table_versions != ds.table_versions
    loaded = Snapshot.load(path)
    assert loaded == snap and loaded.fingerprint == snap.fingerprint
    again = Dataset(small_lake.layout, snapshot=loaded, spec=SPEC, seed=2)
    assert again.episode_ids == ds.episode_ids and again.table_versions == ds.table_versions
    assert _all(again) == before
    assert again.snapshot.fingerprint == snap.fingerprint
    with pytest.raises(ValueError, match="not both"):
        Dataset(small_lake.layout, snapshot=loaded, episode_ids=["ep-000"], spec=SPEC)
    with pytest.raises(SnapshotError, match="cannot read the snapshot file"):
        Snapshot.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(SnapshotError, match="not a pi_loader snapshot"):
        Snapshot.load(tmp_path / "bad.json")


def test_named_snapshot_in_the_catalog(small_lake: FakeLake, tmp_path: Path) -> None:
    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.rebuild_from_lake(small_lake.layout)
    ds = Dataset(
        small_lake.layout, sql="SELECT episode_id FROM episodes", catalog=catalog.location, spec=SPEC
    )
    ds.snapshot.save_to_catalog(catalog.location, "pick-v1")
    ds.snapshot.save_to_catalog(catalog.location, "pick-v1")  # the same snapshot again: a no-op
    assert catalog.snapshot_names() == ["pick-v1"]
    _append_episode(small_lake, 8)
    again = Dataset(small_lake.layout, snapshot="pick-v1", catalog=catalog.location, spec=SPEC)
    assert again.episode_ids == ds.episode_ids and again.sql == "SELECT episode_id FROM episodes"
    other = Dataset(small_lake.layout, spec=SPEC).snapshot
    with pytest.raises(PiCatalogError, match="'pick-v1' is taken by a different snapshot"):
        other.save_to_catalog(catalog.location, "pick-v1")
    with pytest.raises(PiCatalogError, match=r"no dataset snapshot named 'nope'.*\['pick-v1'\]"):
        Dataset(small_lake.layout, snapshot="nope", catalog=catalog.location, spec=SPEC)
    with pytest.raises(ValueError, match="pass catalog"):
        Dataset(small_lake.layout, snapshot="pick-v1", spec=SPEC)


def test_snapshot_whose_files_were_vacuumed_fails_clearly(small_lake: FakeLake) -> None:
    snap = Dataset(small_lake.layout, spec=SPEC).snapshot
    for name in ("steps", "video"):
        table = DeltaTable(small_lake.layout.table(name))
        write_deltalake(table, table.to_pyarrow_table(), mode="overwrite")  # same rows, new files
        removed = DeltaTable(small_lake.layout.table(name)).vacuum(
            retention_hours=0, enforce_retention_duration=False, dry_run=False
        )
        assert removed
    # Opening reads only the episodes table (the locators), so it succeeds; the first sample
    # reads the steps file the locator names and says that it is gone.
    ds = Dataset(small_lake.layout, snapshot=snap, spec=SPEC)
    assert len(ds) == 10
    with pytest.raises(
        SnapshotDataMissingError, match=r"data file\(s\) of the steps table at version .* are gone"
    ):
        ds[0]
    with pytest.raises(SnapshotDataMissingError, match=r"of the video table at version .* are gone"):
        ds._gather.video.frame(0, 0, 0)


def test_snapshot_of_another_lake_is_refused(small_lake: FakeLake, tmp_path: Path) -> None:
    snap = Dataset(small_lake.layout, spec=SPEC).snapshot
    forged = Snapshot(
        lake_root=snap.lake_root,
        table_versions=snap.table_versions,
        episode_ids=snap.episode_ids,
        attempt_ids=("x", "y"),
    )
    with pytest.raises(SnapshotError, match="another committed attempt"):
        Dataset(small_lake.layout, snapshot=forged, spec=SPEC)
    with pytest.raises(SnapshotError, match="one attempt_id per episode_id"):
        Snapshot(lake_root="/x", table_versions={}, episode_ids=("a",), attempt_ids=())
    np.testing.assert_equal(Snapshot.from_json(snap.to_json()).to_dict(), snap.to_dict())
