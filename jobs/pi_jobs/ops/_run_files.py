"""A run's out dir as a record: `lineage.json` (pi_train) and `run.json` (`RunRecorder`) read
into a catalog row (`run_row`, `read_run_dir`), and the pairs its pinned selection reads.

Example:
    >>> read_run_dir("runs/exp1").status
    'finished'
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pi_catalog import TrainingRun

from pi_jobs.errors import PiJobsError

RUN_FILE = "run.json"
RUN_FORMAT = "pilake.run/1"


class RunRecordError(PiJobsError):
    """An out dir whose run files cannot be read (`pilake runs --rebuild`).

    Example:
        >>> raise RunRecordError("runs/exp1/lineage.json is not a readable lineage record ...")
    """


def read_pairs(out: Path) -> tuple[list[str], list[str]] | None:
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
    split = out / "eval_split.json"  # a held-out pin (--eval-dataset) is read beside the snapshot
    if split.exists():
        held = json.loads(split.read_text())
        ids, attempts = held.get("held_out") or [], held.get("held_out_attempts")
        if attempts is not None:  # a split recorded before the attempts were: its ids alone say too little
            pairs |= {(str(e), str(a)) for e, a in zip(ids, attempts, strict=True)}
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
