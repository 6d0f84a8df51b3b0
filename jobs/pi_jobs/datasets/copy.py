"""`pilake dataset copy PIN DEST`: a dataset pin, moved to another lake (architecture decision 14).

What moves is exactly what the pin reads: the steps and video files its episodes rows locate
(whole, byte for byte: the rows' locators stay valid and every page keeps its CRC), those
episodes rows, the annotations written at or before the pin and the deletions of its episodes;
then the pin itself. Nothing else of the source lake (other datasets, superseded attempts no pin
names, raw, quarantine) is sent. A steps or video file of a group commit may also hold rows of
episodes the pin does not name: they come along inside the file and are invisible at the
destination (no episodes row names them; `pilake gc` there treats them as any uncommitted rows).

Commit order at the destination is the lake's (SPEC.md §7.7): steps and video files, then the
annotations and deletions, then the episodes rows (the commit markers), then the catalog, and
the pin LAST, after its rows were read back at the destination with the pin's content hash. A
reader of the destination never sees a half-copied pin. Every file is verified before it counts
(`_transfer`), and the copy resumes from the destination's Delta log and copy manifest
(`_manifest`): the same command after a SIGKILL, or for a newer pin of the same selection, sends
only what the destination lacks.

One process moves the files with many transfers in flight; `copy_dataset_flink`
(`_flink_copy`) spreads the same plan over a Flink job's subtasks and commits it the same way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, TextIO

from pi_format import LakeLayout

from pi_jobs.datasets._manifest import MANIFEST_DIR, CopyManifest, DoneFile
from pi_jobs.datasets._progress import Progress
from pi_jobs.datasets._rows import commit_rows, extra_rows, missing_pairs, source_rows
from pi_jobs.datasets._stores import LakeStore, contains
from pi_jobs.datasets._transfer import CopyError, FileJob, Transfers

_FILE_TABLES = ("steps", "video")
_LOCATORS = {"steps": "steps_file", "video": "video_file"}


@dataclass(frozen=True, slots=True)
class CopyOptions:
    """How a copy moves its files.

    Example:
        >>> CopyOptions(workers=32, part_mib=64)
    """

    # Transfers in flight: object stores answer each request in tens of milliseconds, so
    # throughput comes from many at once; 16 keeps a 1 Gb/s link full with 8 MiB objects.
    workers: int = 16
    # Objects larger than this are read in ranged parts of this size, in parallel (and S3
    # uploads go in multipart pieces); 64 MiB keeps the part count of a 1 GiB file at 16.
    part_mib: int = 64
    # Read every written file back and compare its sha256 with the source's: twice the traffic.
    # Off: the bytes sent were checked at the source (page CRCs, sha256) and the destination's
    # listing must show every file at its size before anything commits.
    readback: bool = False
    # Take a sha256 of every file at the source and keep it in the copy manifest (an audit record;
    # readback takes it anyway, to compare). Off: the page CRCs are the check, and the digest
    # costs ~0.75 s of CPU a GiB, ~8% of a copy's CPU.
    digest: bool = False
    # Seconds between rewrites of the copy manifest: what a kill can lose of it (the files it
    # loses are found at the destination again and checked, not re-sent).
    manifest_flush_s: float = 2.0

    def __post_init__(self) -> None:
        for name, value, low, high in (
            ("workers", self.workers, 1, 256),
            ("part_mib", self.part_mib, 1, 4096),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        for flag, given in (("readback", self.readback), ("digest", self.digest)):
            if not isinstance(given, bool):
                raise ValueError(f"{flag} must be True or False, got {given!r}")
        if not 0 <= self.manifest_flush_s <= 3600:
            raise ValueError(f"manifest_flush_s must be in [0, 3600] seconds, got {self.manifest_flush_s!r}")


@dataclass(frozen=True, slots=True)
class CopyReport:
    """What one `copy_dataset` did."""

    pin: str
    dest: str
    content_hash: str
    episodes: int
    files: int  # steps and video files the pin reads
    files_sent: int
    files_already_there: int  # committed at the destination, in the manifest, or found in place
    bytes_sent: int
    files_refetched: int
    rows_committed: dict[str, int]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def _check_locator(name: str, path: str) -> str:
    if not path or "/" in path or "\\" in path or path.startswith(".") or "://" in path:
        raise CopyError(
            f"a pinned episodes row locates its {name} rows in {path!r}, not a file name of the "
            f"{name} table's directory; the source lake's locators are damaged (`pilake verify`)"
        )
    return path


def _source_facts(table: Any) -> dict[str, tuple[int, int, str]]:
    """Path -> (size, rows, add-action statistics JSON) of every file of the source table's
    snapshot, from its Delta log: the copy commits the same facts without parsing the files."""
    import json

    import pyarrow as pa
    from pi_format.lake._files import DATA_SKIPPING_COLUMNS

    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    out: dict[str, tuple[int, int, str]] = {}
    for action in actions:
        rows = action.get("num_records")
        names = [c for c in DATA_SKIPPING_COLUMNS if f"min.{c}" in action]
        stats = ""
        if rows is not None:
            stats = json.dumps(
                {
                    "numRecords": int(rows),
                    "minValues": {c: action[f"min.{c}"] for c in names},
                    "maxValues": {c: action[f"max.{c}"] for c in names},
                    "nullCount": {c: action[f"null_count.{c}"] for c in names},
                },
                separators=(",", ":"),
            )
        out[str(action["path"])] = (int(action["size_bytes"]), -1 if rows is None else int(rows), stats)
    return out


def _plan(source: LakeLayout, rows: Any) -> list[FileJob]:
    """The steps and video files the pinned rows locate, with their sizes, row counts and
    statistics from the source's log."""
    from deltalake import DeltaTable
    from pi_format.lake import checksums_required

    jobs: list[FileJob] = []
    for name in _FILE_TABLES:
        table = DeltaTable(source.table(name))
        facts = _source_facts(table)
        required = checksums_required(table.metadata().description)
        for path in sorted({p for p in rows.column(_LOCATORS[name]).to_pylist() if p is not None}):
            fact = facts.get(_check_locator(name, path))
            if fact is None:
                raise CopyError(
                    f"{source.table(name)}/{path}, which pinned episodes rows locate, is not in the "
                    f"{name} table's Delta log; the source lake is damaged (`pilake verify`)"
                )
            jobs.append(FileJob(f"{name}/{path}", fact[0], required, fact[1], fact[2]))
    return jobs


def _dest_tables(dest: LakeLayout, store: LakeStore) -> dict[str, Any]:
    """The destination's tables, made when missing; a destination that refuses writes is a
    `CopyError` naming it (before any file is sent)."""
    from deltalake.exceptions import DeltaError
    from pi_format.lake import ensure_lake_tables

    try:
        return ensure_lake_tables(dest)
    except (DeltaError, OSError) as err:
        raise CopyError(
            f"the destination {dest.root} refuses writes ({store.scrub(str(err)).splitlines()[0]}); "
            "nothing was copied: give a lake root this process may create and write (a local "
            "directory, or an s3:// bucket/prefix its credentials may write)"
        ) from None  # the chained error's text could carry a credential


def _check_root(what: str, root: str) -> None:
    """A lake root with a control character (NUL, newline, ...) is refused before anything is
    made: it names no sane path or bucket, and a newline in it would forge log lines."""
    if not isinstance(root, str) or not root.strip():
        raise CopyError(f"the {what} lake root must be a local path or s3://bucket/prefix, got {root!r}")
    bad = sorted({c for c in root if ord(c) < 32 or ord(c) == 127})
    if bad:
        raise CopyError(
            f"the {what} lake root {root!r} holds control character(s) {''.join(bad)!r}; give a local "
            "path or s3://bucket/prefix without them"
        )


def _check_ends(source_root: str, dest_root: str) -> None:
    if contains(source_root, dest_root) or contains(dest_root, source_root):
        raise CopyError(
            f"the destination {dest_root!r} and the source lake {source_root!r} overlap (one lies "
            "inside the other); copy a pin to a lake root outside the source"
        )


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """What a copy of one pin moves: the checked ends, the pin and its rows, every file it reads
    (`jobs`) and those the destination's Delta log lacks (`to_send`). One plan for the copy in
    one process and the copy as a Flink job (`_flink_copy`)."""

    source: LakeLayout
    dest: LakeLayout
    source_store: LakeStore
    dest_store: LakeStore
    pin: Any
    rows: Any
    jobs: list[FileJob]
    opening: Future[dict[str, Any]]  # the destination's tables, opened or being made
    to_send: list[FileJob]

    def dest_tables(self) -> dict[str, Any]:
        """The destination's tables (waited for: a fresh destination's are made while the files
        go out).

        Raises:
            CopyError: the destination refuses writes (named).
        """
        return self.opening.result()

    @contextmanager
    def tables_refusal_first(self) -> Iterator[None]:
        """Around the transfers: when they fail, a destination that refused to make its tables
        (in the background, for a fresh destination) is the fault reported."""
        try:
            yield
        except BaseException:
            self.dest_tables()
            raise


def plan_copy(source_root: str, name: str, dest_root: str) -> CopyPlan:
    """Check the ends and the pin, open (or make) the destination's tables, and list the files to
    send; a destination file of the same name and another size is a `CopyError`.

    A destination that holds nothing yet (no table, no file: one listing) has no committed file
    to compare with, so every file is to send and its tables are made in the background while
    the files go out (~0.25 s of object-store round trips at the start of every copy to a new
    lake); the commits wait for them (`CopyPlan.dest_tables`). A file name the plan sends is the
    source's (a writer's unique part name), so a concurrent copy into the same new lake can only
    write the same bytes under it."""
    from pi_format.errors import LakeError
    from pi_format.lake import PinStore
    from pi_format.lake._commit import file_sizes
    from pi_format.lake.pins import check_pin_name

    check_pin_name(name)
    _check_root("source", source_root)
    _check_root("destination", dest_root)
    source, dest = LakeLayout(source_root), LakeLayout(dest_root)
    _check_ends(source.root, dest.root)
    source_store, dest_store = LakeStore.open(source.root), LakeStore.open(dest.root)
    try:
        pin = PinStore(source).get(name)
    except LakeError as err:
        raise CopyError(str(err)) from err
    fresh = dest_store.holds_nothing(but=MANIFEST_DIR)
    # the destination's tables are opened (or made: several object-store round trips) while the
    # source's log and rows are read, and for a fresh destination while the files go out
    opener = ThreadPoolExecutor(1, thread_name_prefix="copy-plan")
    opening = opener.submit(_dest_tables, dest, dest_store)
    opener.shutdown(wait=False)
    try:
        rows = source_rows(source, pin)
        jobs = _plan(source, rows)
    except BaseException:
        opening.exception()  # waited for; the source's fault is the one reported
        raise
    if fresh:
        return CopyPlan(source, dest, source_store, dest_store, pin, rows, jobs, opening, list(jobs))
    tables = opening.result()
    committed = {n: file_sizes(tables[n]) for n in _FILE_TABLES}
    to_send: list[FileJob] = []
    for job in jobs:
        table, path = job.relative.split("/", 1)
        there = committed[table].get(path)
        if there is None:
            to_send.append(job)
        elif there != job.size:
            raise CopyError(
                f"{dest.table(table)}/{path} is committed at the destination with {there} bytes, the "
                f"source's has {job.size}: the destination holds another file of the same name"
            )
    return CopyPlan(source, dest, source_store, dest_store, pin, rows, jobs, opening, to_send)


def commit_copy(plan: CopyPlan, done: dict[str, DoneFile], dest_catalog: str | None) -> dict[str, int]:
    """Commit a plan whose files are all verified (`done`), in the lake's order: the steps and
    video files, the annotations and deletions, the episodes rows (the commit markers), the
    catalog, and the pin LAST after its rows were read back with its content hash. Returns the
    rows committed per table."""
    from pi_format.errors import LakeError
    from pi_format.lake import PinStore, WrittenFile, commit_actions

    source, dest, tables, pin = plan.source, plan.dest, plan.dest_tables(), plan.pin
    for table in _FILE_TABLES:
        adds = [
            WrittenFile(j.relative.split("/", 1)[1], f.size, f.num_rows, f.stats_json)
            for j in plan.to_send
            if j.relative.startswith(f"{table}/")
            for f in (done[j.relative],)
        ]
        if adds:
            commit_actions(tables[table], table, adds=adds, operation="copy")
    writer_id = f"copy-{pin.name}"
    rows_committed: dict[str, int] = {}
    for table in ("annotations", "deletions"):
        extra = extra_rows(source, dest, table, pin)
        if extra.num_rows:
            commit_rows(dest, tables, table, extra, writer_id=writer_id)
        rows_committed[table] = extra.num_rows
    new = missing_pairs(dest, plan.rows)
    if new.num_rows:
        commit_rows(dest, tables, "episodes", new, writer_id=writer_id)
    rows_committed["episodes"] = new.num_rows
    source_rows(dest, pin, hash_only=True)  # read back at the destination: every pair, the content hash
    if dest_catalog:
        _record_catalog(dest, dest_catalog, pin.episode_ids)
    try:
        PinStore(dest).create(replace(pin, lake_root=dest.root))  # LAST
    except LakeError as err:
        raise CopyError(f"the destination {dest.root}: {err}") from err
    return rows_committed


def copy_dataset(
    source_root: str,
    name: str,
    dest_root: str,
    *,
    options: CopyOptions | None = None,
    dest_catalog: str | None = None,
    progress_out: TextIO | None = None,
    show_progress: bool = True,
) -> CopyReport:
    """Copy dataset pin `name` of the lake at `source_root` into the lake at `dest_root` (made
    when missing, added to when not), verified, resumable, the pin committed last (see the module).

    Args:
        source_root: the source lake (a local path or s3://bucket/prefix).
        name: the pin (`pilake dataset list`).
        dest_root: the destination lake (a local path or s3://bucket/prefix).
        options: transfers in flight and part size (`CopyOptions`).
        dest_catalog: the destination's catalog (a chdb path or http(s) URL) to bring up to date
            with the copied episodes; None leaves it (`pilake catalog rebuild` there later).
        progress_out: where the progress line goes (stderr by default).
        show_progress: False for no progress line.

    Returns:
        A `CopyReport`.

    Raises:
        ValueError: a bad pin name or options.
        CopyError: an unknown pin, overlapping lakes, a source that is not intact, a file that
            fails its checks twice (named), or a pin of the same name at the destination with
            other rows.

    Example:
        >>> copy_dataset("/data/lake", "pick-v3", "s3://other-region/lake").files_sent
        412
    """
    started = time.perf_counter()
    options = options or CopyOptions()
    plan = plan_copy(source_root, name, dest_root)
    source_store, dest_store, to_send = plan.source_store, plan.dest_store, plan.to_send
    manifest = CopyManifest.load(dest_store, name)
    manifest.flush_s = options.manifest_flush_s
    bar = None
    if show_progress:
        bar = Progress(f"copy {name}", total=sum(j.size for j in to_send), out=progress_out)
    transfers = Transfers(
        source_store,
        dest_store,
        manifest,
        bar,
        workers=options.workers,
        part_bytes=options.part_mib * 2**20,
        readback=options.readback,
        digest=options.digest,
    )
    with plan.tables_refusal_first():
        done = transfers.run(to_send)
    if bar is not None:
        bar.close()

    rows_committed = commit_copy(plan, done, dest_catalog)
    counts = transfers.counts
    return CopyReport(
        pin=name,
        dest=plan.dest.root,
        content_hash=plan.pin.content_hash,
        episodes=len(plan.pin.episode_ids),
        files=len(plan.jobs),
        files_sent=counts.sent,
        files_already_there=len(plan.jobs) - counts.sent,
        bytes_sent=counts.bytes_sent,
        files_refetched=counts.refetched,
        rows_committed=rows_committed,
        seconds=round(time.perf_counter() - started, 3),
    )


def _record_catalog(dest: LakeLayout, catalog: str, episode_ids: Sequence[str]) -> None:
    """Index the copied episodes that are visible at the destination in its catalog."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from pi_catalog import Catalog
    from pi_format.lake import latest_commits, read_deleted_ids

    table = DeltaTable(dest.episodes)
    rows = table.to_pyarrow_table()
    rows = rows.filter(
        pc.is_in(rows.column("episode_id"), value_set=pa.array(list(episode_ids), pa.string()))
    )
    visible = latest_commits(rows, read_deleted_ids(dest))
    index = Catalog(catalog)
    try:
        index.record_episodes(visible, episodes_version=int(table.version()))
    finally:
        index.close()
