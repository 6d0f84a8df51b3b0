"""The backfill driver: plans which episodes to re-featurize, runs the BATCH job
(`pi_jobs.backfill.job`) on the local mini-cluster, logs progress, and records the run.

Planning (one read of the episodes table, no raw bytes): the selection is the `--where` ids of
the catalog's `episodes` view (or every visible episode), intersected with the lake's visible
episodes (deleted ones never come back); minus the episodes whose visible attempt in the target
lake already carries this featurizer ("<name>@<version>"): that is how a restarted or repeated
run skips finished work. Each remaining episode is paired with its committed stream attempt (the
latest episodes row without a featurizer), whose raw rows the worker reassembles.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pi_jobs.backfill._raw_files import FILES_SEP, raw_files_of
from pi_jobs.backfill.config import BackfillConfig, BackfillError, BackfillReport, BackfillSettings
from pi_jobs.backfill.featurizers import Featurizer, get_featurizer

log = logging.getLogger("pi_jobs.backfill")
# How long the driver waits, once the job reports FINISHED, for the workers' last progress: the
# final group commit happens in the function's close(), which PyFlink runs as the Python worker
# shuts down, after the job may already read FINISHED (seen: the run committed 4 episodes and the
# summary said 0). Normally well under a second; bounded so a worker killed in close() cannot
# hang the driver, and the lake is counted after it either way.
_SETTLE_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class BackfillPlan:
    """What a run will do: `items` = (episode_id, raw attempt_id, the raw files holding its rows
    joined by `_raw_files.FILES_SEP`) to re-featurize, sorted."""

    featurizer: Featurizer
    selected: int
    already_done: tuple[str, ...]
    items: tuple[tuple[str, str, str], ...]


def _episodes(root: str) -> pa.Table:
    """The commit columns and featurizer of every episodes row of the lake (all attempts)."""
    from deltalake import DeltaTable
    from pi_format import LakeLayout

    return DeltaTable(LakeLayout(root).episodes).to_pyarrow_table(
        columns=["episode_id", "attempt_id", "committed_at_ns", "featurizer"]
    )


def plan_backfill(config: BackfillConfig) -> BackfillPlan:
    """The episodes a run of `config` re-featurizes now (see the module doc).

    Raises:
        BackfillError: the lake cannot be read.
        CatalogQueryError: the `where` selection is not valid SQL over `episodes`.

    Example:
        >>> plan_backfill(config).items[:1]
        (('r1-000001', '5c0f...', 'part-sink-0-3f6c....parquet'),)
    """
    from pi_format import LakeLayout
    from pi_format.lake import ensure_lake_tables, latest_commits
    from pi_format.lake.visibility import read_deleted_ids

    featurizer = get_featurizer(config.featurizer)
    source = LakeLayout(config.lake_root)
    try:
        # adds the featurizer column to a lake older than it (one metadata commit)
        ensure_lake_tables(source)
        rows = _episodes(config.lake_root)
        if config.into is not None:
            ensure_lake_tables(LakeLayout(config.target_root))
    except Exception as err:  # deltalake's errors, OSError
        raise BackfillError(f"cannot read the lake at {config.lake_root}: {err}") from err
    visible = latest_commits(rows, read_deleted_ids(source))
    ids = [str(e) for e in visible.column("episode_id").to_pylist()]
    if config.where is not None:
        from pi_catalog import Catalog

        catalog = Catalog(config.catalog_path)
        wanted = set(catalog.episode_ids(f"SELECT episode_id FROM episodes WHERE {config.where}"))
        catalog.close()  # let the workers record without waiting for this process
        ids = [e for e in ids if e in wanted]
    target = visible if config.into is None else latest_commits(_episodes(config.target_root))
    done_ids = {
        str(e)
        for e, f in zip(
            target.column("episode_id").to_pylist(), target.column("featurizer").to_pylist(), strict=True
        )
        if f == featurizer.tag
    }
    stream_rows = rows.filter(pc.is_null(rows.column("featurizer")))
    stream = latest_commits(stream_rows)
    stream_attempt = dict(
        zip(stream.column("episode_id").to_pylist(), stream.column("attempt_id").to_pylist(), strict=True)
    )
    visible_attempt = dict(
        zip(visible.column("episode_id").to_pylist(), visible.column("attempt_id").to_pylist(), strict=True)
    )
    pending = [e for e in sorted(ids) if e not in done_ids]
    files = raw_files_of(source, pending)
    items = tuple(
        (e, str(stream_attempt.get(e) or visible_attempt[e]), FILES_SEP.join(files.get(e, ())))
        for e in pending
    )
    return BackfillPlan(featurizer, len(ids), tuple(sorted(e for e in ids if e in done_ids)), items)


def _record_done(config: BackfillConfig, done: tuple[str, ...]) -> None:
    """Record the done episodes' markers in the target catalog again (idempotent): a run killed
    between a commit and its catalog record, or whose last record failed, left them out."""
    from deltalake import DeltaTable
    from pi_catalog import Catalog
    from pi_format import LakeLayout
    from pi_format.lake import read_committed

    target = config.target_catalog
    if not done or target is None:
        return
    layout = LakeLayout(config.target_root)
    version = int(DeltaTable(layout.episodes).version())
    rows = read_committed(layout, version=version)
    rows = rows.filter(pc.is_in(rows.column("episode_id"), value_set=pa.array(list(done), pa.string())))
    catalog = Catalog(target)
    catalog.record_episodes(rows, episodes_version=version)
    catalog.close()


def _status(client: Any) -> str:
    try:
        return str(client.get_job_status().result()).rsplit(".", 1)[-1].upper()
    except Exception:
        # A bounded job's local mini-cluster shuts down as soon as the job ends, after which
        # the status call throws: the job's result says how it ended.
        try:
            client.get_job_execution_result().result()
        except Exception:
            return "FAILED"
        return "FINISHED"


def _failure(client: Any, config: BackfillConfig) -> str:
    from pi_jobs.stream._logs import log_tail, python_error

    try:
        client.get_job_execution_result().result()
    except Exception as err:
        cause = python_error(str(err)) or str(err)[-4000:]
        return cause if "Traceback" in cause else f"{cause}\n{log_tail(config.log_dir)}"
    return log_tail(config.log_dir)


def run_backfill(config: BackfillConfig) -> BackfillReport:
    """Plan, run the BATCH job on the local Flink mini-cluster, record the run in the catalog.

    Exactly once and restartable: finished episodes are skipped by the plan, and the writer
    (`LakeWriter.commit_episodes(..., supersede=True)`) drops any that another (or a killed)
    run committed since; a SIGKILL loses at most the episodes waiting for their group commit.

    Raises:
        BackfillError: planning failed, or the job failed (after its bounded restarts); the
            message names the log directory and quotes the worker's error.

    Example:
        >>> report = run_backfill(BackfillConfig(lake_root="/data/lake", catalog_path="/data/catalog",
        ...                                      featurizer="res96", work_dir=Path("/data/backfill")))
        >>> report.committed
        40
    """
    from pi_jobs.backfill._function import read_run_progress
    from pi_jobs.backfill.job import build_backfill_job
    from pi_jobs.stream._progress import progress_files

    t0 = time.monotonic()
    started_ns = time.time_ns()
    plan = plan_backfill(config)
    tag = plan.featurizer.tag
    run_id = (
        config.run_id or f"{plan.featurizer.name}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    )
    log.info(
        "backfill %s (%s) into %s: %d selected, %d already done, %d to do",
        run_id,
        tag,
        config.target_root,
        plan.selected,
        len(plan.already_done),
        len(plan.items),
    )
    _record_done(config, plan.already_done)
    config.work_dir.mkdir(parents=True, exist_ok=True)
    for old in progress_files(config.progress_path):  # counts are per run
        old.unlink(missing_ok=True)
    progress: dict[str, Any] = {}
    status = "finished"
    job_s = 0.0
    try:
        if plan.items:
            progress, job_s = _run_job(config, plan, run_id, build_backfill_job, read_run_progress)
            progress = _count_commits(config, plan, progress)
            # The catalog follows the lake for every episode the run committed, even where a
            # worker's catalog record failed after its Delta commit: one in the function's
            # close() (the last group commit) can fail while the job still ends FINISHED.
            _record_done(config, _done_in_target(config, plan))
    except BaseException:
        status = "failed"
        progress = read_run_progress(config.progress_path)
        _record_run(config, plan, run_id, progress, started_ns, status)
        raise
    report = BackfillReport(
        run_id=run_id,
        featurizer=tag,
        target_lake=config.target_root,
        selected=plan.selected,
        already_done=len(plan.already_done),
        committed=int(progress.get("committed", 0)),
        duplicates=int(progress.get("duplicates", 0)),
        failed=int(progress.get("failed", 0)),
        failures=tuple(progress.get("failures", [])),
        raw_bytes=int(progress.get("bytes", 0)),
        elapsed_s=time.monotonic() - t0,
        job_s=job_s,
    )
    _record_run(config, plan, run_id, progress, started_ns, status)
    log.info("backfill %s: done: %s", run_id, report)
    for failure in report.failures:
        log.warning("backfill %s: failed episode %s", run_id, failure)
    return report


def _run_job(
    config: BackfillConfig, plan: BackfillPlan, run_id: str, build: Any, read_progress: Any
) -> tuple[dict[str, Any], float]:
    """Run the job to its end, logging progress; returns (progress, seconds from the first
    processed episode to the end)."""
    settings = BackfillSettings(
        source_root=config.lake_root,
        target_root=config.target_root,
        catalog_path=config.target_catalog,
        featurize=plan.featurizer.config,
        featurizer_tag=plan.featurizer.tag,
        writer_prefix=f"backfill-{run_id}",
        progress_path=str(config.progress_path.absolute()),
        group_commit_episodes=config.group_commit_episodes,
        group_commit_delay_s=config.group_commit_delay_s,
    )
    client = build(config, plan.items, settings).execute_async(f"pilake-backfill[{run_id}]")
    log.info("backfill %s: job %s submitted; logs in %s", run_id, client.get_job_id(), config.log_dir)
    total = len(plan.items)
    last_log, last_done = time.monotonic(), 0
    progress: dict[str, Any] = {}
    finished = False
    try:
        while True:
            time.sleep(0.25)
            status = _status(client)
            progress = read_progress(config.progress_path)
            if status in ("FAILED", "FAILING"):
                raise BackfillError(
                    f"backfill job failed; logs in {config.log_dir}\n{_failure(client, config)}"
                )
            if status == "CANCELED":
                raise BackfillError(f"backfill job was cancelled; logs in {config.log_dir}")
            if status == "FINISHED":  # the last group commit may still be on its way (close())
                progress = _settled_progress(config, total, progress, read_progress)
            now = time.monotonic()
            done = int(progress.get("episodes", 0))
            if status == "FINISHED" or now - last_log >= config.progress_interval_s:
                log.info(
                    "backfill %s: %d/%d episodes (%d committed, %d duplicate, %d failed), "
                    "%.2f episodes/s, %.2f MB/s raw read",
                    run_id,
                    done,
                    total,
                    int(progress.get("committed", 0)),
                    int(progress.get("duplicates", 0)),
                    int(progress.get("failed", 0)),
                    (done - last_done) / (now - last_log),
                    _busy_mb_per_s(progress),
                )
                last_log, last_done = now, done
            if status == "FINISHED":
                finished = True
                break
    finally:
        if not finished:
            try:
                client.cancel().result()
            except Exception as err:  # already ended
                log.debug("cancel: %s", err)
    first, last = int(progress.get("first_activity_ns", 0)), int(progress.get("last_activity_ns", 0))
    return progress, max(0.0, (last - first) / 1e9)


def _settled_progress(
    config: BackfillConfig, total: int, progress: dict[str, Any], read_progress: Any
) -> dict[str, Any]:
    """The workers' progress once every item is processed and no episode waits for its group
    commit (`buffered` 0 in every subtask), or as it stands after `_SETTLE_TIMEOUT_S`."""
    deadline = time.monotonic() + _SETTLE_TIMEOUT_S
    while not (int(progress.get("episodes", 0)) >= total and int(progress.get("buffered", 0)) == 0):
        if time.monotonic() >= deadline:
            log.warning(
                "backfill: the workers' progress did not settle within %.0f s (%s); counting the lake",
                _SETTLE_TIMEOUT_S,
                {k: progress.get(k) for k in ("episodes", "buffered", "committed")},
            )
            break
        time.sleep(0.1)
        progress = read_progress(config.progress_path)
    return progress


def _done_in_target(config: BackfillConfig, plan: BackfillPlan) -> tuple[str, ...]:
    """The planned episodes whose visible attempt in the target carries the run's featurizer."""
    from pi_format import LakeLayout
    from pi_format.lake import latest_commits
    from pi_format.lake.visibility import read_deleted_ids

    planned = {item[0] for item in plan.items}
    target = latest_commits(_episodes(config.target_root), read_deleted_ids(LakeLayout(config.target_root)))
    return tuple(
        sorted(
            e
            for e, f in zip(
                target.column("episode_id").to_pylist(), target.column("featurizer").to_pylist(), strict=True
            )
            if f == plan.featurizer.tag and e in planned
        )
    )


def _count_commits(config: BackfillConfig, plan: BackfillPlan, progress: dict[str, Any]) -> dict[str, Any]:
    """`progress` with `committed` checked against the lake: the planned episodes whose visible
    attempt in the target now carries the featurizer, less those the workers found already done
    (duplicates), are what this run committed. The workers' own count can only lag the lake (a
    progress file written after the driver read it), never lead it."""

    done_now = len(_done_in_target(config, plan))
    committed = max(int(progress.get("committed", 0)), done_now - int(progress.get("duplicates", 0)))
    if committed != int(progress.get("committed", 0)):
        log.warning(
            "backfill: the workers reported %s committed, the lake holds %d of this run's episodes",
            progress.get("committed", 0),
            committed,
        )
    return {**progress, "committed": committed}


def _busy_mb_per_s(progress: dict[str, Any]) -> float:
    first, last = int(progress.get("first_activity_ns", 0)), int(progress.get("last_activity_ns", 0))
    return int(progress.get("bytes", 0)) / 1e6 / ((last - first) / 1e9) if last > first else 0.0


def _record_run(
    config: BackfillConfig,
    plan: BackfillPlan,
    run_id: str,
    progress: dict[str, Any],
    started_ns: int,
    status: str,
) -> None:
    """The run's row in the main catalog's `backfill_runs` (pi_catalog)."""
    from pi_catalog import BackfillRun, Catalog, record_backfill_run

    run = BackfillRun(
        run_id=run_id,
        featurizer=plan.featurizer.tag,
        featurizer_name=plan.featurizer.name,
        featurizer_version=plan.featurizer.version,
        where_sql=config.where or "",
        into=config.into or "",
        target_lake=config.target_root,
        selected=plan.selected,
        already_done=len(plan.already_done),
        committed=int(progress.get("committed", 0)),
        duplicates=int(progress.get("duplicates", 0)),
        failed=int(progress.get("failed", 0)),
        raw_bytes=int(progress.get("bytes", 0)),
        started_at_ns=started_ns,
        finished_at_ns=time.time_ns(),
        status=status,
    )
    try:
        record_backfill_run(Catalog(config.catalog_path), run)
    except Exception as err:  # the lake is the truth; a missing record must not hide the result
        log.warning("backfill %s: could not record the run in the catalog: %s", run_id, err)
