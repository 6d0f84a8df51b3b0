"""`pilake dataset copy PIN DEST --flink`: the copy as a PyFlink batch job across TaskManagers.

The driver (this module) plans as the single-process copy does (`pi_jobs.datasets.copy`: the
files the pin's rows locate, less those the destination's Delta log already holds), splits the
file list into `parallelism x shares_per_subtask` shares of about equal bytes, and runs the job of
`pi_jobs.datasets._flink_copy_job` on the local mini-cluster or on a session cluster (`--cluster
URL`, submitted with `flink run` as `pilake stream --cluster` does). Each subtask moves and
verifies its shares and writes a share report at the destination. Only when every share of the
run reported every one of its files verified does the driver commit, in the lake's order (SPEC.md
§7.7, through `pi_format.lake`): the steps and video files, the annotations and deletions, the
episodes rows, the catalog, and the pin LAST after its rows were read back with its content hash.

A subtask or TaskManager killed mid-copy: Flink restarts it (`restart_attempts`), else the job
fails and nothing is committed (no pin shows). The rerun finds every finished file at the
destination (its share manifest, else the file itself, checked by its page CRCs) and sends none
of them again.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pi_jobs.datasets._flink_copy_job import ShareSettings, flink_dir, share_item, share_report_path
from pi_jobs.datasets._manifest import DoneFile
from pi_jobs.datasets._progress import Progress
from pi_jobs.datasets._stores import LakeStore
from pi_jobs.datasets._transfer import CopyError, FileJob
from pi_jobs.datasets.copy import CopyOptions, CopyReport, commit_copy, plan_copy

_REPORT_NAME = re.compile(r"share-(\d{5})\.json")


@dataclass(frozen=True, slots=True)
class FlinkCopyOptions:
    """Where and how wide the copy job runs.

    Example:
        >>> FlinkCopyOptions(parallelism=8, cluster="http://flink-jobmanager:8081")
    """

    # Subtasks, each moving its shares with `CopyOptions.workers` transfers in flight: one per
    # TaskManager slot; 2 fits the local mini-cluster of a small machine.
    parallelism: int = 2
    # Shares per subtask: more than one lets a fast subtask's slot take no idle tail, and a
    # restarted subtask redoes less; 4 keeps each share large on a big copy.
    shares_per_subtask: int = 4
    # The session cluster's REST address; "" runs the local mini-cluster in this process.
    cluster: str = ""
    # Restarts of a failed subtask before the job fails: a lost TaskManager is retried (its
    # finished files are found, not re-sent); a file that fails its checks fails each attempt.
    restart_attempts: int = 2
    # Where the Flink logs and the submitted job's config go.
    work_dir: Path = field(default_factory=lambda: Path.home() / ".pilake" / "flink" / "copy")

    def __post_init__(self) -> None:
        for name, value, high in (
            ("parallelism", self.parallelism, 1024),
            ("shares_per_subtask", self.shares_per_subtask, 1000),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise ValueError(f"{name} must be an integer in [1, {high}], got {value!r}")
        if not isinstance(self.restart_attempts, int) or not 0 <= self.restart_attempts <= 100:
            raise ValueError(
                f"restart_attempts must be an integer in [0, 100], got {self.restart_attempts!r}"
            )
        if self.cluster:
            from pi_jobs.local.flink_submit import rest_host_port

            rest_host_port(self.cluster)  # ValueError: not http://host:port


@dataclass(frozen=True, slots=True)
class FlinkCopyReport(CopyReport):
    """A `CopyReport` with what the job did: `subtask_files` = files each subtask moved or checked."""

    parallelism: int = 0
    shares: int = 0
    subtask_files: dict[str, int] = field(default_factory=dict)
    job_id: str = ""
    where: str = ""


def split_shares(jobs: list[FileJob], count: int) -> list[list[FileJob]]:
    """`jobs` in `count` shares of about equal bytes (largest file first to the lightest share);
    empty shares dropped.

    Example:
        >>> [len(s) for s in split_shares(jobs, 4)]
        [3, 3, 2, 2]
    """
    shares: list[list[FileJob]] = [[] for _ in range(max(1, count))]
    weights = [0] * len(shares)
    for job in sorted(jobs, key=lambda j: (-j.size, j.relative)):
        lightest = min(range(len(shares)), key=lambda i: (weights[i], len(shares[i]), i))
        shares[lightest].append(job)
        weights[lightest] += job.size
    return [s for s in shares if s]


def copy_dataset_flink(
    source_root: str,
    name: str,
    dest_root: str,
    *,
    options: CopyOptions | None = None,
    flink: FlinkCopyOptions | None = None,
    dest_catalog: str | None = None,
    progress_out: TextIO | None = None,
    show_progress: bool = True,
) -> FlinkCopyReport:
    """Copy pin `name` into the lake at `dest_root` as a PyFlink batch job (see the module).

    Raises:
        ValueError: a bad pin name or options.
        CopyError: as `copy_dataset`; and a job that failed (quoting the worker's error, which
            names a file that failed its checks) or a share that did not report.

    Example:
        >>> copy_dataset_flink("/data/lake", "pick-v3", "s3://b/lake",
        ...                    flink=FlinkCopyOptions(parallelism=8)).subtask_files
        {'0': 52, '1': 52, ...}
    """
    started = time.perf_counter()
    options, flink = options or CopyOptions(), flink or FlinkCopyOptions()
    plan = plan_copy(source_root, name, dest_root)
    source, dest, dest_store, jobs, to_send = plan.source, plan.dest, plan.dest_store, plan.jobs, plan.to_send
    shares = split_shares(to_send, flink.parallelism * flink.shares_per_subtask) if to_send else []
    run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    settings = ShareSettings(
        source_root=source.root,
        dest_root=dest.root,
        pin=name,
        run_id=run_id,
        workers=options.workers,
        part_mib=options.part_mib,
        readback=options.readback,
        parallelism=flink.parallelism,
        restart_attempts=flink.restart_attempts,
        log_dir=str((flink.work_dir / "log").absolute()),
        digest=options.digest,
    )
    job_id, reports = "", list[dict[str, Any]]()
    if shares:
        bar = None
        if show_progress:
            bar = Progress(f"copy {name} (flink)", total=sum(j.size for j in to_send), out=progress_out)
        items = [share_item(i, share) for i, share in enumerate(shares)]
        with plan.tables_refusal_first():
            job_id, reports = _run(settings, items, shares, flink, dest_store, bar)
        if bar is not None:
            bar.close()

    done: dict[str, DoneFile] = {}
    for report in reports:
        done.update({k: DoneFile.from_dict(v) for k, v in report["files"].items()})
    missing = [j.relative for j in to_send if j.relative not in done or done[j.relative].size != j.size]
    if missing:
        raise CopyError(
            f"the copy job ended without verifying {len(missing)} file(s), first {missing[0]!r}; nothing "
            "was committed: run the same command again"
        )
    rows_committed = commit_copy(plan, done, dest_catalog)
    _clean(dest_store, name)
    subtask_files: dict[str, int] = {}
    for report in reports:
        key = str(report["subtask"])
        subtask_files[key] = subtask_files.get(key, 0) + len(report["files"])
    sent = sum(int(r["sent"]) for r in reports)
    return FlinkCopyReport(
        pin=name,
        dest=dest.root,
        content_hash=plan.pin.content_hash,
        episodes=len(plan.pin.episode_ids),
        files=len(jobs),
        files_sent=sent,
        files_already_there=len(jobs) - sent,
        bytes_sent=sum(int(r["bytes_sent"]) for r in reports),
        files_refetched=sum(int(r["refetched"]) for r in reports),
        rows_committed=rows_committed,
        seconds=round(time.perf_counter() - started, 3),
        parallelism=flink.parallelism,
        shares=len(shares),
        subtask_files=dict(sorted(subtask_files.items())),
        job_id=job_id,
        where=f"session cluster {flink.cluster}" if flink.cluster else "mini-cluster",
    )


def _clean(store: LakeStore, pin: str) -> None:
    """Drop the pin's share manifests and reports once the pin is committed (a resume aid only)."""
    import contextlib

    with contextlib.suppress(OSError):
        store.fs.delete_dir(store.path(flink_dir(pin)))


def _read_reports(store: LakeStore, settings: ShareSettings, count: int) -> dict[int, dict[str, Any]]:
    found: dict[int, dict[str, Any]] = {}
    directory = share_report_path(settings.pin, settings.run_id, 0).rsplit("/", 1)[0]
    for relative in store.listing([directory]):
        found_name = _REPORT_NAME.fullmatch(relative.rsplit("/", 1)[1])  # not a writer's temporary
        share = int(found_name.group(1)) if found_name else count
        if share < count:
            doc = json.loads(store.read_text(relative) or "{}")
            if doc.get("run_id") == settings.run_id:
                found[share] = doc
    return found


def _run(
    settings: ShareSettings,
    items: list[str],
    shares: list[list[FileJob]],
    flink: FlinkCopyOptions,
    store: LakeStore,
    bar: Progress | None,
) -> tuple[str, list[dict[str, Any]]]:
    """Run the job to its end, advancing `bar` as shares report; returns (job id, share reports)."""
    from pi_jobs.datasets._flink_copy_run import MiniClusterJob, submit_copy_job

    handle = (
        submit_copy_job(settings, items, flink.cluster, flink.work_dir)
        if flink.cluster
        else MiniClusterJob(settings, items)
    )
    seen: dict[int, dict[str, Any]] = {}
    finished = False
    try:
        while True:
            time.sleep(0.5)
            state = handle.status()
            for share, doc in _read_reports(store, settings, len(shares)).items():
                if share not in seen and bar is not None:
                    bar.advance(sum(j.size for j in shares[share]))
                seen[share] = doc
            if state in ("FAILED", "FAILING", "CANCELED"):
                ended = "was cancelled" if state == "CANCELED" else "failed"  # FAILING: failed
                raise CopyError(
                    f"the copy job {handle.job_id} on the {handle.where} {ended}; nothing was "
                    f"committed, run the same command again to resume (logs in {settings.log_dir}):\n"
                    f"{handle.failure()}"
                )
            if state == "FINISHED":
                finished = True
                break
    finally:
        if not finished:
            handle.cancel()
    seen.update(_read_reports(store, settings, len(shares)))
    return handle.job_id, [seen[i] for i in sorted(seen)]
