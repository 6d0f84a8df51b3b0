"""The Python side of the backfill job: the keyed function that runs inside the Flink worker.

(episode_id, source attempt_id) -> **BackfillFunction**: read the attempt's raw rows from the
source lake's `raw` table (a pyarrow filter on episode_id and attempt_id), assemble them with
pi_format.wire as the stream job did, featurize with the named config (`_rebuild`, shared with
`pilake repair`), mark the row with the
featurizer's "<name>@<version>", and commit groups through `LakeWriter.commit_episodes(...,
supersede=True)` (exactly once: an episode whose visible attempt already carries the featurizer
is a duplicate, nothing of it becomes visible), then record the group in the catalog. A failed
episode is counted and named in the progress file, and the job goes on.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyflink.datastream import KeyedProcessFunction, RuntimeContext

from pi_jobs.backfill._raw_files import FILES_SEP
from pi_jobs.backfill._rebuild import read_raw_rows, rebuild_episode
from pi_jobs.backfill.config import BackfillSettings
from pi_jobs.stream._progress import load_progress, subtask_progress_file, write_progress

log = logging.getLogger("pi_jobs.backfill")

# Fault injection (tests only): each worker sleeps this long per episode, so a test can kill
# the run between two group commits.
DELAY_ENV = "PILAKE_FAULT_BACKFILL_DELAY_S"
# Fault injection (tests only): the catalog record of the last group commit (in close()) fails.
CATALOG_FAILS_AT_CLOSE_ENV = "PILAKE_FAULT_BACKFILL_CATALOG_FAILS_AT_CLOSE"
# failures named in the progress file (all are counted)
_MAX_FAILURES_LISTED = 100


def episode_of(row: Any) -> str:
    """The key_by key of a work item (episode_id, attempt_id)."""
    return str(row[0])


class BackfillFunction(KeyedProcessFunction):
    """Keyed by episode_id: rebuild from raw, featurize, commit in groups, record."""

    def __init__(self, settings: BackfillSettings) -> None:
        self.settings = settings

    def open(self, runtime_context: RuntimeContext) -> None:
        from deltalake import DeltaTable
        from pi_format import LakeLayout
        from pi_format.lake import LakeWriter

        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        self.subtask = int(runtime_context.get_index_of_this_subtask())
        self.writer = LakeWriter(
            LakeLayout(self.settings.target_root), writer_id=f"{self.settings.writer_prefix}-{self.subtask}"
        )
        # one snapshot of raw for the run: a backfill reads what was committed before it started
        self.raw = DeltaTable(LakeLayout(self.settings.source_root).raw).to_pyarrow_dataset()
        self.catalog: Any = None
        self.waiting: list[Any] = []  # EpisodeRows featurized, waiting for the group commit
        self.waiting_since = 0.0
        self._progress_file = subtask_progress_file(self.settings.progress_path, self.subtask)
        self.progress = load_progress(self._progress_file)  # a Flink restart keeps counting
        for name in ("episodes", "committed", "duplicates", "failed", "bytes"):
            self.progress.setdefault(name, 0)
        self.progress.setdefault("failures", [])
        self.delay_s = float(os.environ.get(DELAY_ENV, "0") or 0)

    def close(self) -> None:
        # the end of the (bounded) input: commit what is left
        if getattr(self, "waiting", None):
            self._flush(closing=True)
            self._write_progress()

    def _write_progress(self) -> None:
        write_progress(self._progress_file, self.progress, incomplete=0, buffered=len(self.waiting))

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        episode_id, attempt_id = str(value[0]), str(value[1])
        files = tuple(f for f in str(value[2]).split(FILES_SEP) if f) if len(value) > 2 else ()
        if self.delay_s:
            time.sleep(self.delay_s)
        self.progress["episodes"] += 1
        try:
            self.waiting.append(self._rebuild(episode_id, attempt_id, files))
            if len(self.waiting) == 1:
                self.waiting_since = time.monotonic()
        except Exception as err:  # decode/featurize: counted, named, and the job goes on
            self.progress["failed"] += 1
            failures: list[str] = self.progress["failures"]
            if len(failures) < _MAX_FAILURES_LISTED:
                failures.append(f"{episode_id}: {type(err).__name__}: {err}"[:500])
            log.warning("backfill: episode %s (raw attempt %s) failed: %s", episode_id, attempt_id, err)
        full = len(self.waiting) >= self.settings.group_commit_episodes
        if self.waiting and (
            full or time.monotonic() - self.waiting_since >= self.settings.group_commit_delay_s
        ):
            self._flush()
        self._write_progress()
        return iter(())

    def _raw_rows(self, episode_id: str, files: tuple[str, ...]) -> pa.Table:
        """Every raw row of the episode (the caller picks the attempt), read from `files` (the
        raw files the plan found holding it, page CRCs checked); without them, filtered from the
        whole table."""
        rows = read_raw_rows(self.settings.source_root, episode_id, files, self.raw)
        self.progress["bytes"] += int(pc.sum(pc.binary_length(rows.column("message"))).as_py() or 0)
        return rows

    def _rebuild(self, episode_id: str, attempt_id: str, files: tuple[str, ...] = ()) -> Any:
        return rebuild_episode(
            episode_id,
            attempt_id,
            self._raw_rows(episode_id, files),
            featurize_config=self.settings.featurize,
            featurizer_tag=self.settings.featurizer_tag,
        )

    def _flush(self, *, closing: bool = False) -> None:
        group, self.waiting = self.waiting, []
        result = self.writer.commit_episodes(group, supersede=True)
        if result.committed and self.settings.catalog_path is not None:
            if closing and os.environ.get(CATALOG_FAILS_AT_CLOSE_ENV):
                raise RuntimeError("fault injection: the catalog record of the last group commit failed")
            if self.catalog is None:
                from pi_catalog import Catalog

                self.catalog = Catalog(self.settings.catalog_path)
            # the newer Delta version replaces the superseded attempt's index row
            self.catalog.record_episodes(result.episodes, episodes_version=result.version)
        self.progress["committed"] += len(result.committed)
        self.progress["duplicates"] += len(result.duplicates)
        log.info(
            "backfill: committed %d (%d duplicate) at episodes version %d",
            len(result.committed),
            len(result.duplicates),
            result.version,
        )


def read_run_progress(progress_path: Path) -> dict[str, Any]:
    """Every subtask's progress of one run, added up (counts summed, failures joined)."""
    import json

    from pi_jobs.stream._progress import progress_files

    total: dict[str, Any] = {
        "episodes": 0,
        "committed": 0,
        "duplicates": 0,
        "failed": 0,
        "bytes": 0,
        "buffered": 0,  # featurized, waiting for a group commit (the last one is in close())
    }
    failures: list[str] = []
    starts: list[int] = []
    last = 0
    for path in progress_files(progress_path):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for name in total:
            total[name] += int(doc.get(name, 0))
        failures += [str(f) for f in doc.get("failures", [])]
        if doc.get("first_activity_ns"):
            starts.append(int(doc["first_activity_ns"]))
        last = max(last, int(doc.get("last_activity_ns", 0)))
    total["failures"] = failures
    total["first_activity_ns"] = min(starts) if starts else 0
    total["last_activity_ns"] = last
    return total
