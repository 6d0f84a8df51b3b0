"""The catalog's record of backfill runs (`pilake backfill`, pi_jobs.backfill): one row per run.

Beside the episode index in the data flow: a backfill re-featurizes committed episodes from the
lake's raw table and commits them as new visible attempts (recorded in the index like any
commit, `Catalog.record_episodes`); this table says which runs made them, with which featurizer,
over which selection, into which lake, and how it went. Append-only (a plain MergeTree), created
on demand through the Catalog's session; a rebuild of the index keeps it (it drops only the
index and its view).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import pyarrow as pa

from pi_catalog._catalog import Catalog, _Session
from pi_catalog._errors import CatalogQueryError

BACKFILL_RUNS_TABLE = "backfill_runs"

BACKFILL_RUNS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {BACKFILL_RUNS_TABLE} (\n"
    "    run_id String,\n"
    "    featurizer String,\n"  # "<name>@<version>", the episodes rows' `featurizer`
    "    featurizer_name String,\n"
    "    featurizer_version Int64,\n"
    "    where_sql String,\n"  # the --where selection ('' = every visible episode)
    "    into String,\n"  # the derived lake's name ('' = a new attempt in the same lake)
    "    target_lake String,\n"
    "    selected Int64,\n"  # episodes the selection named
    "    already_done Int64,\n"  # of those, already carrying this featurizer (skipped)
    "    committed Int64,\n"
    "    duplicates Int64,\n"
    "    failed Int64,\n"
    "    raw_bytes Int64,\n"
    "    started_at_ns Int64,\n"
    "    finished_at_ns Int64,\n"
    "    status String\n"  # finished | failed | interrupted
    ") ENGINE = MergeTree ORDER BY (run_id, started_at_ns)"
)


@dataclass(frozen=True, slots=True)
class BackfillRun:
    """One row of `backfill_runs`.

    Example:
        >>> BackfillRun(run_id="res96-20261201T1200-1a2b", featurizer="res96@1",
        ...             featurizer_name="res96", featurizer_version=1, where_sql="success",
        ...             into="", target_lake="/data/lake", selected=10, already_done=0,
        ...             committed=10, duplicates=0, failed=0, raw_bytes=123456,
        ...             started_at_ns=t0, finished_at_ns=t1, status="finished")
    """

    run_id: str
    featurizer: str
    featurizer_name: str
    featurizer_version: int
    where_sql: str
    into: str
    target_lake: str
    selected: int
    already_done: int
    committed: int
    duplicates: int
    failed: int
    raw_bytes: int
    started_at_ns: int
    finished_at_ns: int
    status: str

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ValueError("run_id must be a non-empty string, got ''")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"{f.name} must be an int, got {type(value).__name__}")


def _arrow_schema() -> pa.Schema:
    return pa.schema(
        [pa.field(f.name, pa.int64() if f.type == "int" else pa.string()) for f in fields(BackfillRun)]
    )


def record_backfill_run(catalog: Catalog, run: BackfillRun) -> None:
    """Append `run` to the catalog table `backfill_runs` (created on first use).

    Raises:
        CatalogQueryError: ClickHouse refused the table or the insert.

    Example:
        >>> record_backfill_run(Catalog("/data/catalog"), run)
    """
    row = pa.Table.from_pylist([asdict(run)], schema=_arrow_schema())
    with catalog._session() as session:
        _ensure(catalog, session)
        try:
            session.client.insert_arrow(BACKFILL_RUNS_TABLE, row)
        except Exception as err:
            sql = f"INSERT INTO {BACKFILL_RUNS_TABLE} (run {run.run_id})"
            raise CatalogQueryError(str(err), sql) from err


def backfill_runs(catalog: Catalog) -> pa.Table:
    """Every recorded backfill run, oldest first (empty when none ran).

    Example:
        >>> backfill_runs(Catalog("/data/catalog")).column("featurizer").to_pylist()
        ['res96@1']
    """
    sql = f"SELECT * FROM {BACKFILL_RUNS_TABLE} ORDER BY started_at_ns, run_id"
    with catalog._session() as session:
        _ensure(catalog, session)
        try:
            table: pa.Table = session.client.query_arrow(sql)
        except Exception as err:
            raise CatalogQueryError(str(err), sql) from err
    return table


def _ensure(catalog: Catalog, session: _Session) -> None:
    # once per engine, like the Catalog's own tables
    if BACKFILL_RUNS_DDL not in session.ensured:
        catalog._command(session.client, BACKFILL_RUNS_DDL)
        session.ensured.add(BACKFILL_RUNS_DDL)
