"""Writes a run's catalog rows for `RunRecorder` (pi_jobs.ops.runs) without chdb in the trainer.

On a ClickHouse server the rows go over HTTP from the recording process. On an embedded chdb
catalog they go from a short-lived child process (`python -m pi_jobs.ops._run_writer`, the
rows as JSON on stdin): a process keeps the chdb engine open after its first call and reopens
it after every handover to another process (a stream job writing the same catalog), and chdb
leaks ~5 pool threads with their descriptors per reopen (pi_catalog._engine), which a heartbeat
every 30 s for days would turn into EMFILE in the training process. The child costs ~1 s of
CPU per heartbeat and holds the catalog only while it writes.

Example:
    >>> write_run("/data/catalog", run, reads=None)
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any

from pi_catalog import Catalog, TrainingRun, record_run_reads, record_training_run

# The child waits for the catalog's lock (Catalog's lock_timeout_s, 60 s) and starts Python.
_CHILD_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True, slots=True)
class RunReads:
    """The (episode_id, attempt_id) pairs a run reads, recorded at `at_ns`."""

    episode_ids: list[str]
    attempt_ids: list[str]
    at_ns: int


def _write_here(catalog: str, run: TrainingRun, reads: RunReads | None) -> None:
    cat = Catalog(catalog)
    record_training_run(cat, run)
    if reads is not None:
        record_run_reads(cat, run.run_id, reads.episode_ids, reads.attempt_ids, at_ns=reads.at_ns)


def write_run(catalog: str, run: TrainingRun, reads: RunReads | None) -> None:
    """Record `run` (and the pairs it reads, when given) in `catalog`; see the module docstring.

    Raises:
        pi_catalog.PiCatalogError / OSError / RuntimeError: the rows were not recorded.
    """
    if not Catalog(catalog).is_embedded:
        _write_here(catalog, run, reads)
        return
    payload = {
        "catalog": catalog,
        "run": dataclasses.asdict(run),
        "reads": None if reads is None else dataclasses.asdict(reads),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pi_jobs.ops._run_writer"],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=_CHILD_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the catalog writer exited {done.returncode}: {done.stderr.strip()[-800:]}")


def _main() -> int:
    payload: dict[str, Any] = json.loads(sys.stdin.read())
    fields = payload["run"]
    for key in ("pin_names", "content_hashes"):
        fields[key] = tuple(fields[key])
    reads = payload["reads"]
    _write_here(payload["catalog"], TrainingRun(**fields), None if reads is None else RunReads(**reads))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
