"""Running users' SQL beside the other pages: a bounded number at a time, each on a reader of
its own under fixed limits.

The catalog's embedded engine (chdb) is one per process and the process's catalog calls take
turns on it; a user's query used to take its turn too, so six heavy ones ran one after another
and the Overview waited for all of them. Here a user's query runs on an isolated reader
(pi_catalog `Catalog.isolated_reader`: its own chdb handle, which chdb 4.x runs in parallel with
the engine's other handles), so the pages that do not run user SQL never wait for one. At most
`max_running_queries` run at once; up to `max_waiting_queries` more wait at most
`query_wait_s` for a turn; the rest are refused at once (QueryBusy, HTTP 503). Waiting holds
one of the server's worker threads, so the bound on waiters is also what keeps threads free
for the other pages.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pi_jobs.ui._errors import QueryBusy
from pi_jobs.ui._screen import EngineFunctions
from pi_jobs.ui._sql import QueryResult, run_select
from pi_jobs.ui.config import UiConfig

T = TypeVar("T")

# On a server catalog, users' SQL runs as this user where it is set (deploy/k8s/clickhouse.yaml:
# `pilake_ui`, read-only on the catalog's database, its limits a settings profile), while the
# other pages read as PILAKE_CLICKHOUSE_USER (the Overview creates missing tables).
SQL_CREDENTIALS_ENV = ("PILAKE_UI_CLICKHOUSE_USER", "PILAKE_UI_CLICKHOUSE_PASSWORD")


def query_settings(config: UiConfig) -> dict[str, object]:
    """The settings every statement of the Query page runs under, in the order they are set
    (`readonly` last: at readonly = 1 no setting may change any more, from the query either).

    Example:
        >>> query_settings(UiConfig(lake_root="/l", catalog="/c", cache_dir=Path("/u")))["readonly"]
        1
    """
    return {
        "max_execution_time": config.query_timeout_s,
        "timeout_overflow_mode": "throw",
        "max_memory_usage": config.query_memory_bytes,
        "max_threads": config.query_threads,
        # a page is page_size rows and the count one row; EXPLAIN AST a line per node
        "max_result_rows": config.query_result_rows,
        "max_result_bytes": config.query_result_bytes,
        "result_overflow_mode": "throw",
        "max_query_size": 4 * config.max_sql_chars + 1024,
        "max_ast_elements": 50_000,
        "max_ast_depth": 1_000,
        "readonly": 1,
    }


class QueryGate:
    """At most `running` holders at once, at most `waiting` more waiting up to `wait_s`.

    Example:
        >>> gate = QueryGate(running=2, waiting=4, wait_s=5.0)
        >>> with gate:
        ...     ...
    """

    def __init__(self, *, running: int, waiting: int, wait_s: float) -> None:
        self._slots = threading.BoundedSemaphore(running)
        self._lock = threading.Lock()
        self.running_max = running
        self.waiting_max = waiting
        self.wait_s = wait_s
        self.running = 0
        self.waiting = 0
        self.most_running = 0  # the highest `running` seen (tests check the bound held)

    def __enter__(self) -> QueryGate:
        with self._lock:
            if self._slots.acquire(blocking=False):
                self._entered()
                return self
            if self.waiting >= self.waiting_max:
                raise QueryBusy(
                    f"{self.running} queries are running and {self.waiting} waiting, the most this "
                    f"page runs ({self.running_max}) and queues ({self.waiting_max}); retry in a few seconds"
                )
            self.waiting += 1
        try:
            got = self._slots.acquire(timeout=self.wait_s)
        finally:
            with self._lock:
                self.waiting -= 1
        if not got:
            raise QueryBusy(
                f"no turn within {self.wait_s:g} s: {self.running_max} other queries were running "
                "the whole time; retry in a few seconds or narrow the query"
            )
        with self._lock:
            self._entered()
        return self

    def _entered(self) -> None:
        self.running += 1
        self.most_running = max(self.most_running, self.running)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.running -= 1
        self._slots.release()


class SqlRunner:
    """The Query page's engine room: the gate, the reader's settings and the engine's function
    names (read once, on the first query).

    Example:
        >>> runner = SqlRunner(config, Catalog(config.catalog))
        >>> runner.run("SELECT episode_id FROM episodes", page=0).total_rows
        1234
    """

    def __init__(self, config: UiConfig, catalog: Any) -> None:
        self.config = config
        self.catalog = catalog
        self.settings = query_settings(config)
        self.gate = QueryGate(
            running=config.max_running_queries, waiting=config.max_waiting_queries, wait_s=config.query_wait_s
        )
        self._functions: EngineFunctions | None = None
        self._functions_lock = threading.Lock()

    def _engine_functions(self, reader: Any) -> EngineFunctions:
        with self._functions_lock:
            if self._functions is None:
                self._functions = EngineFunctions.read(reader)
            return self._functions

    def run(self, sql: str, *, page: int) -> QueryResult:
        """Screen and run one page of `sql` (see pi_jobs.ui._sql.run_select).

        Raises:
            QueryBusy: no turn (too many queries running and waiting).
            QueryRefused: the text or the parsed query is refused, or the SQL is too long.
            pi_catalog.CatalogQueryError: ClickHouse failed it (a limit, the time, an error).
        """
        from pi_jobs.ui._errors import QueryRefused

        if len(sql) > self.config.max_sql_chars:
            raise QueryRefused(
                f"the query is {len(sql)} characters, more than the {self.config.max_sql_chars} this page "
                "takes; shorten it (or run it with `pilake sql`)"
            )
        with (
            self.gate,
            self.catalog.isolated_reader(self.settings, credentials_env=SQL_CREDENTIALS_ENV) as reader,
        ):
            return run_select(
                reader,
                sql,
                functions=self._engine_functions(reader),
                page=page,
                page_size=self.config.page_size,
                row_cap=self.config.row_cap,
            )

    def on_selection(self, sql: str, use: Callable[[Callable[[str], Any], str], T]) -> T:
        """Screen `sql` as `run` does, then call `use(run, where)` on the same bounded reader:
        `where` selects the catalog's episodes whose id the query returns, `run` runs a
        statement (built by the caller from its own text and `where`) on that reader.

        Raises:
            QueryBusy, QueryRefused, pi_catalog.CatalogQueryError: as `run`.

        Example:
            >>> runner.on_selection("SELECT episode_id FROM episodes WHERE success",
            ...     lambda run, where: run(f"SELECT count() AS n FROM episodes WHERE {where}"))
        """
        from pi_jobs.ui._errors import QueryRefused
        from pi_jobs.ui._sql import screen

        if len(sql) > self.config.max_sql_chars:
            raise QueryRefused(
                f"the query is {len(sql)} characters, more than the {self.config.max_sql_chars} this page "
                "takes; shorten it"
            )
        with (
            self.gate,
            self.catalog.isolated_reader(self.settings, credentials_env=SQL_CREDENTIALS_ENV) as reader,
        ):
            checked = screen(reader, sql, self._engine_functions(reader))
            # the query on lines of its own: a trailing `--` comment cannot swallow the wrapper
            where = f"episode_id IN (SELECT episode_id FROM (\n{checked}\n))"
            return use(reader.query_arrow, where)
