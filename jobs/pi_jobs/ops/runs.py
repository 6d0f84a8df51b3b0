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

from pi_jobs.errors import PiJobsError

log = logging.getLogger(__name__)

# Between heartbeats of a running run. pi_catalog.LIVE_WINDOW_S (600 s) is twenty of them: a
# catalog that is busy for minutes (a rebuild, a handover) does not make a live run look dead.
HEARTBEAT_S = 30.0
RUN_FILE = "run.json"
RUN_FORMAT = "pilake.run/1"


class RunRecordError(PiJobsError):
    """An out dir whose run files cannot be read (`pilake runs --rebuild`).

    Example:
        >>> raise RunRecordError("runs/exp1/lineage.json is not a readable lineage record ...")
    """


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


def _pairs(out: Path) -> tuple[list[str], list[str]] | None:
    """Every (episode_id, attempt_id) the run in `out` reads, from its pinned selection."""
    snapshots: list[dict[str, Any]] = []
    if (out / "mixture.json").exists():
        snapshots = [s["snapshot"] for s in json.loads((out / "mixture.json").read_text())["sources"]]
    elif (out / "snapshot.json").exists():
        snapshots = [json.loads((out / "snapshot.json").read_text())]
    else:
        return None
    pairs = {
        (str(e), str(a)) for s in snapshots for e, a in zip(s["episode_ids"], s["attempt_ids"], strict=True)
    }
    ordered = sorted(pairs)
    return [e for e, _ in ordered], [a for _, a in ordered]


def run_row(
    lineage: dict[str, Any] | None,
    state: dict[str, Any],
) -> TrainingRun:
    """The catalog row of a run from its lineage record (None before the trainer wrote it) and
    its `run.json` state ({run_id, status, started_at_ns, heartbeat_at_ns, finished_at_ns, ...})."""
    pins = (lineage or {}).get("pins") or []
    code = (lineage or {}).get("code") or {}
    first_versions = pins[0].get("table_versions") if pins else {}
    return TrainingRun(
        run_id=str(state["run_id"]),
        status=str(state["status"]),
        started_at_ns=int((lineage or {}).get("started_at_ns") or state["started_at_ns"]),
        heartbeat_at_ns=int(state["heartbeat_at_ns"]),
        finished_at_ns=int(state.get("finished_at_ns") or 0),
        out_dir=str((lineage or {}).get("out_dir") or state.get("out_dir") or ""),
        pin_names=tuple(str(p.get("name") or "") for p in pins),
        content_hashes=tuple(str(p.get("content_hash") or "") for p in pins),
        pins=json.dumps(pins, sort_keys=True),
        table_versions=json.dumps(first_versions or {}, sort_keys=True),
        code_version=str(code.get("package") or "unknown"),
        git_commit=str(code.get("git_commit") or "unknown"),
        host_count=int((lineage or {}).get("host_count") or state.get("host_count") or 1),
        world_size=int((lineage or {}).get("world_size") or state.get("world_size") or 1),
        framework=str((lineage or {}).get("framework") or state.get("framework") or ""),
    )


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
        self._catalog = Catalog(options.catalog) if options.catalog else None
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
            record_training_run(self._catalog, run_row(lineage, self._state))
            opened = int(lineage.get("opened_at_ns") or 0) if lineage else None
            if opened and opened != self._reads_recorded_for:
                pairs = _pairs(self._out)
                if pairs is not None:
                    record_run_reads(self._catalog, self._state["run_id"], *pairs, at_ns=self._clock())
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


def read_run_dir(out_dir: str) -> TrainingRun:
    """The run recorded in `out_dir` (its lineage.json, and run.json when a recorder wrote one).

    Without run.json (a run started by torchrun, not `pilake train`) the status is told from the
    out dir: summary.json says finished (or preempted, when it records a stop); otherwise the
    run is "failed" unless lineage.json changed within the live window (then "running").

    Raises:
        RunRecordError: no lineage.json, or one that cannot be read (the message says which).

    Example:
        >>> read_run_dir("runs/exp1").pin_names
        ('pick-v3',)
    """
    from pi_catalog import LIVE_WINDOW_S
    from pi_train import LineageError, read_lineage

    out = Path(out_dir)
    path = out / "lineage.json"
    try:
        lineage = read_lineage(path)
    except FileNotFoundError as err:
        raise RunRecordError(
            f"{out} holds no lineage.json: it is no pi_train out dir (or one too old)"
        ) from err
    except LineageError as err:
        raise RunRecordError(str(err)) from err
    state: dict[str, Any] | None = None
    if (out / RUN_FILE).exists():
        try:
            state = json.loads((out / RUN_FILE).read_text())
            if not isinstance(state, dict) or state.get("format") != RUN_FORMAT:
                raise ValueError(f"not a {RUN_FORMAT} record")
            state["run_id"] = lineage["run_id"]
            run_row(lineage, state)  # validates the status and the numbers
        except (ValueError, TypeError, KeyError) as err:
            detail = f"missing {err}" if isinstance(err, KeyError) else str(err)
            raise RunRecordError(
                f"{out / RUN_FILE} is not a readable run record ({detail}); move it away"
            ) from err
    if state is None:
        changed = int(path.stat().st_mtime_ns)
        status, finished = "failed", changed
        if (out / "summary.json").exists():
            summary = json.loads((out / "summary.json").read_text())
            status = "preempted" if summary.get("stopped") else "finished"
            finished = int((out / "summary.json").stat().st_mtime_ns)
        elif time.time_ns() - changed <= LIVE_WINDOW_S * 1e9:
            status, finished = "running", 0
        state = {
            "run_id": lineage["run_id"],
            "status": status,
            "started_at_ns": lineage.get("started_at_ns") or changed,
            "heartbeat_at_ns": finished or changed,
            "finished_at_ns": finished,
        }
    return run_row(lineage, state)


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
            reads.append(_pairs(Path(out_dir)))
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
