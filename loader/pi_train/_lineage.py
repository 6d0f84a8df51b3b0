"""Lineage of a run: which pins it reads, with which code, under which run id.

Rank 0 writes `<out>/lineage.json` when the run has opened its data (and again on every
resume, keeping the run id and the first start time); every checkpoint carries the same record
in its extra under "lineage", beside the loader state of every rank, so a checkpoint copied
anywhere still says what it was trained on:

    {"format": "pi_train.lineage/1", "run_id": ..., "out_dir": ..., "started_at_ns": ...,
     "opened_at_ns": ..., "framework": ..., "world_size": ..., "host_count": ...,
     "pins": [{"name", "content_hash", "fingerprint", "table_versions", "episodes", "sql", "weight"}],
     "mixture": null | {"names", "weights", "fingerprint"},
     "code": {"package": "0.1.0" | "unknown", "git_commit": "<sha>" | "unknown"}}

A pin's `content_hash` is the lake pin's (`pilake dataset create`) when the run names one and
reads exactly its rows; a selection by SQL, or a snapshot stored in the catalog, has none (its
`fingerprint`, over versions and episode/attempt pairs, still identifies the data). The run id
is the one in `<out>/lineage.json` when resuming, else `$PILAKE_RUN_ID` (what `pilake train`
sets), else derived from the out dir, so every rank computes the same one without talking.
The catalog's runs table (pi_catalog `training_runs`) is filled from this file by `pilake
train` (pi_jobs.ops.runs): the trainer itself never imports the catalog.

Example:
    >>> read_lineage(Path("runs/exp1/lineage.json"))["pins"][0]["name"]
    'pick-v3'
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import time
from functools import cache
from pathlib import Path
from typing import Any

from pi_train._config import ProcessGroup, TrainConfig
from pi_train._errors import PiTrainError
from pi_train._files import atomic_write

LINEAGE_FORMAT = "pi_train.lineage/1"
LINEAGE_FILE = "lineage.json"
RUN_ID_ENV = "PILAKE_RUN_ID"
_MAX_LINEAGE_BYTES = 64 * 1024 * 1024  # pins name episodes, not their data: 64 MB is a broken file


class LineageError(PiTrainError):
    """A lineage file that cannot be read (not JSON, not a pi_train lineage record).

    Example:
        >>> raise LineageError("runs/exp1/lineage.json is not JSON (line 1 column 1): ...")
    """


@cache
def code_version() -> dict[str, str]:
    """The installed pi-lake package version and the git commit of its source tree (each
    "unknown" where it cannot be told: not installed, no git, not a checkout).

    Example:
        >>> code_version()
        {'package': '0.1.0', 'git_commit': '84a7c16...'}
    """
    try:
        package = importlib.metadata.version("pi-lake")
    except importlib.metadata.PackageNotFoundError:
        package = "unknown"
    commit = "unknown"
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        text = done.stdout.strip()
        if done.returncode == 0 and len(text) == 40 and all(c in "0123456789abcdef" for c in text):
            commit = text
    except (OSError, subprocess.SubprocessError):
        pass
    return {"package": package, "git_commit": commit}


def read_lineage(path: Path) -> dict[str, Any]:
    """The lineage record at `path`, or LineageError saying what is wrong with the file.

    Example:
        >>> read_lineage(Path("runs/exp1/lineage.json"))["run_id"]
        'train-torch-3f9a2c1b7d4e'
    """
    try:
        size = path.stat().st_size
        if size > _MAX_LINEAGE_BYTES:
            raise LineageError(f"{path} is {size} bytes, more than a lineage record can be; it is not one")
        text = path.read_bytes().decode("utf-8")
        record = json.loads(text)
    except FileNotFoundError:
        raise
    except (UnicodeDecodeError, ValueError) as err:
        if isinstance(err, LineageError):
            raise
        raise LineageError(
            f"{path} is not a readable lineage record ({type(err).__name__}: {err}); the checkpoints' "
            f"extra holds the same record under 'lineage': restore it from there, or move the file "
            "away to start a new record"
        ) from err
    if not isinstance(record, dict) or record.get("format") != LINEAGE_FORMAT:
        got = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise LineageError(f"{path} is not a {LINEAGE_FORMAT} record (format {got!r}); move it away")
    run_id = record.get("run_id")
    if not isinstance(run_id, str) or not run_id or not isinstance(record.get("pins"), list):
        raise LineageError(f"{path} has no run_id string or pins list; move it away")
    return record


def _run_id(config: TrainConfig, out: Path, fingerprint: str) -> tuple[str, int | None]:
    """(run id, the first start time when resuming a recorded run)."""
    existing = out / LINEAGE_FILE
    if config.resume and existing.exists():
        record = read_lineage(existing)
        return record["run_id"], int(record.get("started_at_ns") or 0) or None
    from_env = os.environ.get(RUN_ID_ENV, "").strip()
    if from_env:
        return from_env, None
    digest = hashlib.sha256(f"{out.resolve()}\0{fingerprint}".encode()).hexdigest()[:12]
    return f"{out.name or 'run'}-{digest}", None


def _pin_record(config: TrainConfig, name: str | None, weight: float | None, snapshot: Any) -> dict[str, Any]:
    content_hash = None
    if name is not None:
        from pi_format import LakeLayout
        from pi_format.lake import PinStore

        try:
            pin = PinStore(LakeLayout(config.lake)).find(name)
        except Exception:  # not a lake pin name (a catalog snapshot's), or no pins table
            pin = None
        if pin is not None and pin.pairs == dict(
            zip(snapshot.episode_ids, snapshot.attempt_ids, strict=True)
        ):
            content_hash = pin.content_hash
    return {
        "name": name,
        "content_hash": content_hash,
        "fingerprint": snapshot.fingerprint,
        "table_versions": dict(snapshot.table_versions),
        "episodes": len(snapshot.episode_ids),
        "sql": snapshot.sql,
        "weight": weight,
    }


def run_lineage(config: TrainConfig, ds: Any, group: ProcessGroup) -> dict[str, Any]:
    """The lineage record of this run reading `ds` (a pi_loader Dataset or Mixture); the same
    on every rank but for `opened_at_ns`.

    Example:
        >>> run_lineage(config, ds, ProcessGroup())["pins"][0]["table_versions"]
        {'episodes': 12, 'steps': 12, 'video': 12}
    """
    out = Path(config.out_dir)
    names = getattr(ds, "names", None)
    if names is not None:  # a Mixture: one pin per source
        pins = [
            _pin_record(config, name, float(weight), source.snapshot)
            for name, weight, source in zip(names, ds.weights, ds.sources, strict=True)
        ]
        mixture: dict[str, Any] | None = {
            "names": list(names),
            "weights": [float(w) for w in ds.weights],
            "fingerprint": ds.fingerprint,
        }
    else:
        pins = [_pin_record(config, config.dataset, None, ds.snapshot)]
        mixture = None
    run_id, started = _run_id(config, out, str(ds.fingerprint))
    now = time.time_ns()
    hosts = max(1, -(-group.world_size // max(1, group.local_world_size)))
    return {
        "format": LINEAGE_FORMAT,
        "run_id": run_id,
        "out_dir": str(out.resolve()),
        "started_at_ns": started or now,
        "opened_at_ns": now,
        "framework": config.framework,
        "world_size": group.world_size,
        "host_count": hosts,
        "steps": config.steps,
        "pins": pins,
        "mixture": mixture,
        "code": code_version(),
    }


def write_lineage(out: Path, record: dict[str, Any]) -> Path:
    """Write `record` to `<out>/lineage.json` atomically (rank 0 does, at every start)."""
    text = json.dumps(record, indent=1, sort_keys=True).encode()
    path = out / LINEAGE_FILE
    atomic_write(path, lambda f: f.write(text))
    return path


def checkpoint_lineage(record: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint carries of the record (everything but the per-start time)."""
    return {k: v for k, v in record.items() if k != "opened_at_ns"}
