"""The PyFlink batch job of `pilake dataset copy --flink` (issue 33's "beyond one machine").

Job graph (BATCH runtime mode): a bounded collection of *shares* (each a JSON list of files,
planned by `pi_jobs.datasets._flink_copy`) -> broadcast -> `CopyShareFunction` at the job's
parallelism, where subtask i takes the shares numbered i modulo the parallelism (with
`shares_per_subtask` shares per subtask every subtask gets the same number). A subtask moves its
shares with the single-process machinery (`pi_jobs.datasets._transfer.Transfers`: many
transfers in flight, every file verified by its page CRCs; a sha256 with `digest`), keeps a copy manifest
per share at the destination, and writes a *share report* there (`share_report_path`): the facts
of every file it verified (size, sha256, rows, Delta statistics) and what it did. It commits
nothing: the driver commits the destination's files, rows and pin once every share reported
(the lake's commit order, SPEC.md §7.7).

Every path here is the destination's: a TaskManager on another machine reads and writes the same
stores as the driver (the reports go where the data goes).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyflink.datastream import ProcessFunction, RuntimeContext

from pi_jobs.datasets._manifest import MANIFEST_DIR, CopyManifest
from pi_jobs.datasets._stores import LakeStore
from pi_jobs.datasets._transfer import CopyError, FileJob, Transfers

REPORT_FORMAT = "pilake-copy-share/1"


@dataclass(frozen=True, slots=True)
class ShareSettings:
    """What every subtask of one copy job needs (JSON: it travels to a session cluster in a file).

    Example:
        >>> ShareSettings.from_json(settings.to_json()) == settings
        True
    """

    source_root: str
    dest_root: str
    pin: str
    run_id: str
    workers: int  # transfers in flight per subtask
    part_mib: int
    readback: bool  # read every written file back (CopyOptions.readback)
    parallelism: int
    restart_attempts: int
    log_dir: str
    digest: bool = False  # a sha256 of every file in the manifest (CopyOptions.digest)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ShareSettings:
        return cls(**json.loads(text))


def flink_dir(pin: str) -> str:
    """The destination directory (relative to its root) of a pin's Flink copy: share manifests
    (kept across runs: a rerun's subtasks skip what they list) and each run's share reports."""
    return f"{MANIFEST_DIR}/copy-{pin}.flink"


def share_report_path(pin: str, run_id: str, share: int) -> str:
    return f"{flink_dir(pin)}/{run_id}/share-{share:05d}.json"


def share_item(share: int, files: Sequence[FileJob]) -> str:
    """One element of the job's source: a share of the file list."""
    files_json = [[f.relative, f.size, f.require_crc, f.num_rows, f.stats_json] for f in files]
    return json.dumps({"share": share, "files": files_json})


class CopyShareFunction(ProcessFunction):
    """Moves and verifies one share per element; writes its share report at the destination."""

    def __init__(self, settings: ShareSettings) -> None:
        self.settings = settings

    def open(self, runtime_context: RuntimeContext) -> None:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        self.subtask = int(runtime_context.get_index_of_this_subtask())
        self.attempt = int(runtime_context.get_attempt_number())
        self.subtasks = int(runtime_context.get_number_of_parallel_subtasks())
        self.source = LakeStore.open(self.settings.source_root)
        self.dest = LakeStore.open(self.settings.dest_root)

    def process_element(self, value: str, ctx: Any) -> Iterator[str]:
        s = self.settings
        item = json.loads(value)
        share = int(item["share"])
        if share % self.subtasks != self.subtask:
            return  # another subtask's share
        files = [FileJob(str(r), int(n), bool(c), int(rows), str(st)) for r, n, c, rows, st in item["files"]]
        manifest = CopyManifest.load(self.dest, f"{s.pin}.flink/share-{share:05d}")
        transfers = Transfers(
            self.source,
            self.dest,
            manifest,
            None,
            workers=s.workers,
            part_bytes=s.part_mib * 2**20,
            readback=s.readback,
            digest=s.digest,
        )
        done = transfers.run(files)  # CopyError names a file that failed its checks twice
        if set(done) != {f.relative for f in files}:
            raise CopyError(f"share {share}: the transfers returned {len(done)} of its {len(files)} files")
        counts = transfers.counts
        report = {
            "format": REPORT_FORMAT,
            "run_id": s.run_id,
            "share": share,
            "subtask": self.subtask,
            "attempt": self.attempt,
            "sent": counts.sent,
            "bytes_sent": counts.bytes_sent,
            "found": counts.found,
            "in_manifest": counts.in_manifest,
            "refetched": counts.refetched,
            "files": {k: v.to_dict() for k, v in sorted(done.items())},
        }
        self.dest.write_text(share_report_path(s.pin, s.run_id, share), json.dumps(report))
        yield f"share {share}: {len(files)} files, {counts.sent} sent, subtask {self.subtask}"


def job_name(settings: ShareSettings) -> str:
    return f"pilake-dataset-copy[{settings.pin}:{settings.run_id}]"


def build_copy_job(settings: ShareSettings, shares: Sequence[str]) -> Any:
    """The StreamExecutionEnvironment (BATCH) running `CopyShareFunction` over `shares`.

    Example:
        >>> build_copy_job(settings, [share_item(0, files)]).execute("copy")
    """
    from pi_jobs.stream.job import prepare_python_workers, python_worker_configuration

    prepare_python_workers(Path(settings.log_dir))
    from pyflink.common import Types
    from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

    conf = python_worker_configuration(settings.restart_attempts)
    if settings.restart_attempts == 0:  # fail at the first fault (exponential-delay would retry)
        conf.set_string("restart-strategy.type", "none")
    conf.set_string("parallelism.default", str(settings.parallelism))
    # one slot per parallel subtask on the local mini-cluster (a session cluster has its own)
    conf.set_string("taskmanager.numberOfTaskSlots", str(settings.parallelism))
    # one share per element: a bundle of one hands it to the worker at once
    conf.set_string("python.fn-execution.bundle.size", "1")
    conf.set_string("execution.batch.adaptive.auto-parallelism.enabled", "false")  # --parallelism it is
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(settings.parallelism)
    (
        env.from_collection(list(shares), type_info=Types.STRING())
        # every subtask sees every share and takes those of its index (`process_element`): Flink
        # 2's adaptive batch scheduler hands a rebalance edge's subpartitions to the consumers by
        # bytes, and a few small shares all landed in subtask 0
        .broadcast()
        .process(CopyShareFunction(settings), output_type=Types.STRING())
        .name("pilake-dataset-copy")
        .print()  # PyFlink needs a sink; the reports are at the destination
    )
    return env


def run_submitted(config_path: str) -> str:
    """The body of the launcher `flink run -py` runs for a session cluster: build the job from the
    config file (settings and shares) and submit it there. Returns the job id.

    Example:
        >>> run_submitted("/home/me/.pilake/flink/copy/submit/config.json")
        'a1b2c3...'
    """
    doc = json.loads(Path(config_path).read_text())
    settings = ShareSettings.from_json(doc["settings"])
    client = build_copy_job(settings, doc["shares"]).execute_async(job_name(settings))
    job_id = str(client.get_job_id())
    print(f"pilake-copy job id: {job_id}", flush=True)  # what the driver parses
    return job_id
