"""pi_catalog's server backend (clickhouse-connect over HTTP) against ClickHouse's HTTP protocol.

No ClickHouse server can run here: the server is `ChdbHttpServerTestDouble` (tests/fixtures),
ClickHouse's HTTP interface in front of a real chdb engine in its own process. Every test runs
the same calls on an embedded (chdb path) catalog and on the server catalog and compares.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import clickhouse_connect
import numpy as np
import pyarrow as pa
import pytest
from pi_catalog import Catalog, CatalogQueryError, PiCatalogError
from pi_catalog import _catalog as catalog_module
from pi_catalog._connection import PASSWORD_ENV, USER_ENV
from pi_format import EPISODES_SCHEMA
from pi_format.lake.schemas import UNINDEXED_COLUMNS

from tests.catalog.lake_edits import CountWatcher, delete_episodes, edited_lake_at, many_episodes_lake
from tests.fixtures.clickhouse_http_double import RunningDouble, chdb_http_server
from tests.fixtures.lake_factory import FakeLake, episode_rows, make_episode, write_lake

USER = "pilake"
PASSWORD = "pw-Kq93-never-echoed"  # the tests check it never appears in a message


def _rows(ids: range, *, steps: int = 3) -> pa.Table:
    return episode_rows([make_episode(i, steps=steps, cameras=["cam"], size=(16, 16), seed=0) for i in ids])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDouble]:
    with chdb_http_server(
        str(tmp_path_factory.mktemp("clickhouse") / "data"), user=USER, password=PASSWORD
    ) as s:
        yield s


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(USER_ENV, USER)
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)


@pytest.fixture
def both(server: RunningDouble, credentials: None, tmp_path: Path) -> tuple[Catalog, Catalog]:
    """(embedded, server): an empty chdb-path catalog and an empty database on the server."""
    database = f"t_{uuid.uuid4().hex[:12]}"
    admin = clickhouse_connect.get_client(
        host="127.0.0.1", port=server.port, username=USER, password=PASSWORD
    )
    admin.command(f"CREATE DATABASE {database}")
    admin.close()
    embedded, remote = Catalog(str(tmp_path / "catalog")), Catalog(f"{server.url}/{database}")
    assert embedded.is_embedded and not remote.is_embedded
    return embedded, remote


def _same(both: tuple[Catalog, Catalog], sql: str, parameters: dict[str, object] | None = None) -> pa.Table:
    embedded, remote = (c.query_arrow(sql, parameters) for c in both)
    assert remote.schema == embedded.schema, sql
    assert remote.to_pylist() == embedded.to_pylist(), sql
    return embedded


def test_same_schema_on_both_backends(both: tuple[Catalog, Catalog]) -> None:
    for catalog in both:
        catalog.ensure_schema()
        catalog.ensure_schema()  # idempotent on a server too
    tables = _same(
        both,
        "SELECT name, engine, sorting_key FROM system.tables "
        "WHERE database = currentDatabase() ORDER BY name",
    )
    assert tables.column("name").to_pylist() == [
        "dataset_snapshots",
        "episode_freshness",
        "episodes",
        "episodes_index",
    ]
    columns = _same(
        both,
        "SELECT name, type FROM system.columns WHERE database = currentDatabase() "
        "AND table = 'episodes' ORDER BY position",
    )
    indexed = [n for n in EPISODES_SCHEMA.names if n not in UNINDEXED_COLUMNS]
    assert columns.column("name").to_pylist() == [*indexed, "episodes_version", "indexed_at"]


def test_records_and_queries_give_the_same_results(both: tuple[Catalog, Catalog]) -> None:
    rows = _rows(range(5))
    for catalog in both:
        catalog.record_episodes(rows, episodes_version=1)
        catalog.record_episodes(rows, episodes_version=1)  # idempotent
        catalog.record_episodes(rows.slice(0, 2), episodes_version=2)  # the newer version wins
    every = _same(both, "SELECT * EXCEPT indexed_at FROM episodes ORDER BY episode_id")
    assert every.num_rows == 5
    assert every.column("episodes_version").to_pylist() == [2, 2, 1, 1, 1]
    selection = (
        "SELECT episode_id FROM episodes WHERE robot_id = {r:String} AND step_count >= {n:Int32} ORDER BY 1"
    )
    chosen = _same(both, selection, {"r": "robot-1", "n": 3})
    assert chosen.column("episode_id").to_pylist() == ["ep-001", "ep-003"]
    assert _same(both, selection, {"r": "robot-1' OR 1=1 --", "n": 0}).num_rows == 0  # bound, not pasted
    grouped = _same(
        both,
        "SELECT robot_id, count() AS episodes, sum(step_count) AS steps, groupArray(episode_id) AS ids "
        "FROM (SELECT * FROM episodes ORDER BY episode_id) GROUP BY robot_id ORDER BY robot_id",
    )
    assert sum(grouped.column("episodes").to_pylist()) == 5
    _same(both, "SELECT episode_id, arrayJoin(tags) AS tag FROM episodes ORDER BY episode_id, tag")
    ids = [
        c.episode_ids("SELECT episode_id FROM episodes WHERE has(tags, {t:String}) ORDER BY 1", {"t": "t0"})
        for c in both
    ]
    assert ids[0] == ids[1] == ["ep-000", "ep-002", "ep-004"]
    _same(both, "SELECT toTypeName(indexed_at) AS t, count() AS n FROM episodes GROUP BY t")


def test_freshness_rows_round_trip_the_same(both: tuple[Catalog, Catalog]) -> None:
    from pi_catalog._schema import FRESHNESS_ARROW_SCHEMA

    rows = pa.Table.from_pylist(
        [
            {
                "episode_id": f"ep-{i}",
                "attempt_id": "a",
                "published_at_ns": None if i == 0 else i,
                "lake_committed_at_ns": 10 + i,
                "readable_at_ns": 20 + i,
                "episodes_version": 3,
            }
            for i in range(3)
        ],
        schema=FRESHNESS_ARROW_SCHEMA,
    )
    for catalog in both:
        catalog.record_freshness(rows)
    got = _same(both, "SELECT * FROM episode_freshness ORDER BY episode_id")
    assert got.column("published_at_ns").to_pylist() == [None, 1, 2]


def test_snapshots_by_name_are_the_same(both: tuple[Catalog, Catalog]) -> None:
    snapshot = '{"episode_ids": ["ep-000"], "attempt_ids": ["a"]}'
    for catalog in both:
        catalog.save_snapshot("pick-v1", snapshot, sql="SELECT 1", table_versions={"episodes": 4})
        catalog.save_snapshot("pick-v1", snapshot, sql="SELECT 1", table_versions={"episodes": 4})  # no-op
        with pytest.raises(PiCatalogError, match="names are immutable"):
            catalog.save_snapshot("pick-v1", "{}", sql="", table_versions={})
        assert catalog.snapshot_json("pick-v1") == snapshot
        assert catalog.snapshot_names() == ["pick-v1"]
        with pytest.raises(PiCatalogError, match=r"no dataset snapshot named 'nope'.*'pick-v1'"):
            catalog.snapshot_json("nope")
    _same(both, "SELECT name, sql, table_versions, snapshot FROM dataset_snapshots")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    return write_lake(tmp_path_factory.mktemp("lake"), episodes=3, steps=5, cameras=["front"], size=(16, 16))


def test_rebuild_from_the_lake_is_the_same(both: tuple[Catalog, Catalog], lake: FakeLake) -> None:
    for catalog in both:
        catalog.record_episodes(_rows(range(10, 12)), episodes_version=0)  # stale rows, not in the lake
        assert catalog.rebuild_from_lake(lake.layout) == 3
        assert catalog.rebuild_from_lake(lake.layout) == 3  # again: one row per episode
    got = _same(both, "SELECT * EXCEPT indexed_at FROM episodes ORDER BY episode_id")
    assert got.column("episode_id").to_pylist() == lake.episode_ids


def test_rebuild_of_visible_rows_and_forget_are_the_same(
    both: tuple[Catalog, Catalog], tmp_path: Path
) -> None:
    lake = edited_lake_at(tmp_path / "edited-lake")
    reports = []
    for catalog in both:
        catalog.record_episodes(_rows(range(3)), episodes_version=0)
        reports.append(catalog.rebuild(lake.layout))
    assert [(r.episodes, r.deleted_excluded, r.superseded_rows) for r in reports] == [(2, 1, 2)] * 2
    got = _same(both, "SELECT episode_id, attempt_id, task FROM episodes ORDER BY episode_id")
    assert got.to_pylist() == [
        {"episode_id": "ep-001", "attempt_id": "backfill-1", "task": "re-featurized"},
        {"episode_id": "ep-002", "attempt_id": "attempt-2-ok", "task": "pick"},
    ]
    _same(both, "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name")
    many = [f"gone-{i:06d}-{'x' * 20}" for i in range(5000)] + ["ep-002"]  # several batches of ids
    assert [catalog.forget_episodes(many) for catalog in both] == [1, 1]
    assert _same(both, "SELECT episode_id FROM episodes").column("episode_id").to_pylist() == ["ep-001"]


def test_a_selection_during_a_server_rebuild_sees_the_old_or_the_new_index(
    both: tuple[Catalog, Catalog], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = both[1]
    layout = many_episodes_lake(str(tmp_path / "many-lake"), 2000)
    assert remote.rebuild_from_lake(layout) == 2000
    delete_episodes(layout, [f"ep-{i:05d}" for i in range(0, 2000, 4)])  # 500 of them
    monkeypatch.setattr(catalog_module, "_REBUILD_BATCH_ROWS", 200)
    with CountWatcher(Catalog(remote.location)) as watcher:
        time.sleep(0.3)
        start = time.monotonic()
        assert remote.rebuild_from_lake(layout) == 1500
        end = time.monotonic()
        time.sleep(0.3)
    assert not watcher.errors, watcher.errors
    counts = [n for _, n in watcher.samples]
    assert set(counts) <= {2000, 1500}, sorted(set(counts))
    assert watcher.between(start, end).count(2000) >= 2
    assert counts[-1] == 1500


def test_dataset_selects_by_sql_and_snapshot_name_through_the_server(
    both: tuple[Catalog, Catalog], lake: FakeLake
) -> None:
    from pi_loader import Dataset

    sql = "SELECT episode_id FROM episodes WHERE robot_id = {r:String}"
    datasets = []
    for catalog in both:
        catalog.rebuild_from_lake(lake.layout)
        ds = Dataset(
            lake.layout,
            sql=sql,
            sql_parameters={"r": "robot-0"},
            catalog=catalog.location,
            cameras=["front"],
            action_horizon=2,
        )
        ds.snapshot.save_to_catalog(catalog.location, "robot-0")
        reopened = Dataset(lake.layout, snapshot="robot-0", catalog=catalog.location, action_horizon=2)
        assert reopened.episode_ids == ds.episode_ids
        datasets.append(ds)
    embedded, remote = datasets
    assert remote.episode_ids == embedded.episode_ids == ("ep-000", "ep-002")
    assert len(remote) == len(embedded)
    first_e, first_r = embedded[0], remote[0]
    assert first_e.keys() == first_r.keys()
    assert np.array_equal(np.asarray(first_e["action"]), np.asarray(first_r["action"]))


def test_query_errors_carry_clickhouse_text_and_sql(both: tuple[Catalog, Catalog]) -> None:
    remote = both[1]
    remote.ensure_schema()
    with pytest.raises(CatalogQueryError, match=r"Code: 47\..*no_such_column") as info:
        remote.query_arrow("SELECT no_such_column FROM episodes")
    assert info.value.sql == "SELECT no_such_column FROM episodes"
    assert PASSWORD not in str(info.value)


def test_wrong_password_is_a_clear_error_without_the_password(
    server: RunningDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(USER_ENV, USER)
    monkeypatch.setenv(PASSWORD_ENV, "not-the-password-7x")
    with pytest.raises(PiCatalogError, match=f"refused user '{USER}'.*{PASSWORD_ENV}") as info:
        Catalog(f"{server.url}/pilake").query_arrow("SELECT 1")
    assert "AUTHENTICATION_FAILED" in str(info.value)
    assert "not-the-password-7x" not in str(info.value) and PASSWORD not in str(info.value)
    monkeypatch.delenv(USER_ENV)  # the default user does not exist on this server
    with pytest.raises(PiCatalogError, match="refused user 'default'"):
        Catalog(f"{server.url}/pilake").ensure_schema()


def test_missing_database_is_a_clear_error(server: RunningDouble, credentials: None) -> None:
    with pytest.raises(PiCatalogError, match=r"cannot open the catalog at .*/no_such_db.*UNKNOWN_DATABASE"):
        Catalog(f"{server.url}/no_such_db").ensure_schema()


def test_a_server_that_is_down_is_a_clear_error(credentials: None) -> None:
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(
            PiCatalogError, match=rf"cannot open the catalog.*reachable at 127\.0\.0\.1:{port}"
        ):
            Catalog(f"http://127.0.0.1:{port}/pilake").query_arrow("SELECT 1")


def test_credentials_in_the_url_are_refused_without_echoing_them() -> None:
    with pytest.raises(ValueError, match=f"carries credentials.*{USER_ENV}") as info:
        Catalog(f"http://{USER}:{PASSWORD}@127.0.0.1:8123/pilake")
    assert PASSWORD not in str(info.value)
