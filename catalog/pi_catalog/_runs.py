"""The catalog's record of training runs (`pilake train`, pi_train): lineage from runs to pins.

One row per run in `training_runs` (a ReplacingMergeTree on `run_id`, newest `updated_at_ns`
wins): when it started, finished and last sent a heartbeat, its status, its out dir, the pins
it reads (name, content hash, snapshot table versions), its code version and host count. The
(episode_id, attempt_id) pairs a run reads go once per run into `training_run_reads`, so a
heartbeat stays a small row; GC keeps those rows (and the files they were read from) while the
run is live.

Derived data, like the whole catalog: the run's out dir (`lineage.json`, `run.json`) is the
source of truth and `pilake runs --rebuild OUT...` records it again. Every value travels as
an insert column or a query parameter, never as SQL text, so run ids and pin names with quotes,
backslashes or any unicode are stored as they are. A rebuild of the episode index keeps these
tables (it drops only the index and its view).

Example:
    >>> record_training_run(catalog, run)          # start, every heartbeat, and the end
    >>> [r.run_id for r in training_runs(catalog, pin="pick-v3")]
    ['train-20261127T1200-1a2b3c']
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import pyarrow as pa

from pi_catalog._catalog import Catalog, _Session
from pi_catalog._errors import CatalogQueryError

RUNS_TABLE = "training_runs"
RUN_READS_TABLE = "training_run_reads"
RUN_STATUSES = ("running", "finished", "failed", "preempted")
# A run whose last heartbeat is older than this is not live (its host died without saying so):
# GC stops protecting what it reads and `pilake runs` shows it as "lost". Heartbeats come every
# 30 s (pi_jobs.ops.runs.HEARTBEAT_S); ten missed ones are a dead run, not a slow catalog.
LIVE_WINDOW_S = 600.0

RUNS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {RUNS_TABLE} (\n"
    "    run_id String,\n"
    "    status String,\n"  # running | finished | failed | preempted
    "    started_at_ns Int64,\n"
    "    finished_at_ns Int64,\n"  # 0 while running
    "    heartbeat_at_ns Int64,\n"
    "    out_dir String,\n"
    "    pin_names Array(String),\n"  # '' for a selection by SQL (no pin)
    "    content_hashes Array(String),\n"  # same order; '' where unknown
    "    pins String,\n"  # JSON: [{name, content_hash, fingerprint, table_versions, episodes, weight}]
    "    table_versions String,\n"  # JSON: the first pin's snapshot versions
    "    code_version String,\n"  # the package version, or 'unknown'
    "    git_commit String,\n"  # or 'unknown'
    "    host_count Int64,\n"
    "    world_size Int64,\n"
    "    framework String,\n"
    "    updated_at_ns Int64\n"
    ") ENGINE = ReplacingMergeTree(updated_at_ns) ORDER BY run_id"
)
RUN_READS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {RUN_READS_TABLE} (\n"
    "    run_id String,\n"
    "    episode_ids Array(String),\n"
    "    attempt_ids Array(String),\n"
    "    updated_at_ns Int64\n"
    ") ENGINE = ReplacingMergeTree(updated_at_ns) ORDER BY run_id"
)


@dataclass(frozen=True, slots=True)
class TrainingRun:
    """One row of `training_runs`.

    Example:
        >>> TrainingRun(run_id="r1", status="running", started_at_ns=t0, heartbeat_at_ns=t0,
        ...             out_dir="/runs/r1", pin_names=("pick-v3",), content_hashes=("9b1f...",))
    """

    run_id: str
    status: str
    started_at_ns: int
    heartbeat_at_ns: int
    out_dir: str = ""
    pin_names: tuple[str, ...] = ()
    content_hashes: tuple[str, ...] = ()
    pins: str = "[]"  # JSON list, see RUNS_DDL
    table_versions: str = "{}"
    code_version: str = "unknown"
    git_commit: str = "unknown"
    host_count: int = 1
    world_size: int = 1
    framework: str = ""
    finished_at_ns: int = 0
    updated_at_ns: int = 0  # 0: the heartbeat time (what makes the newest row win)

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ValueError(f"run_id must be a non-empty string, got {self.run_id!r}")
        if self.status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {RUN_STATUSES}, got {self.status!r}")
        object.__setattr__(self, "pin_names", tuple(str(p) for p in self.pin_names))
        object.__setattr__(self, "content_hashes", tuple(str(h) for h in self.content_hashes))
        if len(self.pin_names) != len(self.content_hashes):
            raise ValueError(
                f"one content hash per pin name, got {len(self.pin_names)} names and "
                f"{len(self.content_hashes)} hashes"
            )
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"{f.name} must be an int, got {type(value).__name__}")
            if f.type == "str" and not isinstance(value, str):
                raise TypeError(f"{f.name} must be a str, got {type(value).__name__}")
            for text in (value,) if f.type == "str" else value if f.type == "tuple[str, ...]" else ():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError as err:
                    raise ValueError(f"{f.name} is not valid unicode ({err.reason} at {err.start})") from err
        if not self.updated_at_ns:
            object.__setattr__(self, "updated_at_ns", max(self.heartbeat_at_ns, self.finished_at_ns))

    def is_live(self, now_ns: int, window_s: float = LIVE_WINDOW_S) -> bool:
        """Running, with a heartbeat within `window_s` of `now_ns`."""
        return self.status == "running" and now_ns - self.heartbeat_at_ns <= window_s * 1e9

    def pin_list(self) -> list[dict[str, Any]]:
        """The `pins` JSON as a list of dicts (empty when it is not valid JSON)."""
        try:
            value = json.loads(self.pins)
        except ValueError:
            return []
        return value if isinstance(value, list) else []


_ARROW_TYPES: dict[str, pa.DataType] = {
    "int": pa.int64(),
    "str": pa.string(),
    "tuple[str, ...]": pa.list_(pa.string()),
}


def _arrow_schema() -> pa.Schema:
    return pa.schema([pa.field(f.name, _ARROW_TYPES[str(f.type)]) for f in fields(TrainingRun)])


def _ensure(catalog: Catalog, session: _Session) -> None:
    for ddl in (RUNS_DDL, RUN_READS_DDL):
        if ddl not in session.ensured:
            catalog._command(session.client, ddl)
            session.ensured.add(ddl)


def record_training_run(catalog: Catalog, run: TrainingRun) -> None:
    """Insert `run`'s current state (the newest `updated_at_ns` per run id is what reads see).

    Raises:
        CatalogQueryError: ClickHouse refused the table or the insert.

    Example:
        >>> record_training_run(Catalog("/data/catalog"), run)
    """
    record = {f.name: getattr(run, f.name) for f in fields(TrainingRun)}
    record["pin_names"] = list(run.pin_names)
    record["content_hashes"] = list(run.content_hashes)
    _insert(catalog, RUNS_TABLE, pa.Table.from_pylist([record], schema=_arrow_schema()), run.run_id)


def record_run_reads(
    catalog: Catalog, run_id: str, episode_ids: Sequence[str], attempt_ids: Sequence[str], *, at_ns: int
) -> None:
    """Record the (episode_id, attempt_id) pairs run `run_id` reads (once per run start).

    Example:
        >>> record_run_reads(catalog, "r1", snap.episode_ids, snap.attempt_ids, at_ns=time.time_ns())
    """
    if len(episode_ids) != len(attempt_ids):
        raise ValueError(f"{len(episode_ids)} episode ids but {len(attempt_ids)} attempt ids")
    row = pa.table(
        {
            "run_id": pa.array([run_id], pa.string()),
            "episode_ids": pa.array([list(map(str, episode_ids))], pa.list_(pa.string())),
            "attempt_ids": pa.array([list(map(str, attempt_ids))], pa.list_(pa.string())),
            "updated_at_ns": pa.array([int(at_ns)], pa.int64()),
        }
    )
    _insert(catalog, RUN_READS_TABLE, row, run_id)


def _insert(catalog: Catalog, table: str, row: pa.Table, run_id: str) -> None:
    """Insert `row` into `table` (made first where missing); ClickHouse's refusal becomes a
    CatalogQueryError naming the table and the run."""
    with catalog._session() as session:
        _ensure(catalog, session)
        try:
            session.client.insert_arrow(table, row)
        except Exception as err:
            raise CatalogQueryError(str(err), f"INSERT INTO {table} (run {run_id!r})") from err


def _query(catalog: Catalog, sql: str, parameters: dict[str, Any]) -> pa.Table:
    with catalog._session() as session:
        _ensure(catalog, session)
        try:
            table: pa.Table = session.client.query_arrow(sql, parameters=parameters)
        except Exception as err:
            raise CatalogQueryError(str(err), sql) from err
    return table


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def training_runs(
    catalog: Catalog, *, pin: str | None = None, run_id: str | None = None
) -> list[TrainingRun]:
    """The recorded runs, newest start first; only those reading pin `pin` or with id `run_id`
    when given.

    Example:
        >>> [r.status for r in training_runs(Catalog("/data/catalog"), pin="pick-v3")]
        ['finished']
    """
    where, parameters = [], {}
    if pin is not None:
        where.append("has(pin_names, {pin:String})")
        parameters["pin"] = pin
    if run_id is not None:
        where.append("run_id = {run_id:String}")
        parameters["run_id"] = run_id
    sql = f"SELECT * FROM {RUNS_TABLE} FINAL"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY started_at_ns DESC, run_id"
    table = _query(catalog, sql, parameters)
    names = {f.name for f in fields(TrainingRun)}
    runs = []
    for row in table.to_pylist():
        values: dict[str, Any] = {k: v for k, v in row.items() if k in names}
        for key, value in values.items():
            if isinstance(value, list):
                values[key] = tuple(_text(v) for v in value)
            elif isinstance(value, bytes):
                values[key] = value.decode()
        runs.append(TrainingRun(**values))
    return runs


@dataclass(frozen=True, slots=True)
class LiveRunReads:
    """What a live run reads: GC keeps these rows, and the files they may be read from."""

    run_id: str
    started_at_ns: int
    heartbeat_at_ns: int
    pin_names: tuple[str, ...]
    episode_ids: tuple[str, ...] = field(default=())
    attempt_ids: tuple[str, ...] = field(default=())


def live_run_reads(catalog: Catalog, now_ns: int, window_s: float = LIVE_WINDOW_S) -> list[LiveRunReads]:
    """The runs that are running with a heartbeat within `window_s`, and the pairs each reads.

    Example:
        >>> [r.run_id for r in live_run_reads(Catalog("/data/catalog"), time.time_ns())]
        ['r1']
    """
    if not window_s >= 0:
        raise ValueError(f"window_s must be >= 0, got {window_s}")
    sql = (
        f"SELECT r.run_id AS run_id, r.started_at_ns AS started_at_ns, r.heartbeat_at_ns AS heartbeat_at_ns, "
        f"r.pin_names AS pin_names, x.episode_ids AS episode_ids, x.attempt_ids AS attempt_ids "
        f"FROM (SELECT * FROM {RUNS_TABLE} FINAL WHERE status = 'running' "
        "AND heartbeat_at_ns >= {since:Int64}) AS r "
        f"LEFT JOIN (SELECT * FROM {RUN_READS_TABLE} FINAL) AS x ON r.run_id = x.run_id ORDER BY run_id"
    )
    table = _query(catalog, sql, {"since": int(now_ns - window_s * 1e9)})
    return [
        LiveRunReads(
            run_id=_text(row["run_id"]),
            started_at_ns=int(row["started_at_ns"]),
            heartbeat_at_ns=int(row["heartbeat_at_ns"]),
            pin_names=tuple(_text(p) for p in row["pin_names"] or ()),
            episode_ids=tuple(_text(e) for e in row["episode_ids"] or ()),
            attempt_ids=tuple(_text(a) for a in row["attempt_ids"] or ()),
        )
        for row in table.to_pylist()
    ]
