"""`Catalog.rebuild` and `forget_episodes` on an embedded (chdb) catalog: the visible rows only
(latest attempt, deleted episodes excluded), an atomic swap, and deletions applied at once."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pi_catalog import Catalog, CatalogQueryError, RebuildReport
from pi_catalog import _catalog as catalog_module
from pi_catalog._catalog import _Session
from pi_catalog._schema import FRESHNESS_ARROW_SCHEMA

from tests.catalog.lake_edits import CountWatcher, delete_episodes, edited_lake_at, many_episodes_lake
from tests.fixtures.lake_factory import FakeLake, episode_rows, make_episode


def _rows(ids: range) -> pa.Table:
    return episode_rows([make_episode(i, steps=3, cameras=["cam"], size=(16, 16), seed=0) for i in ids])


def _count(catalog: Catalog, sql: str = "SELECT count() AS n FROM episodes") -> int:
    return int(catalog.query_arrow(sql).column("n")[0].as_py())


def _tables(catalog: Catalog) -> list[str]:
    sql = "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name"
    return [str(v) for v in catalog.query_arrow(sql).column("name").to_pylist()]


@pytest.fixture
def edited_lake(tmp_path: Path) -> FakeLake:
    return edited_lake_at(tmp_path / "lake")


def test_rebuild_indexes_the_visible_attempt_only_and_leaves_deleted_episodes_out(
    tmp_path: Path, edited_lake: FakeLake
) -> None:
    cat = Catalog(str(tmp_path / "catalog"))
    cat.record_episodes(_rows(range(3)), episodes_version=0)  # the stream job's rows, ep-000 too
    report = cat.rebuild(edited_lake.layout)
    version = DeltaTable(edited_lake.layout.episodes).version()
    assert report == RebuildReport(
        episodes=2, deleted_excluded=1, superseded_rows=2, episodes_version=version, seconds=report.seconds
    )
    got = cat.query_arrow(
        "SELECT episode_id, attempt_id, task, episodes_version FROM episodes ORDER BY episode_id"
    ).to_pylist()
    assert got == [
        {
            "episode_id": "ep-001",
            "attempt_id": "backfill-1",
            "task": "re-featurized",
            "episodes_version": version,
        },
        {"episode_id": "ep-002", "attempt_id": "attempt-2-ok", "task": "pick", "episodes_version": version},
    ]
    assert cat.rebuild_from_lake(edited_lake.layout) == 2  # again: the same index
    assert _count(cat, "SELECT count() AS n FROM episodes_index") == 2  # the old rows went with the swap
    assert _tables(cat) == [  # the annotations table is rebuilt (and swapped) with the index
        "annotations",
        "annotations_index",
        "dataset_snapshots",
        "episode_freshness",
        "episodes",
        "episodes_index",
    ]


def test_rebuild_keeps_snapshots_and_freshness(tmp_path: Path, edited_lake: FakeLake) -> None:
    cat = Catalog(str(tmp_path / "catalog"))
    cat.save_snapshot("pick-v1", '{"ids": ["ep-000"]}', sql="SELECT 1", table_versions={"episodes": 1})
    freshness = pa.Table.from_pylist(
        [
            {
                "episode_id": "ep-000",
                "attempt_id": "a",
                "published_at_ns": 1,
                "lake_committed_at_ns": 2,
                "readable_at_ns": 3,
                "episodes_version": 1,
            }
        ],
        schema=FRESHNESS_ARROW_SCHEMA,
    )
    cat.record_freshness(freshness)
    cat.rebuild(edited_lake.layout)
    assert cat.snapshot_names() == ["pick-v1"]
    assert cat.snapshot_json("pick-v1") == '{"ids": ["ep-000"]}'
    assert cat.query_arrow("SELECT * FROM episode_freshness").to_pylist() == freshness.to_pylist()


def test_a_failed_rebuild_leaves_the_old_index(
    tmp_path: Path, edited_lake: FakeLake, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat = Catalog(str(tmp_path / "catalog"))
    cat.record_episodes(_rows(range(5)), episodes_version=0)
    real_insert = Catalog._insert

    def failing(self: Catalog, session: _Session, table: pa.Table, into: str = "episodes_index") -> None:
        if into != "episodes_index":
            raise CatalogQueryError("disk full (injected)", f"INSERT INTO {into}")
        real_insert(self, session, table, into)

    monkeypatch.setattr(Catalog, "_insert", failing)
    with pytest.raises(CatalogQueryError, match="injected"):
        cat.rebuild(edited_lake.layout)
    assert _count(cat) == 5
    assert _tables(cat) == ["dataset_snapshots", "episode_freshness", "episodes", "episodes_index"]


def test_rows_recorded_during_a_rebuild_are_carried_into_the_new_index(
    tmp_path: Path, edited_lake: FakeLake, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat = Catalog(str(tmp_path / "catalog"))
    version = DeltaTable(edited_lake.layout.episodes).version()
    real_insert = Catalog._insert
    late = _rows(range(7, 9))

    def insert_then_record(
        self: Catalog, session: _Session, table: pa.Table, into: str = "episodes_index"
    ) -> None:
        real_insert(self, session, table, into)
        if into != "episodes_index":  # a stream job commits and records while the rebuild runs
            real_insert(self, session, catalog_module.index_rows(late, version + 1))

    monkeypatch.setattr(Catalog, "_insert", insert_then_record)
    assert cat.rebuild_from_lake(edited_lake.layout) == 2
    ids = cat.episode_ids("SELECT episode_id FROM episodes ORDER BY episode_id")
    assert ids == ["ep-001", "ep-002", "ep-007", "ep-008"]


def test_a_selection_during_a_rebuild_sees_the_old_or_the_new_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = many_episodes_lake(str(tmp_path / "lake"), 3000)
    cat = Catalog(str(tmp_path / "catalog"))
    assert cat.rebuild_from_lake(layout) == 3000
    delete_episodes(layout, [f"ep-{i:05d}" for i in range(0, 3000, 6)])  # 500 of them
    monkeypatch.setattr(catalog_module, "_REBUILD_BATCH_ROWS", 200)  # many batches, many sessions
    with CountWatcher(Catalog(str(tmp_path / "catalog"))) as watcher:
        time.sleep(0.05)
        start = time.monotonic()
        report = cat.rebuild(layout)
        end = time.monotonic()
        time.sleep(0.05)
    assert not watcher.errors, watcher.errors
    assert report.episodes == 2500 and report.deleted_excluded == 500
    counts = [n for _, n in watcher.samples]
    assert set(counts) <= {3000, 2500}, sorted(set(counts))
    during = watcher.between(start, end)
    assert during.count(3000) >= 3, (
        f"the watcher ran {len(during)} times during the rebuild"
    )  # it interleaved
    assert counts[-1] == 2500


def test_forget_episodes_removes_them_from_every_selection_at_once(catalog_path: str) -> None:
    cat = Catalog(catalog_path)
    cat.record_episodes(_rows(range(6)), episodes_version=1)
    cat.record_episodes(_rows(range(2)), episodes_version=2)  # two rows of ep-000, ep-001 unmerged
    assert cat.forget_episodes(["ep-001", "ep-003", "ep-001", "not-indexed"]) == 2
    assert cat.episode_ids("SELECT episode_id FROM episodes ORDER BY episode_id") == [
        "ep-000",
        "ep-002",
        "ep-004",
        "ep-005",
    ]
    assert _count(cat, "SELECT count() AS n FROM episodes_index WHERE episode_id = 'ep-001'") == 0
    assert cat.forget_episodes(["ep-001"]) == 0
    assert cat.forget_episodes([]) == 0
    # thousands of ids are bound in batches (a server's URL has a length limit)
    many = [f"gone-{i:06d}-{'x' * 20}" for i in range(5000)] + ["ep-005"]
    assert cat.forget_episodes(pa.array(many)) == 1
    assert cat.episode_ids("SELECT episode_id FROM episodes ORDER BY episode_id") == [
        "ep-000",
        "ep-002",
        "ep-004",
    ]
    with pytest.raises(TypeError, match="sequence of ids"):
        cat.forget_episodes("ep-000")
    with pytest.raises(TypeError, match="must be strings"):
        cat.forget_episodes(["ep-000", 7])


@pytest.fixture
def catalog_path(tmp_path: Path) -> str:
    return str(tmp_path / "catalog")


def test_rebuild_replaces_an_older_index_and_its_view(tmp_path: Path, edited_lake: FakeLake) -> None:
    cat = Catalog(str(tmp_path / "catalog"))
    cat.ensure_schema()
    with cat.held():  # a catalog made when the index had fewer columns
        client = cat._held.client
        client.command("DROP VIEW episodes")
        client.command("DROP TABLE episodes_index SYNC")
        client.command(
            "CREATE TABLE episodes_index (episode_id String, episodes_version Int64) "
            "ENGINE = ReplacingMergeTree(episodes_version) ORDER BY episode_id"
        )
        client.command("CREATE VIEW episodes AS SELECT * FROM episodes_index FINAL")
    assert cat.query_arrow("SELECT * FROM episodes").column_names == ["episode_id", "episodes_version"]
    assert cat.rebuild_from_lake(edited_lake.layout) == 2
    got = cat.query_arrow("SELECT episode_id, task FROM episodes ORDER BY episode_id").to_pylist()
    assert got == [
        {"episode_id": "ep-001", "task": "re-featurized"},
        {"episode_id": "ep-002", "task": "pick"},
    ]
