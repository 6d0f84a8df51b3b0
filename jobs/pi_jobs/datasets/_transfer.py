"""Moving one lake file, verified (architecture decisions 10 and 14).

The bytes read from the source are checked while they are written, and a file keeps its name at the
destination only when they passed (a local file is renamed into place after the check; an S3 object
that fails is deleted once its upload completed, and was never in a Delta log): their length against
the source's Delta log, the footer and every page's CRC (`pi_format.lake.page_walk.check_pages`: the
lake's page shape walked in C-backed code, anything else by `pi_format.lake.check_parquet_file`, the
machinery `pilake verify` uses), and with `digest` (or `readback`) a sha256 is taken of them at
the source (the manifest records it; '' when not taken). After the writes, the destination's
listing must show every file at the source's size; with `readback` every written file is also
read back and must have the source's sha256 (twice the traffic: the page CRCs already hold the
bytes that were sent). A fault
re-fetches once; a second fault fails the copy naming the file. The Delta add action's row count and
statistics come from the source's log (`FileJob.num_rows`, `stats_json`), so a file is parsed once,
by the check. A file the destination already holds with the source's size (a copy killed after
writing it, before its manifest entry) is checked in place, by its page CRCs, and kept without being
sent again."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
from pi_format.lake.page_walk import check_pages

from pi_jobs.datasets._manifest import CopyManifest, DoneFile
from pi_jobs.datasets._progress import Progress
from pi_jobs.datasets._stores import LakeStore
from pi_jobs.errors import PiJobsError

# Fault injection for the kill-and-resume test (a test double for a crash that cannot be timed
# on a copy that lasts a second): SIGKILL this process after it has sent this many files.
KILL_AFTER_FILES_ENV = "PILAKE_FAULT_COPY_KILL_AFTER_FILES"


class CopyError(PiJobsError):
    """A dataset copy cannot be made as asked, or a file fails its checks (the message names it)."""


@dataclass
class TransferCounts:
    """What the transfers of one copy did (thread-safe through `lock`)."""

    sent: int = 0  # files read from the source and written
    bytes_sent: int = 0
    found: int = 0  # files the destination already held, checked in place
    in_manifest: int = 0  # files the manifest lists as finished: not touched
    refetched: int = 0  # files whose first fetch failed a check
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True, slots=True)
class FileJob:
    """One file to bring over: its path relative to the lake root and its size at the source."""

    relative: str
    size: int
    require_crc: bool  # its table records page CRCs in every file: a page without one is a fault
    # the source's Delta add action (row count, statistics JSON); -1/"": taken from the bytes
    num_rows: int = -1
    stats_json: str = ""


def _sha256(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_pages(data: bytes | memoryview, require_crc: bool) -> str:
    """'' when every page of the Parquet file `data` has a matching CRC, else what is wrong."""
    return check_pages(data, require_crc=require_crc)


def _facts(data: bytes | memoryview) -> tuple[int, str]:
    """(rows, Delta add-action statistics) of the Parquet file `data`, as the lake writer records them."""
    import pyarrow.parquet as pq
    from pi_format.lake._files import DATA_SKIPPING_COLUMNS, _delta_stats

    reader = pq.ParquetFile(pa.BufferReader(data))
    names = [c for c in DATA_SKIPPING_COLUMNS if c in reader.schema_arrow.names]
    columns = reader.read(columns=names) if names else pa.table({"_": pa.nulls(reader.metadata.num_rows)})
    return int(reader.metadata.num_rows), _delta_stats(columns)


def _verify(data: bytes | memoryview, require_crc: bool, digest: bool) -> tuple[str, str]:
    """(what is wrong or '', sha256 or '' when not `digest`) of a file's bytes as read from the source."""
    problem = _check_pages(data, require_crc)
    return problem, (_sha256(data) if digest and not problem else "")


def _check_threads(workers: int) -> int:
    return min(workers, os.cpu_count() or 1)


def _job_facts(job: FileJob, data: bytes | memoryview) -> tuple[int, str]:
    if job.num_rows >= 0 and job.stats_json:
        return job.num_rows, job.stats_json
    return _facts(data)


class Transfers:
    """Copies files from `source` to `dest`, `workers` at once, recording them in `manifest`.

    Example:
        >>> done = Transfers(src, dst, manifest, progress, workers=16, part_bytes=64 << 20).run(jobs)
    """

    def __init__(
        self,
        source: LakeStore,
        dest: LakeStore,
        manifest: CopyManifest,
        progress: Progress | None,
        *,
        workers: int,
        part_bytes: int,
        readback: bool = False,
        digest: bool = False,
    ) -> None:
        self.source = source
        self.dest = dest
        self.manifest = manifest
        self.progress = progress
        self.workers = workers
        self.part_bytes = part_bytes
        self.readback = readback
        # the sha256 is taken only where it is compared (readback) or asked for (the manifest as an
        # audit record): ~0.75 s of CPU a GiB, ~8% of a copy's; the page CRCs are the check
        self.digest = digest or readback
        self.counts = TransferCounts()
        self._present: dict[str, int] = {}
        self._checks: ThreadPoolExecutor | None = None  # the source-side checks, beside the writes
        raw = os.environ.get(KILL_AFTER_FILES_ENV, "")
        self._kill_after = int(raw) if raw.strip().isdigit() else 0

    def run(self, jobs: list[FileJob]) -> dict[str, DoneFile]:
        """Bring every file of `jobs` over; returns their facts by relative path.

        Raises:
            CopyError: a file that failed its checks twice, or that cannot be read or written.
        """
        out: dict[str, DoneFile] = {}
        # one listing per table directory instead of a HEAD request per file
        self._present = self.dest.listing(sorted({job.relative.split("/", 1)[0] for job in jobs}))
        with (
            ThreadPoolExecutor(self.workers, thread_name_prefix="copy") as pool,
            ThreadPoolExecutor(self.workers, thread_name_prefix="copy-part") as parts,
            # the checks are CPU work (most of it under the GIL): one thread a core, not one a
            # transfer, so they do not take turns with the uploads' threads for the GIL
            ThreadPoolExecutor(_check_threads(self.workers), thread_name_prefix="copy-check") as checks,
        ):
            self._checks = checks
            futures = {job.relative: pool.submit(self.one, job, parts) for job in jobs}
            try:
                for relative, future in futures.items():
                    out[relative] = future.result()
            except BaseException:
                for future in futures.values():
                    future.cancel()
                raise
            finally:
                self._checks = None
                self.manifest.flush()
        self._check_landed(jobs)
        return out

    def _check_landed(self, jobs: list[FileJob]) -> None:
        """Every file is at the destination with the source's size (one listing per directory)."""
        if not jobs:
            return
        there = self.dest.listing(sorted({job.relative.split("/", 1)[0] for job in jobs}))
        for job in jobs:
            if there.get(job.relative) != job.size:
                raise CopyError(
                    f"{self.dest.uri(job.relative)} was written but the destination lists it with "
                    f"{there.get(job.relative)} bytes, not the source's {job.size}; nothing of the pin was "
                    "committed there: run the same command again"
                )

    def _advance(self, n: int) -> None:
        if self.progress is not None:
            self.progress.advance(n)

    def one(self, job: FileJob, parts: ThreadPoolExecutor | None = None) -> DoneFile:
        """Bring one file over (the per-file seam a distributed copy calls): skipped when the
        manifest and the destination's listing say it is there, checked in place when the
        destination holds a file of its size, else sent.

        Raises:
            CopyError: the file failed its checks twice, or cannot be read or written.
        """
        done = self.manifest.done.get(job.relative)
        present = self._present.get(job.relative)
        if done is not None and done.size == job.size and present == job.size:
            with self.counts.lock:
                self.counts.in_manifest += 1
            self._advance(job.size)
            return done
        try:
            if present == job.size:
                found = self._check_in_place(job, parts)
                if found is not None:
                    self._advance(job.size)
                    return found
            done = self._send(job, parts)
        except OSError as err:
            raise CopyError(
                f"copying {self.source.uri(job.relative)} to {self.dest.uri(job.relative)} failed: "
                f"{self.dest.scrub(self.source.scrub(str(err)))}"
            ) from None  # the chained error's text could carry a credential
        self._advance(job.size)
        return done

    def _check_in_place(self, job: FileJob, parts: ThreadPoolExecutor | None) -> DoneFile | None:
        data = self.dest.read(job.relative, part_bytes=self.part_bytes, parts=parts)
        if len(data) != job.size or _check_pages(data, job.require_crc):
            return None  # not the source's file (or damaged): send it again
        done = DoneFile(job.size, _sha256(data) if self.digest else "", *_job_facts(job, data))
        self.manifest.add(job.relative, done)
        with self.counts.lock:
            self.counts.found += 1
        return done

    def _send(self, job: FileJob, parts: ThreadPoolExecutor | None) -> DoneFile:
        problem = ""
        for attempt in range(2):
            if attempt:
                with self.counts.lock:
                    self.counts.refetched += 1
            data = self.source.read(job.relative, part_bytes=self.part_bytes, parts=parts)
            if len(data) != job.size:
                problem = f"read {len(data)} bytes, the source's Delta log says {job.size}"
                continue
            # the source-side check (page CRCs, sha256) runs while the bytes go out; the file
            # keeps its name at the destination only when it passed (`LakeStore.write`)
            verdict: Future[tuple[str, str]]
            if self._checks is not None:
                verdict = self._checks.submit(_verify, data, job.require_crc, self.digest)
            else:
                verdict = Future()
                verdict.set_result(_verify(data, job.require_crc, self.digest))

            def check(verdict: Future[tuple[str, str]] = verdict) -> str:
                return verdict.result()[0]

            problem = self.dest.write(job.relative, data, check=check)
            if problem:
                continue
            digest = verdict.result()[1]
            if self.readback:
                back = self.dest.read(job.relative, part_bytes=self.part_bytes, parts=parts)
                if _sha256(back) != digest:
                    problem = f"the {len(back)} bytes read back differ from the {len(data)} sent"
                    continue
            done = DoneFile(job.size, digest, *_job_facts(job, data))
            self.manifest.add(job.relative, done)
            self._sent(job.size)
            return done
        raise CopyError(
            f"{self.source.uri(job.relative)} failed its checks twice: {problem}; nothing of the pin was "
            "committed at the destination. Run `pilake verify` on the source lake (and `pilake repair`) "
            "before copying this pin"
        )

    def _sent(self, size: int) -> None:
        with self.counts.lock:
            self.counts.sent += 1
            self.counts.bytes_sent += size
            sent = self.counts.sent
        if self._kill_after and sent >= self._kill_after:
            self.manifest.flush()
            os.kill(os.getpid(), signal.SIGKILL)
