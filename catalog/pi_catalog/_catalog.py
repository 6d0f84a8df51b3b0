"""The catalog: a ClickHouse index of episode metadata, derived from the Delta `episodes` table.

Sits after the lake sink in the data flow: the stream job records each committed batch of
episodes here, `pilake sql` and `pi_loader.Dataset(sql=...)` query it. Delta stays the source of
truth (architecture decision 7): `rebuild_from_lake` recreates the index from it.

Two deployments, one client API (clickhouse-connect): an embedded chdb engine on a local path,
or a ClickHouse server over HTTP(S). A chdb path can be open in one process at a time, so every
operation on a chdb catalog takes an exclusive flock beside the data path, opens the engine,
works and closes it again (~50 ms); a stream job and `pilake sql` then take turns.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pi_format import LakeLayout

from pi_catalog._connection import ServerLocation, connect, exclusive_lock, parse_location
from pi_catalog._errors import CatalogQueryError, PiCatalogError
from pi_catalog._schema import (
    EPISODES_VIEW,
    INDEX_ARROW_SCHEMA,
    INDEX_TABLE,
    INDEXED_FIELDS,
    SNAPSHOTS_DDL,
    SNAPSHOTS_TABLE,
    VIEW_DDL,
    index_ddl,
)

# Rows per INSERT when rebuilding: bounds memory on a large lake, still few inserts.
_REBUILD_BATCH_ROWS = 50_000


class Catalog:
    """The episode index in ClickHouse: embedded chdb at a path, or a server at an http(s) URL.

    Every method opens a client, works and closes it; on chdb it does so under an exclusive
    file lock (`<path>.lock`), so several processes can share one catalog path in turns. Opening
    costs ~100-250 ms here (the client's handshake), whatever the catalog's size: a caller that
    runs many queries holds one client with `with catalog.held(): ...` (and the lock with it).
    Credentials of a server come from PILAKE_CLICKHOUSE_USER / PILAKE_CLICKHOUSE_PASSWORD.

    Args:
        location: a directory for chdb (created on first use), or "http://host:port[/db]" /
            "https://host:port[/db]" for a ClickHouse server.
        lock_timeout_s: how long to wait for another process's operation to finish (chdb only).

    Raises:
        ValueError: when location or lock_timeout_s is invalid.

    Example:
        >>> catalog = Catalog("/data/pilake/catalog")
        >>> catalog.ensure_schema()
        >>> catalog.query_arrow("SELECT count() AS n FROM episodes WHERE task = {t:String}", {"t": "pick"})
    """

    def __init__(self, location: str, *, lock_timeout_s: float = 60.0) -> None:
        if not lock_timeout_s >= 0:
            raise ValueError(f"lock_timeout_s must be >= 0 seconds, got {lock_timeout_s}")
        self._target = parse_location(location)
        self.location = location if isinstance(self._target, ServerLocation) else self._target
        self.lock_timeout_s = float(lock_timeout_s)
        self._held: Any = None

    def __repr__(self) -> str:
        return f"Catalog({self.location!r})"

    @property
    def is_embedded(self) -> bool:
        """True for a chdb catalog on a local path, False for a ClickHouse server."""
        return isinstance(self._target, str)

    @property
    def lock_path(self) -> str | None:
        """The lock file beside a chdb data path; None for a server."""
        return f"{self._target}.lock" if isinstance(self._target, str) else None

    # -- sessions -------------------------------------------------------------------------

    @contextlib.contextmanager
    def held(self) -> Iterator[Catalog]:
        """Keep one client (and, on chdb, the lock) open for every call inside the block.

        Example:
            >>> with catalog.held():
            ...     for t in tasks:
            ...         catalog.query_arrow("SELECT count() FROM episodes WHERE task = {t:String}", {"t": t})
        """
        if self._held is not None:
            yield self
            return
        with self._open() as client:
            self._held = client
            try:
                yield self
            finally:
                self._held = None

    @contextlib.contextmanager
    def _session(self) -> Iterator[Any]:
        if self._held is not None:
            yield self._held
            return
        with self._open() as client:
            yield client

    @contextlib.contextmanager
    def _open(self) -> Iterator[Any]:
        with exclusive_lock(self.lock_path, self.lock_timeout_s):
            client = connect(self._target, self.location)
            try:
                yield client
            finally:
                client.close()

    @staticmethod
    def _command(client: Any, sql: str) -> None:
        try:
            client.command(sql)
        except Exception as err:
            raise CatalogQueryError(str(err), sql) from err

    def _ensure(self, client: Any) -> None:
        for ddl in (index_ddl(), VIEW_DDL, SNAPSHOTS_DDL):
            self._command(client, ddl)

    # -- public API -----------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the index table, the deduplicating `episodes` view and `dataset_snapshots`.

        Idempotent; cheap enough to call before every command.

        Example:
            >>> Catalog("/tmp/catalog").ensure_schema()
        """
        with self._session() as client:
            self._ensure(client)

    def record_episodes(self, rows: pa.Table, *, episodes_version: int) -> None:
        """Index committed episodes: `rows` in pi_format.EPISODES_SCHEMA, read at Delta version
        `episodes_version`. Idempotent: re-recording an episode leaves one row in `episodes`.

        Raises:
            TypeError: rows is not a pyarrow Table.
            ValueError: rows lacks columns of EPISODES_SCHEMA or has nulls in them.

        Example:
            >>> catalog.record_episodes(episode_rows, episodes_version=dt.version())
        """
        table = _index_rows(rows, episodes_version)
        with self._session() as client:
            self._ensure(client)
            self._insert(client, table)

    def _insert(self, client: Any, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        try:
            client.insert_arrow(INDEX_TABLE, table)
        except Exception as err:
            raise CatalogQueryError(str(err), f"INSERT INTO {INDEX_TABLE} ({table.num_rows} rows)") from err

    def query_arrow(self, sql: str, parameters: Mapping[str, object] | None = None) -> pa.Table:
        """Run one SELECT and return its result as Arrow.

        Values go in `parameters` and are referenced with ClickHouse placeholders
        (`{name:Type}`); they are bound by ClickHouse, never pasted into the SQL.

        Raises:
            CatalogQueryError: ClickHouse rejected the query (message and SQL attached).
            CatalogLockTimeout: another process held the catalog too long.

        Example:
            >>> catalog.query_arrow(
            ...     "SELECT episode_id FROM episodes WHERE robot_id = {r:String} AND success",
            ...     {"r": "arm-7"},
            ... )
        """
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError(f"sql must be a non-empty string, got {sql!r}")
        params = dict(parameters) if parameters is not None else None
        with self._session() as client:
            try:
                result: pa.Table = client.query_arrow(sql, parameters=params)
            except Exception as err:
                raise CatalogQueryError(str(err), sql) from err
        return result

    def episode_ids(self, sql: str, parameters: Mapping[str, object] | None = None) -> list[str]:
        """The `episode_id` column of a query, in the query's order, without repeats.

        Raises:
            CatalogQueryError: the query fails or returns no `episode_id` column.

        Example:
            >>> catalog.episode_ids("SELECT episode_id FROM episodes WHERE has(tags, {t:String})",
            ...                     {"t": "grasp"})
        """
        table = self.query_arrow(sql, parameters)
        if "episode_id" not in table.column_names:
            raise CatalogQueryError(
                f"the query must return an `episode_id` column, it returned {table.column_names}; "
                "add `episode_id` to the SELECT list",
                sql,
            )
        seen: dict[str, None] = {}
        for value in table.column("episode_id").to_pylist():
            if value is None:
                continue
            seen.setdefault(value.decode() if isinstance(value, bytes) else str(value), None)
        return list(seen)

    def rebuild_from_lake(self, layout: LakeLayout) -> int:
        """Drop the episode index and recreate it from the lake's Delta `episodes` table.

        Dataset snapshots are kept. Returns the number of episodes indexed.

        Raises:
            PiCatalogError: the lake has no episodes table at `layout.episodes`.

        Example:
            >>> Catalog("/data/catalog").rebuild_from_lake(LakeLayout("/data/lake"))
            1234
        """
        from deltalake import DeltaTable

        try:
            delta = DeltaTable(layout.episodes)
        except Exception as err:  # deltalake raises TableNotFoundError and friends
            raise PiCatalogError(
                f"cannot read the episodes table at {layout.episodes}: {err}; "
                "check the lake root (PILAKE_LAKE)"
            ) from err
        version = int(delta.version())
        dataset = delta.to_pyarrow_dataset()
        names = [f.name for f in INDEXED_FIELDS]
        rows = 0
        with self._session() as client:
            self._command(client, f"DROP VIEW IF EXISTS {EPISODES_VIEW}")
            self._command(client, f"DROP TABLE IF EXISTS {INDEX_TABLE}")
            self._ensure(client)
            for batch in dataset.to_batches(columns=names, batch_size=_REBUILD_BATCH_ROWS):
                table = _index_rows(pa.Table.from_batches([batch]), version)
                self._insert(client, table)
                rows += table.num_rows
        return rows

    # -- dataset snapshots (architecture decision 6) ---------------------------------------

    def _ensure_snapshots(self, client: Any) -> None:
        self._ensure(client)
        # The full snapshot (episode ids and attempts) as JSON; catalogs made before it existed
        # gain the column here. sql and table_versions stay as columns for queries.
        self._command(client, f"ALTER TABLE {SNAPSHOTS_TABLE} ADD COLUMN IF NOT EXISTS snapshot String")

    def save_snapshot(
        self, name: str, snapshot_json: str, *, sql: str, table_versions: Mapping[str, int]
    ) -> None:
        """Store a dataset snapshot (a pi_loader.Snapshot as JSON) under `name`.

        Names are immutable: storing the same JSON again is a no-op; different JSON under a taken
        name raises, so a training run's named dataset can never change under it.

        Raises:
            ValueError: empty name.
            PiCatalogError: the name is taken by a different snapshot.

        Example:
            >>> catalog.save_snapshot("pick-v3", snap.to_json(), sql=snap.sql or "",
            ...                       table_versions=snap.table_versions)
        """
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"snapshot name must be a non-empty string, got {name!r}")
        with self._session() as client:
            self._ensure_snapshots(client)
            existing = self._snapshot_rows(client, name)
            if existing:
                if existing[0] == snapshot_json:
                    return
                raise PiCatalogError(
                    f"snapshot name {name!r} is taken by a different snapshot; names are immutable, "
                    "pick a new name (e.g. with a version suffix)"
                )
            row = pa.table(
                {
                    "name": pa.array([name]),
                    "created_at": pa.array([time.time_ns() // 1_000_000], pa.int64()).cast(
                        pa.timestamp("ms", tz="UTC")
                    ),
                    "sql": pa.array([sql]),
                    "table_versions": pa.array([json.dumps(dict(table_versions), sort_keys=True)]),
                    "snapshot": pa.array([snapshot_json]),
                }
            )
            try:
                client.insert_arrow(SNAPSHOTS_TABLE, row)
            except Exception as err:
                raise CatalogQueryError(str(err), f"INSERT INTO {SNAPSHOTS_TABLE} (name={name!r})") from err

    def _snapshot_rows(self, client: Any, name: str) -> list[str]:
        sql = f"SELECT snapshot FROM {SNAPSHOTS_TABLE} WHERE name = {{name:String}} ORDER BY created_at"
        try:
            table = client.query_arrow(sql, parameters={"name": name})
        except Exception as err:
            raise CatalogQueryError(str(err), sql) from err
        return [v.decode() if isinstance(v, bytes) else str(v) for v in table.column("snapshot").to_pylist()]

    def snapshot_json(self, name: str) -> str:
        """The JSON stored under snapshot `name`.

        Raises:
            PiCatalogError: no snapshot has that name (the message lists the names there are).

        Example:
            >>> Snapshot.from_json(catalog.snapshot_json("pick-v3"))
        """
        with self._session() as client:
            self._ensure_snapshots(client)
            rows = self._snapshot_rows(client, name)
            if not rows:
                names = self._snapshot_names(client)
                raise PiCatalogError(
                    f"no dataset snapshot named {name!r} in the catalog at {self.location}; "
                    f"it has {names[:20]}{' ...' if len(names) > 20 else ''}"
                )
        return rows[0]

    def _snapshot_names(self, client: Any) -> list[str]:
        sql = f"SELECT DISTINCT name FROM {SNAPSHOTS_TABLE} ORDER BY name"
        try:
            table = client.query_arrow(sql)
        except Exception as err:
            raise CatalogQueryError(str(err), sql) from err
        return [v.decode() if isinstance(v, bytes) else str(v) for v in table.column("name").to_pylist()]

    def snapshot_names(self) -> list[str]:
        """Names of the stored dataset snapshots, sorted.

        Example:
            >>> Catalog("/data/catalog").snapshot_names()
            ['pick-v3']
        """
        with self._session() as client:
            self._ensure_snapshots(client)
            return self._snapshot_names(client)


def _index_rows(rows: pa.Table, episodes_version: int) -> pa.Table:
    if not isinstance(rows, pa.Table):
        raise TypeError(f"rows must be a pyarrow.Table in EPISODES_SCHEMA, got {type(rows).__name__}")
    if isinstance(episodes_version, bool) or not isinstance(episodes_version, int) or episodes_version < 0:
        raise ValueError(f"episodes_version must be a Delta version (int >= 0), got {episodes_version!r}")
    missing = [f.name for f in INDEXED_FIELDS if f.name not in rows.column_names]
    if missing:
        raise ValueError(f"rows lack columns of EPISODES_SCHEMA: {missing}; pass episodes rows as written")
    n = rows.num_rows
    arrays: list[pa.Array | pa.ChunkedArray] = []
    for field in INDEX_ARROW_SCHEMA:
        if field.name == "episodes_version":
            arrays.append(pa.array([episodes_version] * n, pa.int64()))
        elif field.name == "indexed_at":
            now_ms = time.time_ns() // 1_000_000
            arrays.append(pa.array([now_ms] * n, pa.int64()).cast(field.type))
        else:
            column = rows.column(field.name)
            if column.null_count:
                raise ValueError(f"column {field.name!r} has {column.null_count} nulls; it must have none")
            try:
                arrays.append(column.cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise ValueError(
                    f"column {field.name!r} of type {column.type} does not cast to {field.type}: {err}"
                ) from err
    return pa.Table.from_arrays(arrays, schema=INDEX_ARROW_SCHEMA)
