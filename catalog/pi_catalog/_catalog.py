"""The catalog: a ClickHouse index of episode metadata, derived from the Delta `episodes` table.

Sits after the lake sink in the data flow: the stream job records each committed batch of
episodes here, `pilake sql` and `pi_loader.Dataset(sql=...)` query it. Delta stays the source of
truth (architecture decision 7): `rebuild` recreates the index from the lake's visible rows and
swaps it in atomically (`_rebuild`), and `forget_episodes` removes deleted episodes at once.

Two deployments, one client API (clickhouse-connect): an embedded chdb engine on a local path,
or a ClickHouse server over HTTP(S). A chdb path can be open in one process at a time: the
process keeps its engine open, under an exclusive flock beside the data path, until another
process asks for the path (`_engine`); a stream job and `pilake sql` then take turns.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pi_format import LakeLayout
from pi_format.lake.visibility import read_deleted_ids

from pi_catalog._annotations import ANNOTATIONS_INDEX, AnnotationsMixin
from pi_catalog._connection import ServerLocation, connect, parse_location
from pi_catalog._engine import Engine, embedded, release
from pi_catalog._errors import CatalogQueryError
from pi_catalog._parts import keep_parts_bounded
from pi_catalog._reader import IsolatedReader, isolated_reader
from pi_catalog._rebuild import (
    LakeEpisodes,
    RebuildReport,
    id_batches,
    newly_deleted,
    read_lake_episodes,
    unique_ids,
)
from pi_catalog._schema import (
    FRESHNESS_ARROW_SCHEMA,
    FRESHNESS_DDL,
    FRESHNESS_TABLE,
    INDEX_TABLE,
    SNAPSHOTS_DDL,
    VIEW_DDL,
    VIEW_REPLACE_DDL,
    index_ddl,
    index_rows,
)
from pi_catalog._snapshots import SnapshotsMixin

# Rows per INSERT when rebuilding: bounds memory on a large lake, still few inserts.
_REBUILD_BATCH_ROWS = 50_000
# A rebuild carries over the rows recorded into the old index from this long before it
# started: writers stamp `indexed_at` with their own clocks. Rows recorded earlier than that are
# in the Delta version the rebuild reads (a writer records after its commit).
_CARRY_MARGIN_MS = 60_000
# `forget_episodes`: return only once the rows are masked for every new query.
_DELETE_SETTINGS = {"lightweight_deletes_sync": 2, "mutations_sync": 2}


@dataclass(slots=True)
class _Session:
    """A client for one call (or one `held()` block); `engine` is the process's chdb engine,
    None on a server. `ensured` holds the schema statements already run through it."""

    client: Any
    engine: Engine | None = None
    ensured: set[str] = field(default_factory=set)


class Catalog(SnapshotsMixin, AnnotationsMixin):
    """The episode index in ClickHouse: embedded chdb at a path, or a server at an http(s) URL.

    On chdb the process opens the engine on its first call and keeps it, with an exclusive
    file lock (`<path>.lock`), until another process waits for the path (it then hands it over
    within ~50 ms) or `close()`; several processes share one catalog path in turns, and every
    Catalog of the process on that path uses the one engine (chdb runs one engine per process:
    a Catalog on another path closes it first). On a server every method opens a client, works
    and closes it (~100-250 ms for the handshake): a caller that runs many queries holds one
    client with `with catalog.held(): ...` (on chdb it keeps other processes out meanwhile).
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

    def close(self) -> None:
        """Close this process's chdb engine on this catalog's path and release its lock now
        (no-op on a server, or where it is not open); the next call opens it again. Never needed
        for correctness: another process that waits gets the path anyway, and the engine closes
        at exit. Each reopen costs chdb's leaked pool threads, so do not call it per operation.

        Example:
            >>> catalog.close()
        """
        if isinstance(self._target, str):
            release(self._target)

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
        with self._open() as session:
            self._held = session
            try:
                yield self
            finally:
                self._held = None

    @contextlib.contextmanager
    def isolated_reader(
        self, settings: Mapping[str, object], *, credentials_env: tuple[str, str] | None = None
    ) -> Iterator[IsolatedReader]:
        """A reader whose queries run beside this process's other catalog calls (neither
        waiting for them nor holding them up) under `settings`, applied in order to every query
        (put `readonly` last: at readonly = 1 no later setting may change). On chdb it is a
        handle of its own on the process's engine (chdb 4.x runs handles in parallel); on a
        server, a client of its own, as the user named by the environment variables
        `credentials_env` (user, password) where the first is set, else as every other call.

        Raises:
            ValueError: a setting name that is not a lower-case word.

        Example:
            >>> with catalog.isolated_reader({"max_execution_time": 10, "readonly": 1}) as reader:
            ...     reader.query_arrow("SELECT count() AS n FROM episodes")
        """
        with isolated_reader(
            self._target, self.location, self.lock_timeout_s, settings, credentials_env
        ) as reader:
            yield reader

    @contextlib.contextmanager
    def _session(self) -> Iterator[_Session]:
        if self._held is not None:
            yield self._held
            return
        with self._open() as session:
            yield session

    @contextlib.contextmanager
    def _open(self) -> Iterator[_Session]:
        if isinstance(self._target, str):
            with embedded(self._target, self.location, self.lock_timeout_s) as engine:
                yield _Session(engine.client, engine, engine.ensured)
            return
        client = connect(self._target, self.location)
        try:
            yield _Session(client)
        finally:
            client.close()

    @staticmethod
    def _command(client: Any, sql: str) -> None:
        try:
            client.command(sql)
        except Exception as err:
            raise CatalogQueryError(str(err), sql) from err

    def _ensure(self, session: _Session) -> None:
        # On chdb no other process can change the schema while this engine is open: each
        # statement runs once per engine.
        for ddl in (index_ddl(), VIEW_DDL, SNAPSHOTS_DDL, FRESHNESS_DDL):
            if ddl not in session.ensured:
                self._command(session.client, ddl)
                session.ensured.add(ddl)

    # -- public API -----------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the index table, the deduplicating `episodes` view, `dataset_snapshots` and
        `episode_freshness`.

        Idempotent; cheap enough to call before every command.

        Example:
            >>> Catalog("/tmp/catalog").ensure_schema()
        """
        with self._session() as session:
            self._ensure(session)

    def record_episodes(self, rows: pa.Table, *, episodes_version: int) -> None:
        """Index committed episodes: `rows` in pi_format.EPISODES_SCHEMA, read at Delta version
        `episodes_version`. Idempotent: re-recording an episode leaves one row in `episodes`.

        Raises:
            TypeError: rows is not a pyarrow Table.
            ValueError: rows lacks columns of EPISODES_SCHEMA or has nulls in them.

        Example:
            >>> catalog.record_episodes(episode_rows, episodes_version=dt.version())
        """
        table = index_rows(rows, episodes_version)
        with self._session() as session:
            self._ensure(session)
            self._insert(session, table)

    def record_freshness(self, rows: pa.Table) -> None:
        """Append freshness rows (`FRESHNESS_ARROW_SCHEMA`: episode_id, attempt_id,
        published_at_ns, lake_committed_at_ns, readable_at_ns, episodes_version) to the table
        `episode_freshness` that `pilake freshness` reads.

        Example:
            >>> catalog.record_freshness(pa.Table.from_pylist(rows, schema=FRESHNESS_ARROW_SCHEMA))
        """
        table = rows.select(FRESHNESS_ARROW_SCHEMA.names).cast(FRESHNESS_ARROW_SCHEMA)
        if table.num_rows == 0:
            return
        with self._session() as session:
            self._ensure(session)
            try:
                session.client.insert_arrow(FRESHNESS_TABLE, table)
            except Exception as err:
                sql = f"INSERT INTO {FRESHNESS_TABLE} ({table.num_rows} rows)"
                raise CatalogQueryError(str(err), sql) from err

    def _insert(self, session: _Session, table: pa.Table, into: str = INDEX_TABLE) -> None:
        if table.num_rows == 0:
            return
        try:
            session.client.insert_arrow(into, table)
        except Exception as err:
            raise CatalogQueryError(str(err), f"INSERT INTO {into} ({table.num_rows} rows)") from err
        # a server merges and cleans up in the background itself; a rebuild's staging table
        # gets few, large inserts
        if session.engine is not None and into == INDEX_TABLE:
            session.engine.inserts += 1
            keep_parts_bounded(session.client, session.engine.inserts)

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
        with self._session() as session:
            try:
                result: pa.Table = session.client.query_arrow(sql, parameters=params)
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

    def forget_episodes(self, episode_ids: Sequence[str] | pa.Array | pa.ChunkedArray) -> int:
        """Remove episodes from the index (they were deleted from the lake: `pilake episodes
        delete` appends them to the `deletions` table first, then calls this).

        Synchronous: every selection started after it returns leaves them out. Ids not in the
        index are ignored; any number of ids works (they are bound in batches of ~16 KB).
        An episode recorded again later (a replayed commit) shows up again: the `deletions`
        table, applied by `rebuild`, stays the authority.

        Returns:
            how many episodes were in the index and are gone now.

        Raises:
            TypeError: episode_ids is a string, or holds a value that is not a string.
            CatalogQueryError: ClickHouse rejected the delete.

        Example:
            >>> catalog.forget_episodes(["r1-000007", "r1-000012"])
            2
        """
        ids = unique_ids(episode_ids)
        if not ids:
            return 0
        with self._session() as session:
            self._ensure_annotations(session)
            forgotten = sum(self._forget(session.client, INDEX_TABLE, batch) for batch in id_batches(ids))
            for batch in id_batches(ids):  # a deleted episode's annotations go with it
                self._forget(session.client, ANNOTATIONS_INDEX, batch)
            return forgotten

    def _forget(self, client: Any, table: str, ids: list[str]) -> int:
        params = {"ids": ids}
        count_sql = f"SELECT count() AS n FROM {table} FINAL WHERE episode_id IN {{ids:Array(String)}}"
        try:
            present = int(client.query_arrow(count_sql, parameters=params).column("n")[0].as_py())
        except Exception as err:
            raise CatalogQueryError(str(err), count_sql) from err
        if present:
            # A lightweight delete: rows are masked at once and dropped by later merges. The sync
            # settings (ClickHouse's defaults, pinned against a server profile that lowers them)
            # make it return only once every new query leaves the rows out.
            sql = f"DELETE FROM {table} WHERE episode_id IN {{ids:Array(String)}}"
            try:
                client.command(sql, parameters=params, settings=_DELETE_SETTINGS)
            except Exception as err:
                raise CatalogQueryError(str(err), f"{sql} ({len(ids)} ids)") from err
        return present

    def rebuild_from_lake(self, layout: LakeLayout) -> int:
        """Recreate the episode index from the lake: `rebuild(layout).episodes`.

        Returns:
            the number of episodes indexed (the visible episodes of the lake).

        Raises:
            PiCatalogError: the lake has no episodes table at `layout.episodes`.

        Example:
            >>> Catalog("/data/catalog").rebuild_from_lake(LakeLayout("/data/lake"))
            1234
        """
        return self.rebuild(layout).episodes

    def rebuild(self, layout: LakeLayout) -> RebuildReport:
        """Recreate the episode index from the lake's Delta `episodes` table, atomically.

        Indexes the visible rows only (pi_format.lake's rule: the latest attempt of each
        episode, none of the episodes in the `deletions` table), read from one Delta version,
        which the rows record as `episodes_version`. Memory stays bounded: the commit columns
        of every row decide the winners, then the indexed columns stream in batches.

        The new index is built in a staging table and swapped in with one `EXCHANGE TABLES`, so
        a selection sees the complete old index or the complete new one, never a partial one;
        on chdb other calls of the process (and other processes) run between the batches. Rows
        that writers recorded while the rebuild ran are carried into the new index, episodes
        deleted meanwhile are forgotten in it. A failed rebuild leaves the old index as it was.
        The `annotations` table is rebuilt after it the same way (`rebuild_annotations`).
        `dataset_snapshots` and `episode_freshness` are not touched.

        Returns:
            a RebuildReport: episodes indexed, deleted episodes and superseded attempt rows left
            out, the Delta version read, seconds taken.

        Raises:
            PiCatalogError: the lake has no episodes table at `layout.episodes`.
            CatalogQueryError: ClickHouse rejected a statement (the old index stays).

        Example:
            >>> report = Catalog("/data/catalog").rebuild(LakeLayout("/data/lake"))
            >>> report.episodes, report.deleted_excluded
            (1234, 2)
        """
        started = time.monotonic()
        # Rows recorded from here on (less a margin for writers' clocks) may be missing from
        # the Delta version read: they are carried from the old index into the new one.
        since_ms = time.time_ns() // 1_000_000 - _CARRY_MARGIN_MS
        lake = read_lake_episodes(layout)
        staging = f"{INDEX_TABLE}_rebuild_{uuid.uuid4().hex[:12]}"
        swapped = False
        try:
            with self._session() as session:
                self._ensure(session)
                self._command(session.client, index_ddl(staging))
            # One session per batch: on chdb the process's other calls are not held up for
            # the whole rebuild; they read the old index meanwhile.
            for table in lake.index_batches(_REBUILD_BATCH_ROWS):
                with self._session() as session:
                    self._insert(session, table, staging)
            with self._session() as session:
                count_sql = f"SELECT count() AS n FROM {staging} FINAL"
                indexed = int(self._query(session.client, count_sql).column("n")[0].as_py())
                self._command(session.client, f"EXCHANGE TABLES {staging} AND {INDEX_TABLE}")
                swapped = True
                try:
                    self._command(session.client, VIEW_REPLACE_DDL)
                    self._carry_over(session, layout, lake, staging, since_ms)
                finally:
                    self._command(session.client, f"DROP TABLE IF EXISTS {staging} SYNC")
        finally:
            if not swapped:
                with contextlib.suppress(Exception), self._session() as session:
                    self._command(session.client, f"DROP TABLE IF EXISTS {staging} SYNC")
        self.rebuild_annotations(layout)
        return RebuildReport(
            episodes=indexed,
            deleted_excluded=lake.deleted_excluded,
            superseded_rows=lake.superseded_rows,
            episodes_version=lake.version,
            seconds=time.monotonic() - started,
        )

    def _carry_over(
        self, session: _Session, layout: LakeLayout, lake: LakeEpisodes, old: str, since_ms: int
    ) -> None:
        """After the swap: copy the rows recorded into the old index during the rebuild, of
        Delta versions after the one read, into the new one; then forget the episodes deleted
        during the rebuild (and any carried over that are deleted)."""
        where = (
            f"episodes_version > {lake.version} "
            f"AND indexed_at >= fromUnixTimestamp64Milli(toInt64({since_ms}), 'UTC')"
        )
        carried = pa.array([], pa.string())
        # an index of an older shape (EPISODES_SCHEMA grew since) has no rows to carry: its
        # writers ran older code, and their rows would lack columns
        if self._columns(session.client, old) == self._columns(session.client, INDEX_TABLE):
            carried_sql = f"SELECT DISTINCT episode_id FROM {old} WHERE {where}"
            carried = self._query(session.client, carried_sql).column("episode_id").cast(pa.string())
        if len(carried):
            self._command(session.client, f"INSERT INTO {INDEX_TABLE} SELECT * FROM {old} WHERE {where}")
        deleted_now = read_deleted_ids(layout)
        gone = set(newly_deleted(lake.deleted, deleted_now))
        if len(carried) and len(deleted_now):
            gone.update(unique_ids(carried.filter(pc.is_in(carried, value_set=deleted_now))))
        for batch in id_batches(sorted(gone)):
            self._forget(session.client, INDEX_TABLE, batch)

    def _columns(self, client: Any, table: str) -> list[tuple[str, str]]:
        sql = (
            "SELECT name, type FROM system.columns WHERE database = currentDatabase() "
            f"AND table = '{table}' ORDER BY position"
        )
        return [(str(r["name"]), str(r["type"])) for r in self._query(client, sql).to_pylist()]

    @staticmethod
    def _query(client: Any, sql: str) -> pa.Table:
        try:
            result: pa.Table = client.query_arrow(sql)
        except Exception as err:
            raise CatalogQueryError(str(err), sql) from err
        return result
