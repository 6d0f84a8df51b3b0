"""Training runs in the catalog: `pilake train` registers, heartbeats and ends its run here.

The trainer (pi_train) never imports the catalog: rank 0 writes `<out>/lineage.json` (run id,
pins with content hashes and snapshot versions, mixture, code version) and the pinned
selection (`snapshot.json` / `mixture.json`); the process that runs `pilake train` (the one rank,
or the launcher of several) holds a `RunRecorder` that copies that into the catalog's
`training_runs` at start, every `HEARTBEAT_S` and at the end with the final status, and the
(episode_id, attempt_id) pairs the run reads into `training_run_reads`. It writes the same
state to `<out>/run.json`, so the out dir stays the source of truth: `rebuild_runs` (`pilake runs
--rebuild OUT...`) records runs again from their out dirs into a new or rebuilt catalog.

Lineage rows are derived data: a catalog that is down, locked or refusing costs a warning (once
per failure streak), never the run.

Example:
    >>> with RunRecorder(RecorderOptions(catalog="/data/catalog", out_dir="runs/exp1", run_id="exp1")) as rec:
    ...     result = train(config)
    ...     rec.finish("finished")
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_catalog import Catalog, TrainingRun, record_run_reads, record_training_run

from pi_jobs.ops._run_files import RUN_FILE, RUN_FORMAT, RunRecordError, read_pairs, read_run_dir, run_row
from pi_jobs.ops._run_writer import RunReads, write_run

__all__ = [
    "HEARTBEAT_S",
    "RUN_FILE",
    "RecorderOptions",
    "RunRecordError",
    "RunRecorder",
    "final_status",
    "new_run_id",
    "read_run_dir",
    "rebuild_runs",
    "record_run",
    "recorded_run_id",
    "run_row",
]

log = logging.getLogger(__name__)

# Between heartbeats of a running run. pi_catalog.LIVE_WINDOW_S (600 s) is twenty of them: a
# catalog that is busy for minutes (a rebuild, a handover) does not make a live run look dead.
HEARTBEAT_S = 30.0


def new_run_id(out_dir: str) -> str:
    """A fresh run id: the out dir's name, the UTC start time and 8 random hex digits.

    Example:
        >>> new_run_id(".pilake/runs/train-torch")
        'train-torch-20261127T130501Z-1a2b3c4d'
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{Path(out_dir).name or 'run'}-{stamp}-{uuid.uuid4().hex[:8]}"


def recorded_run_id(out_dir: str) -> str | None:
    """The run id recorded in `<out_dir>/lineage.json`, or None when there is none yet."""
    from pi_train import read_lineage

    path = Path(out_dir) / "lineage.json"
    if not path.exists():
        return None
    return str(read_lineage(path)["run_id"])


@dataclass(frozen=True, slots=True)
class RecorderOptions:
    """What a `RunRecorder` records and where.

    Example:
        >>> RecorderOptions(catalog="/data/catalog", out_dir="runs/exp1", run_id="exp1", world_size=2)
    """

    catalog: str | None  # None: the out dir only (no catalog configured)
    out_dir: str
    run_id: str
    world_size: int = 1
    host_count: int = 1
    framework: str = ""
    # HEARTBEAT_S by default; tests shorten it
    heartbeat_s: float = HEARTBEAT_S

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ValueError(f"run_id must be a non-empty string, got {self.run_id!r}")
        if not self.heartbeat_s > 0:
            raise ValueError(f"heartbeat_s must be > 0 seconds, got {self.heartbeat_s}")
        for name in ("world_size", "host_count"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")


class RunRecorder:
    """Registers a run in the catalog, heartbeats it from a thread and records how it ended.

    Use as a context manager around the run and call `finish(status)` with "finished",
    "preempted" or "failed"; leaving the block without `finish` (an exception) records "failed".
    Never raises for the catalog: every failure is a logged warning (lineage is derived data).

    Example:
        >>> with RunRecorder(RecorderOptions(catalog=cat, out_dir=out, run_id=run_id)) as rec:
        ...     rec.finish("finished" if train(config).stopped is None else "preempted")
    """

    def __init__(self, options: RecorderOptions, *, clock: Any = time.time_ns) -> None:
        self.options = options
        self._clock = clock
        self._out = Path(options.out_dir)
        self._catalog = options.catalog
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state: dict[str, Any] = {}
        self._reads_recorded_for: int | None = None  # the lineage's opened_at_ns last recorded
        self._failing = False
        self.warnings: list[str] = []

    def __enter__(self) -> RunRecorder:
        self.start()
        return self

    def __exit__(self, kind: object, error: object, tb: object) -> None:
        if self._state.get("status") == "running":
            self.finish("failed")

    def start(self) -> None:
        now = self._clock()
        self._state = {
            "format": RUN_FORMAT,
            "run_id": self.options.run_id,
            "status": "running",
            "started_at_ns": now,
            "heartbeat_at_ns": now,
            "finished_at_ns": 0,
            "out_dir": str(self._out.resolve()),
            "world_size": self.options.world_size,
            "host_count": self.options.host_count,
            "framework": self.options.framework,
        }
        self.beat()
        self._thread = threading.Thread(target=self._loop, name="pilake-run-heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.options.heartbeat_s):
            self.beat()

    def beat(self) -> None:
        """Record the run as running now (the heartbeat; also what `start` does first)."""
        with self._lock:
            if self._state.get("status") != "running":
                return
            self._state["heartbeat_at_ns"] = self._clock()
            self._record()

    def finish(self, status: str) -> None:
        """Stop the heartbeat and record the end: "finished", "preempted" or "failed"."""
        if status not in ("finished", "preempted", "failed"):
            raise ValueError(f"a run ends finished, preempted or failed, got {status!r}")
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=60)
        with self._lock:
            now = self._clock()
            self._state.update(status=status, heartbeat_at_ns=now, finished_at_ns=now)
            self._record()

    def _lineage(self) -> dict[str, Any] | None:
        from pi_train import LineageError, read_lineage

        path = self._out / "lineage.json"
        try:
            record = read_lineage(path)
        except FileNotFoundError:
            return None  # the trainer has not opened its data yet
        except LineageError as err:
            self._warn(str(err))
            return None
        if record.get("run_id") != self.options.run_id:
            # lineage.json of a run resumed from another id wins: it is what the checkpoints say
            self._state["run_id"] = record["run_id"]
        return record

    def _record(self) -> None:
        lineage = self._lineage()
        self._write_state()
        if self._catalog is None:
            return
        try:
            opened = int(lineage.get("opened_at_ns") or 0) if lineage else None
            pairs = read_pairs(self._out) if opened and opened != self._reads_recorded_for else None
            reads = None if pairs is None else RunReads(pairs[0], pairs[1], at_ns=self._clock())
            write_run(self._catalog, run_row(lineage, self._state), reads)
            if reads is not None:
                self._reads_recorded_for = opened
            if self._failing:
                log.warning("pilake train: run lineage recorded in the catalog again")
            self._failing = False
        except Exception as err:
            if not self._failing:
                self._warn(
                    f"could not record run {self._state['run_id']!r} in the catalog {self.options.catalog} "
                    f"({type(err).__name__}: {str(err)[:500]}); training goes on, and `pilake runs --rebuild "
                    f"{self._out}` records it later from its out dir"
                )
            self._failing = True

    def _write_state(self) -> None:
        path = self._out / RUN_FILE
        try:
            self._out.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{RUN_FILE}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self._state, indent=1, sort_keys=True))
            os.replace(tmp, path)
        except OSError as err:
            self._warn(f"could not write {path}: {err}")

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        log.warning("pilake train: %s", message)


def rebuild_runs(catalog: Catalog, out_dirs: list[str]) -> list[TrainingRun]:
    """Record the runs of `out_dirs` in `catalog` again (with the pairs each reads).

    Raises:
        RunRecordError: an out dir whose run files cannot be read (none is recorded then).

    Example:
        >>> [r.run_id for r in rebuild_runs(Catalog("/data/catalog"), ["runs/exp1"])]
        ['exp1-20261127T130501Z-1a2b3c4d']
    """
    runs = [read_run_dir(d) for d in out_dirs]
    reads = []
    for out_dir in out_dirs:
        try:
            reads.append(read_pairs(Path(out_dir)))
        except (ValueError, KeyError, TypeError) as err:
            raise RunRecordError(
                f"{out_dir}: its snapshot.json / mixture.json cannot be read ({type(err).__name__}: {err})"
            ) from err
    for run, pairs in zip(runs, reads, strict=True):
        record_training_run(catalog, run)
        if pairs is not None:
            record_run_reads(catalog, run.run_id, *pairs, at_ns=run.updated_at_ns)
    return runs


def final_status(out_dir: str, exit_code: int) -> str:
    """How a `pilake train` that exited `exit_code` ended: "failed" unless 0; then "preempted"
    when this attempt's summary.json records a stop (SIGTERM, deadline), else "finished"."""
    if exit_code != 0:
        return "failed"
    summary = Path(out_dir) / "summary.json"
    try:
        stopped = json.loads(summary.read_text()).get("stopped")
    except (OSError, ValueError, AttributeError):
        stopped = None
    return "preempted" if stopped else "finished"


def record_run(
    config: Any,
    run: Callable[[], int],
    *,
    world_size: int = 1,
    host_count: int = 1,
    heartbeat_s: float = HEARTBEAT_S,
) -> int:
    """Run `run()` (a `pilake train` on this host, returning its exit code) as a recorded run of
    the pi_train `config`: a run id (the recorded one when resuming, else a new one, passed to
    the trainer as $PILAKE_RUN_ID), a `RunRecorder` on `config.catalog`, the final status.

    Example:
        >>> record_run(config, lambda: int(launch(config, 2)), world_size=2)
        0
    """
    from pi_train import RUN_ID_ENV, LineageError

    out_dir = str(config.out_dir)
    run_id = None
    if config.resume:
        try:
            run_id = recorded_run_id(out_dir)
        except LineageError as err:
            log.warning("pilake train: %s; the run gets a new run id", err)
    run_id = run_id or new_run_id(out_dir)
    os.environ[RUN_ID_ENV] = run_id  # this process's train(), and the ranks launch() starts
    options = RecorderOptions(
        catalog=config.catalog,
        out_dir=out_dir,
        run_id=run_id,
        world_size=world_size,
        host_count=host_count,
        framework=str(config.framework),
        heartbeat_s=heartbeat_s,
    )
    with RunRecorder(options) as recorder:
        code = run()
        recorder.finish(final_status(out_dir, code))
    return code
