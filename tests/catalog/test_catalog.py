"""pi_catalog against a real embedded ClickHouse (chdb), including two processes on one path."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pi_catalog import Catalog, CatalogLockTimeout, CatalogQueryError, PiCatalogError, format_table
from pi_format import EPISODES_SCHEMA, LakeLayout
from pi_format.lake.schemas import UNINDEXED_COLUMNS

from tests.fixtures.lake_factory import FakeLake, episode_rows, make_episode, write_lake

REPO = Path(__file__).resolve().parents[2]


def _rows(ids: range, *, steps: int = 3) -> pa.Table:
    return episode_rows([make_episode(i, steps=steps, cameras=["cam"], size=(16, 16), seed=0) for i in ids])


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    cat = Catalog(str(tmp_path / "catalog"))
    cat.ensure_schema()
    return cat


@pytest.fixture(scope="module")
def small_lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    return write_lake(tmp_path_factory.mktemp("lake"), episodes=3, steps=3, cameras=["cam"], size=(16, 16))


def test_schema_has_every_episodes_column_and_the_index_columns(catalog: Catalog) -> None:
    cols = catalog.query_arrow("SELECT * FROM episodes LIMIT 0").column_names
    assert cols == [
        *(n for n in EPISODES_SCHEMA.names if n not in UNINDEXED_COLUMNS),
        "episodes_version",
        "indexed_at",
    ]
    tables = catalog.query_arrow(
        "SELECT name, engine FROM system.tables WHERE database = currentDatabase() ORDER BY name"
    ).to_pylist()
    engines = {t["name"]: t["engine"] for t in tables}
    assert engines == {
        "dataset_snapshots": "MergeTree",
        "episode_freshness": "MergeTree",
        "episodes": "View",
        "episodes_index": "ReplacingMergeTree",
    }
    catalog.ensure_schema()  # idempotent


def test_record_episodes_is_idempotent_and_lists_round_trip(catalog: Catalog) -> None:
    rows = _rows(range(3))
    catalog.record_episodes(rows, episodes_version=1)
    catalog.record_episodes(rows, episodes_version=1)
    catalog.record_episodes(rows.slice(0, 1), episodes_version=2)
    got = catalog.query_arrow(
        "SELECT episode_id, tags, cameras, proprio_mean, episodes_version FROM episodes ORDER BY episode_id"
    ).to_pylist()
    assert [g["episode_id"] for g in got] == ["ep-000", "ep-001", "ep-002"]
    assert [g["episodes_version"] for g in got] == [2, 1, 1]  # the newer version won
    assert got[1]["tags"] == rows.column("tags")[1].as_py()
    assert got[1]["cameras"] == ["cam"]
    assert got[2]["proprio_mean"] == pytest.approx(rows.column("proprio_mean")[2].as_py())
    raw = catalog.query_arrow("SELECT count() AS n FROM episodes_index").column("n")[0].as_py()
    assert raw >= 3  # duplicates may sit in unmerged parts; the view hides them


def test_record_episodes_validates_rows(catalog: Catalog) -> None:
    with pytest.raises(TypeError, match=r"pyarrow\.Table"):
        catalog.record_episodes([{"episode_id": "x"}], episodes_version=0)
    with pytest.raises(ValueError, match="lack columns"):
        catalog.record_episodes(pa.table({"episode_id": ["x"]}), episodes_version=0)
    with pytest.raises(ValueError, match="episodes_version"):
        catalog.record_episodes(_rows(range(1)), episodes_version=-1)
    catalog.record_episodes(_rows(range(0)), episodes_version=0)  # nothing to do
    assert catalog.episode_ids("SELECT episode_id FROM episodes") == []


def test_parameters_are_bound_not_pasted(catalog: Catalog) -> None:
    catalog.record_episodes(_rows(range(4)), episodes_version=0)
    sql = (
        "SELECT episode_id FROM episodes WHERE robot_id = {robot:String} AND step_count >= {n:Int32} "
        "ORDER BY 1"
    )
    assert catalog.episode_ids(sql, {"robot": "robot-1", "n": 3}) == ["ep-001", "ep-003"]
    assert catalog.episode_ids(sql, {"robot": "robot-1' OR 1=1 --", "n": 0}) == []
    tagged = catalog.episode_ids(
        "SELECT episode_id FROM episodes WHERE has(tags, {t:String}) ORDER BY episode_id", {"t": "t0"}
    )
    assert tagged == ["ep-000", "ep-002"]


def test_query_errors_carry_clickhouse_text_and_sql(catalog: Catalog) -> None:
    with pytest.raises(CatalogQueryError, match="no_such_column") as info:
        catalog.query_arrow("SELECT no_such_column FROM episodes")
    assert info.value.sql == "SELECT no_such_column FROM episodes"
    with pytest.raises(ValueError, match="non-empty"):
        catalog.query_arrow("  ")


def test_episode_ids_requires_an_episode_id_column(catalog: Catalog) -> None:
    catalog.record_episodes(_rows(range(2)), episodes_version=0)
    with pytest.raises(CatalogQueryError, match="must return an `episode_id` column"):
        catalog.episode_ids("SELECT robot_id FROM episodes")
    # repeats (e.g. from a join) collapse, first occurrence wins
    ids = catalog.episode_ids("SELECT episode_id FROM episodes ARRAY JOIN tags ORDER BY episode_id DESC")
    assert ids == ["ep-001", "ep-000"]


def test_rebuild_from_lake_recreates_the_index(tmp_path: Path, small_lake: FakeLake) -> None:
    cat = Catalog(str(tmp_path / "catalog"))
    cat.record_episodes(_rows(range(10, 12)), episodes_version=0)  # stale rows not in the lake
    assert cat.rebuild_from_lake(small_lake.layout) == 3
    got = cat.query_arrow("SELECT episode_id, episodes_version FROM episodes ORDER BY episode_id").to_pylist()
    version = DeltaTable(small_lake.layout.episodes).version()
    assert got == [{"episode_id": e, "episodes_version": version} for e in small_lake.episode_ids]
    assert cat.rebuild_from_lake(small_lake.layout) == 3  # again: still one row per episode
    assert len(cat.episode_ids("SELECT episode_id FROM episodes")) == 3


def test_rebuild_from_a_missing_lake_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(PiCatalogError, match="cannot read the episodes table"):
        Catalog(str(tmp_path / "catalog")).rebuild_from_lake(LakeLayout(str(tmp_path / "nowhere")))


def test_lock_timeout_when_another_holder_keeps_the_lock(tmp_path: Path) -> None:
    cat = Catalog(str(tmp_path / "catalog"), lock_timeout_s=0.1)
    cat.ensure_schema()
    assert cat.lock_path == str(tmp_path / "catalog") + ".lock"
    cat.close()  # this process keeps its engine (and the lock) until another process waits
    fd = os.open(cat.lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(CatalogLockTimeout, match="could not lock the catalog"):
            cat.query_arrow("SELECT 1")
    finally:
        os.close(fd)
    assert cat.query_arrow("SELECT 1 AS x").column("x").to_pylist() == [1]


def test_location_validation() -> None:
    with pytest.raises(ValueError, match="neither a filesystem path"):
        Catalog("s3://bucket/catalog")
    with pytest.raises(ValueError, match="lock_timeout_s"):
        Catalog("/tmp/x", lock_timeout_s=-1)
    with pytest.raises(ValueError, match="no host"):
        Catalog("http://:8123")
    server = Catalog("https://ch.example.com/lakedb")
    assert not server.is_embedded and server.lock_path is None


_WORKER = textwrap.dedent(
    """
    import sys
    from pi_catalog import Catalog
    from tests.fixtures.lake_factory import episode_rows, make_episode

    path, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cat = Catalog(path, lock_timeout_s=120)
    for i in range(first, first + count):
        rows = episode_rows([make_episode(i, steps=2, cameras=["cam"], size=(16, 16), seed=0)])
        cat.record_episodes(rows, episodes_version=i)
        n = cat.query_arrow("SELECT count() AS n FROM episodes").column("n")[0].as_py()
        assert n >= i - first + 1, n
    print("ok", first)
    """
)


@pytest.mark.integration
def test_two_processes_alternate_on_one_chdb_path(tmp_path: Path) -> None:
    path = str(tmp_path / "catalog")
    Catalog(path).ensure_schema()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, path, str(first), "6"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for first in (0, 100)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        assert out.startswith("ok")
    ids = Catalog(path).episode_ids("SELECT episode_id FROM episodes ORDER BY episode_id")
    assert ids == [f"ep-{i:03d}" for i in [*range(6), *range(100, 106)]]


def test_format_table_aligns_truncates_and_counts() -> None:
    table = pa.table(
        {
            "robot_id": ["arm-1", "a-very-long-robot-identifier-indeed", None],
            "episodes": [12, 3, 7],
            "tags": [["a", "b"], [], ["c"]],
            "seconds": [1.5, 2.25, float("nan")],
        }
    )
    text = format_table(table, max_rows=2, max_width=12)
    lines = text.splitlines()
    assert lines[0].split(" | ") == ["robot_id    ", "episodes", "tags  ", "seconds"]
    assert set(lines[1]) <= {"-", "+"}
    assert "a-very-long…" in lines[3]
    assert lines[2].split(" | ")[1] == "      12"  # numbers right-aligned
    assert "[a, b]" in lines[2]
    assert lines[-1] == "(3 rows, 2 shown; raise max_rows to see more)"
    full = format_table(table)
    assert "NULL" in full and "nan" in full and full.endswith("(3 rows)")
    assert format_table(table.slice(0, 1)).endswith("(1 row)")
    with pytest.raises(ValueError, match="max_rows"):
        format_table(table, max_rows=-1)
