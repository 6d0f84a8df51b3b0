"""The data lifecycle (issue 12): pin, compact, GC with zero retention, read the pin back sample
for sample and resume a loader state saved before compaction; delete the pin, GC, see the space
return; delete episodes under a pin and without one. Every test ends with the audit."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pi_catalog import Catalog
from pi_format import LakeLayout
from pi_format.lake import EpisodeRows, PinStore, read_committed
from pi_format.lake.file_groups import read_lake_files
from pi_format.lake.tombstones import data_files
from pi_jobs.maintenance import CompactConfig, GcConfig, compact, gc, plan_gc
from pi_jobs.maintenance.datasets import DatasetError, check_dataset, create_dataset, delete_dataset
from pi_jobs.maintenance.deletion import delete_episodes
from pi_jobs.ops.audit import audit
from pi_loader import Dataset, Loader, SampleSpec, SnapshotDataMissingError

from tests.fixtures.lake_factory import FakeLake, append_episodes, lake_rows, make_episode, write_lake

SPEC = SampleSpec(cameras=("front",), action_horizon=3)
ZERO = GcConfig(retention_hours=0)


def _lake(root: Path, episodes: int = 8) -> FakeLake:
    # 2 episodes per group commit: small file groups, as streaming leaves them; plus the rows of
    # a crashed group commit (attempts that never committed)
    return write_lake(root, episodes=episodes, steps=20, cameras=("front",), size=(32, 24), group=2)


def _catalog(tmp_path: Path, lake: FakeLake) -> str:
    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.rebuild_from_lake(lake.layout)
    catalog.close()
    return catalog.location


def _samples(ds: Dataset) -> list[tuple[str, int, bytes, bytes]]:
    out = []
    for i in range(len(ds)):
        s: dict[str, Any] = ds[i]
        out.append(
            (
                str(s["episode_id"]),
                int(s["step"]),
                s["observation.images.front"].tobytes(),
                s["action"].tobytes(),
            )
        )
    return out


def _batches(loader: Loader, count: int | None = None) -> list[list[tuple[str, int]]]:
    out = []
    for batch in loader:
        out.append([(str(e), int(s)) for e, s in zip(batch["episode_id"], batch["step"], strict=True)])
        if count is not None and len(out) == count:
            break
    return out


def _lake_bytes(layout: LakeLayout) -> int:
    return sum(
        f.size_bytes for name in ("steps", "video", "episodes") for f in data_files(layout.table(name))
    )


def _assert_audit_ok(lake: FakeLake, catalog: str | None = None) -> None:
    report = audit(lake.layout, catalog_path=catalog)
    assert report.missing == 0 and report.duplicated == 0, report
    assert report.catalog_agrees, report


def test_pin_survives_compaction_and_gc_and_a_saved_state_resumes(tmp_path: Path) -> None:
    lake = _lake(tmp_path / "lake")
    catalog = _catalog(tmp_path, lake)
    pin = create_dataset(
        lake.layout, "pick-v1", sql="SELECT episode_id FROM episodes WHERE task = 'pick'", catalog=catalog
    )
    assert pin.episode_ids == tuple(e for e in lake.episode_ids if lake.episodes[e].task == "pick")
    pinned = Dataset(lake.layout, snapshot="pick-v1", spec=SPEC, seed=5)
    before = _samples(pinned)
    reference = _batches(Loader(pinned, batch_size=4, num_workers=0))
    loader = Loader(Dataset(lake.layout, snapshot="pick-v1", spec=SPEC, seed=5), batch_size=4, num_workers=0)
    head = _batches(loader, 3)
    state = loader.get_state()

    # more data arrives, then compaction and GC with zero retention
    append_episodes(
        lake.layout, [make_episode(20, steps=20, cameras=("front",), size=lake.size, seed=0)], lake.size
    )
    groups_before = len(read_lake_files(lake.layout).groups)
    files_before = len(DeltaTable(lake.layout.steps).file_uris())
    report = compact(lake.layout, CompactConfig(target_file_bytes=1 << 30, small_group_bytes=1 << 29))
    assert report.groups_merged == groups_before and report.files_after["steps"] < files_before
    assert len(read_lake_files(lake.layout).groups) == 1
    gc_report = gc(lake.layout, ZERO)
    assert gc_report.markers_removed == {} and gc_report.groups_rewritten == 0
    assert sum(gc_report.files_deleted.values()) >= files_before  # the pre-compaction files are gone

    again = Dataset(lake.layout, snapshot="pick-v1", spec=SPEC, seed=5)
    assert again.snapshot.fingerprint == pinned.snapshot.fingerprint
    assert _samples(again) == before
    resumed = Loader(again, batch_size=4, num_workers=0)
    resumed.set_state(state)
    assert head + _batches(resumed) == reference
    assert check_dataset(lake.layout, "pick-v1").intact
    _assert_audit_ok(lake)


def test_deleting_the_pin_lets_gc_return_the_space(tmp_path: Path) -> None:
    lake = _lake(tmp_path / "lake", episodes=6)
    create_dataset(lake.layout, "all-v1")
    held = dict(zip(lake.episode_ids, (lake.episodes[e].attempt_id for e in lake.episode_ids), strict=True))
    # a new attempt supersedes ep-000 (as a backfill makes one); the pin still reads the old one
    newer = dataclasses.replace(lake.episodes["ep-000"], attempt_id="attempt-0-backfill")
    rows = _with_featurizer(lake_rows([newer], lake.size)[0], "res-test@1")
    from pi_format.lake import LakeWriter

    assert LakeWriter(lake.layout, writer_id="bf").commit_episodes([rows], supersede=True).committed == (
        "ep-000",
    )
    assert read_committed(lake.layout, ["attempt_id"]).column("attempt_id")[0].as_py() == "attempt-0-backfill"
    gc(lake.layout, ZERO)
    pinned = Dataset(lake.layout, snapshot="all-v1", spec=SPEC)
    assert dict(zip(pinned.episode_ids, pinned.snapshot.attempt_ids, strict=True)) == held
    size_before = _lake_bytes(lake.layout)

    dry = gc(lake.layout, GcConfig(retention_hours=0, dry_run=True))
    assert dry.markers_removed == {}  # the pin holds the superseded attempt
    delete_dataset(lake.layout, "all-v1")
    dry = gc(lake.layout, GcConfig(retention_hours=0, dry_run=True))
    assert dry.markers_removed == {"superseded": 1} and dry.dry_run
    assert _lake_bytes(lake.layout) == size_before  # a dry run removes nothing
    done = gc(lake.layout, ZERO)
    assert done.markers_removed == {"superseded": 1}
    assert _lake_bytes(lake.layout) < size_before
    with pytest.raises(SnapshotDataMissingError, match="GC removed rows no dataset pin held"):
        Dataset(lake.layout, snapshot=pinned.snapshot, spec=SPEC)
    now = Dataset(lake.layout, spec=SPEC)
    assert now.snapshot.attempt_ids[0] == "attempt-0-backfill" and len(now.episode_ids) == 6
    _assert_audit_ok(lake)


def test_deleted_episodes_leave_new_selections_and_go_at_gc_unless_pinned(tmp_path: Path) -> None:
    lake = _lake(tmp_path / "lake", episodes=6)
    catalog = _catalog(tmp_path, lake)
    create_dataset(lake.layout, "keep-1", episode_ids=["ep-001", "ep-002"])
    report = delete_episodes(
        lake.layout,
        ["ep-001", "ep-003", "nope"],
        reason="consent withdrawn",
        selection="ids",
        catalog=catalog,
    )
    assert report.deleted == ["ep-001", "ep-003"] and report.not_in_lake == ["nope"]
    assert report.held_by_pins == {"keep-1": 1} and report.catalog_forgotten == 2
    # gone from every new selection at once: SQL over the catalog, the whole lake, the reader API
    index = Catalog(catalog)
    assert sorted(index.episode_ids("SELECT episode_id FROM episodes")) == [
        "ep-000",
        "ep-002",
        "ep-004",
        "ep-005",
    ]
    index.close()
    assert Dataset(lake.layout, spec=SPEC).episode_ids == ("ep-000", "ep-002", "ep-004", "ep-005")
    assert "ep-001" not in read_committed(lake.layout, ["step_count"]).column("episode_id").to_pylist()
    with pytest.raises(DatasetError, match="not visible"):
        create_dataset(lake.layout, "late", episode_ids=["ep-003"])
    # the pin still reads what it pinned
    assert Dataset(lake.layout, snapshot="keep-1", spec=SPEC).episode_ids == ("ep-001", "ep-002")

    done = gc(lake.layout, ZERO)
    assert done.markers_removed == {"deleted": 1}  # ep-003; ep-001 is kept for the pin
    assert done.held_by_pins == {"keep-1": ["ep-001"]}
    assert any("'keep-1' holds" in line for line in done.lines())
    remaining = {(e, a) for e, a in _all_pairs(lake.layout)}
    assert ("ep-001", "attempt-1-ok") in remaining and not any(e == "ep-003" for e, _ in remaining)
    delete_dataset(lake.layout, "keep-1")
    assert gc(lake.layout, ZERO).markers_removed == {"deleted": 1}
    # a re-send of a deleted episode after GC removed its markers is not committed again
    from pi_format.lake import LakeWriter

    resent = LakeWriter(lake.layout, writer_id="late").commit_episodes(
        lake_rows([lake.episodes["ep-003"]], lake.size)
    )
    assert resent.committed == () and resent.duplicates == ("ep-003",)
    assert not any(e in ("ep-001", "ep-003") for e, _ in _all_pairs(lake.layout))
    for table in ("steps", "video"):
        ids = (
            DeltaTable(lake.layout.table(table)).to_pyarrow_table(columns=["episode_id"]).column("episode_id")
        )
        assert not {"ep-001", "ep-003"} & set(ids.to_pylist()), table
    _assert_audit_ok(lake, catalog)


def _with_featurizer(rows: EpisodeRows, tag: str) -> EpisodeRows:
    """`rows` as a backfill with featurizer `tag` makes them."""
    episode = rows.episode
    if "featurizer" in episode.column_names:
        episode = episode.drop_columns(["featurizer"])
    episode = episode.append_column("featurizer", pa.array([tag], pa.string()))
    return dataclasses.replace(rows, episode=episode)


def _all_pairs(layout: LakeLayout) -> list[tuple[str, str]]:
    rows = DeltaTable(layout.episodes).to_pyarrow_table(columns=["episode_id", "attempt_id"])
    return list(
        zip(rows.column("episode_id").to_pylist(), rows.column("attempt_id").to_pylist(), strict=True)
    )


def test_pins_are_immutable_and_listed(tmp_path: Path) -> None:
    lake = _lake(tmp_path / "lake", episodes=4)
    first = create_dataset(lake.layout, "a", episode_ids=["ep-000", "ep-001"])
    assert create_dataset(lake.layout, "a", episode_ids=["ep-001", "ep-000"]) == first  # same rows: a no-op
    with pytest.raises(DatasetError, match="already exists with other rows"):
        create_dataset(lake.layout, "a", episode_ids=["ep-002"])
    create_dataset(lake.layout, "b")
    assert [(p.name, p.episode_count) for p in PinStore(lake.layout).summaries()] == [("a", 2), ("b", 4)]
    with pytest.raises(DatasetError, match=r"no dataset pin named 'zz'.*\['a', 'b'\]"):
        check_dataset(lake.layout, "zz")
    with pytest.raises(ValueError, match="a pin name is"):
        create_dataset(lake.layout, "bad name")
    delete_dataset(lake.layout, "a")
    assert [p.name for p in PinStore(lake.layout).summaries()] == ["b"]
    create_dataset(lake.layout, "a", episode_ids=["ep-003"])  # a deleted name may be used again
    _assert_audit_ok(lake)


def test_gc_rewrites_groups_with_rows_of_attempts_that_never_committed(tmp_path: Path) -> None:
    from pi_format.lake import LakeWriter

    lake = _lake(tmp_path / "lake", episodes=4)
    # a writer that lost a race: its cache does not know ep-010 yet, so it writes ep-010's rows,
    # then finds it committed at the markers' read point and commits only ep-011's marker
    late = LakeWriter(lake.layout, writer_id="late")
    extra = [make_episode(i, steps=20, cameras=("front",), size=lake.size, seed=0) for i in (10, 11)]
    append_episodes(lake.layout, extra[:1], lake.size)
    result = late.commit_episodes(lake_rows(extra, lake.size))
    assert result.committed == ("ep-011",) and result.duplicates == ("ep-010",)
    plan = plan_gc(lake.layout)
    assert plan.uncommitted_groups == 1 and not plan.reasons
    steps_files = {f.path for f in data_files(lake.layout.steps)}
    before = _samples(Dataset(lake.layout, spec=SPEC, seed=1))
    report = gc(lake.layout, ZERO)
    assert report.groups_with_uncommitted_rows == 1 and report.groups_rewritten == 1
    # the crashed writer's steps/video files are committed to their tables but no marker names
    # them: younger than the in-flight grace they stay, whatever the retention
    assert report.orphan_files == {}
    assert len({f.path for f in data_files(lake.layout.steps)} - steps_files) == 1  # the rewritten group
    steps = DeltaTable(lake.layout.steps).to_pyarrow_table(columns=["episode_id", "attempt_id"])
    pairs = set(
        zip(steps.column("episode_id").to_pylist(), steps.column("attempt_id").to_pylist(), strict=True)
    )
    assert sum(1 for e, _ in pairs if e == "ep-010") == 1  # one attempt's rows left, the committed one
    assert _samples(Dataset(lake.layout, spec=SPEC, seed=1)) == before
    _assert_audit_ok(lake)


def _raw_rows(episode_id: str, attempt_id: str, count: int) -> pa.Table:
    from pi_format import RAW_SCHEMA

    return pa.table(
        {
            "episode_id": [episode_id] * count,
            "chunk_index": pa.array(range(count), pa.int32()),
            "kafka_topic": ["episodes.raw.v1"] * count,
            "kafka_partition": pa.array([0] * count, pa.int32()),
            "kafka_offset": pa.array(range(count), pa.int64()),
            "received_at_ns": pa.array([1] * count, pa.int64()),
            "attempt_id": [attempt_id] * count,
            "message": [b"x" * 100] * count,
        },
        schema=RAW_SCHEMA,
    )


def test_gc_keeps_the_raw_rows_a_quarantine_row_needs(tmp_path: Path) -> None:
    from pi_format import QUARANTINE_SCHEMA
    from pi_format.lake import LakeWriter

    lake = _lake(tmp_path / "lake", episodes=4)
    writer = LakeWriter(lake.layout, writer_id="raw")
    writer.write_raw(_raw_rows("ep-002", "attempt-2-ok", 5))
    writer.write_raw(_raw_rows("ep-002", "attempt-2-bad", 3))  # an earlier attempt, quarantined
    writer.write_raw(_raw_rows("ep-003", "attempt-3-ok", 4))
    writer.write_quarantine(
        pa.table(
            {
                "quarantine_id": ["q1"],
                "episode_id": ["ep-002"],
                "reason": ["bad_values"],
                "details": ["proprio NaN"],
                "kafka_topic": ["episodes.raw.v1"],
                "kafka_partition": pa.array([0], pa.int32()),
                "kafka_offsets": pa.array([[0, 1, 2]], pa.list_(pa.int64())),
                "raw_pointer": ["attempt-2-bad"],
                "size_bytes": pa.array([300], pa.int64()),
                "attempt_id": ["attempt-2-bad"],
                "quarantined_at_ns": pa.array([1], pa.int64()),
            },
            schema=QUARANTINE_SCHEMA,
        )
    )
    delete_episodes(lake.layout, ["ep-002"], reason="bad data", selection="ids")
    dry = gc(lake.layout, GcConfig(retention_hours=0, dry_run=True))
    assert (dry.raw_rows_removed, dry.quarantined_raw_kept) == (5, 3)
    done = gc(lake.layout, ZERO)
    assert (done.raw_rows_removed, done.quarantined_raw_kept) == (5, 3)
    raw = DeltaTable(lake.layout.raw).to_pyarrow_table(columns=["episode_id", "attempt_id"])
    left = sorted(
        set(zip(raw.column("episode_id").to_pylist(), raw.column("attempt_id").to_pylist(), strict=True))
    )
    assert left == [("ep-002", "attempt-2-bad"), ("ep-003", "attempt-3-ok")]
    assert raw.num_rows == 3 + 4
    _assert_audit_ok(lake)


def test_compaction_bin_packs_raw_with_the_lakes_compression(tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from pi_format.lake import LakeWriter

    lake = _lake(tmp_path / "lake", episodes=2)
    writer = LakeWriter(lake.layout, writer_id="raw")
    for i in range(3):
        writer.write_raw(_raw_rows(f"ep-00{i % 2}", f"attempt-{i % 2}-ok", 20))
    before = sum(f.size_bytes for f in data_files(lake.layout.raw))
    compact(lake.layout, CompactConfig(target_file_bytes=1 << 30, small_group_bytes=1 << 29))
    gc(lake.layout, ZERO)
    (merged,) = data_files(lake.layout.raw)
    meta = pq.ParquetFile(Path(lake.layout.raw) / merged.path).metadata
    assert meta.num_rows == 60
    assert meta.row_group(0).column(meta.schema.names.index("message")).compression == "ZSTD"
    assert merged.size_bytes < before
    _assert_audit_ok(lake)


def test_compaction_and_gc_take_turns(tmp_path: Path) -> None:
    from pi_jobs.maintenance import MaintenanceBusyError, maintenance_lock

    lake = _lake(tmp_path / "lake", episodes=2)
    with maintenance_lock(lake.layout, "gc"):
        with pytest.raises(MaintenanceBusyError, match=r"cannot run compact: .*\(gc pid \d+\)"):
            compact(lake.layout)
        with pytest.raises(MaintenanceBusyError, match="cannot run gc"):
            gc(lake.layout, ZERO)
    compact(lake.layout)  # the lock is free again: no error
    _assert_audit_ok(lake)


def test_a_host_copy_of_the_episodes_rows_follows_gc_and_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # >= 64 episodes files: opens read the host's memory-mapped copy of the episodes rows
    # (pi_loader.reading._episodes_rows), which must drop the rows of files GC removed
    lake = write_lake(tmp_path / "lake", episodes=66, steps=4, cameras=("front",), size=(16, 16), group=1)
    spec = SampleSpec(cameras=("front",), action_horizon=2)
    segments = tmp_path / "host-indexes"  # this test's own host index directory
    segments.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(segments))
    before = sorted(_samples(Dataset(lake.layout, spec=spec, seed=2)))
    assert list(segments.rglob("episodes-rows/*.arrow")), "the host copy was not used"
    delete_episodes(lake.layout, ["ep-000"], reason="test", selection="ids")
    gc(lake.layout, ZERO)  # ep-000's group commit files go: 65 of the copy's 66 files remain
    assert len(DeltaTable(lake.layout.episodes).file_uris()) == 65
    rest = [s for s in before if s[0] != "ep-000"]
    assert sorted(_samples(Dataset(lake.layout, spec=spec, seed=2))) == rest
    compact(lake.layout, CompactConfig(target_file_bytes=1 << 30, small_group_bytes=1 << 29))
    gc(lake.layout, ZERO)
    assert len(DeltaTable(lake.layout.episodes).file_uris()) == 1
    assert sorted(_samples(Dataset(lake.layout, spec=spec, seed=2))) == rest
    _assert_audit_ok(lake)
