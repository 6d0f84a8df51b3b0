"""`pilake compact`: merge the small files streaming leaves into large ones.

The stream job commits one small file per table per group commit (a few dozen episodes), so a
lake of 100,000 episodes holds thousands of files per table: every open lists and reads more of
them, every checkpoint rewrites more add actions, and host indexes multiply. Compaction merges
them:

* `steps`, `video`, `episodes`: the markers' locators name files and row groups, so these are
  rewritten together through the lake-table protocol (`pi_format.lake.rewrite`): small file
  groups are merged into groups of ~`target_file_bytes`, each episode's rows contiguous and the
  episodes sorted by id (locality for block-shuffled reads), the markers re-pointed, the commit
  order of SPEC.md §7.7 kept, every row kept (superseded and deleted attempts too: what goes is
  GC's call, not compaction's).
* `raw`, `quarantine`, `quarantine_releases`, `deletions`: nothing points into their files, so
  their small files are bin-packed: read (every page's CRC checked) and written again by the
  lake's own writer (`pi_format.lake.write_file`, page CRCs on), then committed as adds and
  removes. Not delta-rs's `optimize.compact`: its Parquet writer (parquet-rs) writes no page
  CRCs, so bin-packed files would lose the checksums (architecture decision 10).

Memory is bounded by `target_file_bytes` (one output group in memory at a time); the stream job
may keep committing: its appends never conflict with a rewrite's removes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pi_format import LakeLayout
from pi_format.lake.file_groups import FileGroup, read_lake_files
from pi_format.lake.rewrite import rewrite_groups
from pi_format.lake.rewrite_markers import merge_markers

from pi_jobs.maintenance._lock import maintenance_lock

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

# Tables without locators into them: delta-rs's bin-packing compaction is enough.
BINPACKED_TABLES = ("raw", "quarantine", "quarantine_releases", "deletions", "annotations")


@dataclass(frozen=True, slots=True)
class CompactConfig:
    """How `compact` chooses and sizes files.

    Example:
        >>> CompactConfig(target_file_bytes=256 << 20)
    """

    # ~128 MiB output groups: large enough that a 100,000-episode lake of 224 px video (~1.5 MB
    # an episode) has ~1,200 files instead of ~3,000 per table, small enough that one output
    # group (the memory bound) fits a worker beside the stream job.
    target_file_bytes: int = 128 * 1024 * 1024
    # A file group (one group commit's files, or an earlier compaction's) is "small" below this;
    # groups at or above it are left alone, so a second compaction costs only what streamed in since.
    small_group_bytes: int = 32 * 1024 * 1024
    binpack_tables: tuple[str, ...] = BINPACKED_TABLES
    writer_id: str = "compact"
    # Merge only the small groups' episodes files (`pi_format.lake.rewrite_markers`), leaving
    # steps and video files where they are: minutes instead of hours for a lake grown without
    # hourly compaction (its open pays per episodes file); a later full compaction still merges
    # the steps and video files. Off by default: a full compaction leaves fewer files of every table.
    episodes_only: bool = False

    def __post_init__(self) -> None:
        if self.target_file_bytes < 1:
            raise ValueError(f"target_file_bytes must be >= 1, got {self.target_file_bytes}")
        if not 0 < self.small_group_bytes <= self.target_file_bytes:
            raise ValueError(
                f"small_group_bytes must be in (0, target_file_bytes={self.target_file_bytes}], "
                f"got {self.small_group_bytes}"
            )
        unknown = set(self.binpack_tables) - set(BINPACKED_TABLES)
        if unknown:
            raise ValueError(f"binpack_tables must be among {BINPACKED_TABLES}, got {sorted(unknown)}")


@dataclass(slots=True)
class CompactReport:
    """What `compact` did: file counts per table before and after, bytes rewritten, time."""

    files_before: dict[str, int] = field(default_factory=dict)
    files_after: dict[str, int] = field(default_factory=dict)
    groups_merged: int = 0
    episodes_rows_moved: int = 0
    bytes_rewritten: int = 0
    skipped_legacy_groups: int = 0
    seconds: float = 0.0

    def lines(self) -> list[str]:
        out = [
            f"{name:<20} files {self.files_before.get(name, 0):>6} -> {self.files_after.get(name, 0):>6}"
            for name in self.files_before
        ]
        out.append(
            f"merged {self.groups_merged} file groups ({self.episodes_rows_moved} episodes rows, "
            f"{self.bytes_rewritten / 1e6:.1f} MB rewritten) in {self.seconds:.1f} s"
        )
        if self.skipped_legacy_groups:
            out.append(f"left {self.skipped_legacy_groups} file groups written before locators as they are")
        return out


def _file_counts(layout: LakeLayout, names: tuple[str, ...]) -> dict[str, int]:
    from deltalake import DeltaTable

    out = {}
    for name in names:
        try:
            out[name] = len(DeltaTable(layout.table(name)).file_uris())
        except Exception:  # a lake older than this table (annotations): no files
            out[name] = 0
    return out


def legacy_files(markers: pa.Table) -> set[str]:
    """Episodes files of markers written before steps locators (steps_file null, steps > 0):
    their groups are left alone, since their rows cannot be moved with a locator."""
    import pyarrow.compute as pc

    if not markers.num_rows:
        return set()
    no_locator = pc.and_(
        pc.is_null(markers.column("steps_file")), pc.greater(markers.column("step_count"), 0)
    )
    return set(markers.filter(no_locator).column("file").to_pylist())


def fragmented(group: FileGroup) -> bool:
    """A group of more than one steps or video file: what a marker merge (`episodes_only`)
    leaves; a full rewrite merges it into one file per table whatever its size."""
    return len(group.steps_files) > 1 or len(group.video_files) > 1


def choose_groups(groups: tuple[FileGroup, ...], legacy: set[str], config: CompactConfig) -> list[FileGroup]:
    """The file groups worth merging, written with locators: those below `small_group_bytes`
    (at least two of them: one small group merged alone gains nothing) and, for a full
    compaction, the fragmented ones (`fragmented`: a marker merge's groups)."""
    chosen = [
        g
        for g in groups
        if (g.size_bytes < config.small_group_bytes or (not config.episodes_only and fragmented(g)))
        and not (set(g.episodes_files) & legacy)
    ]
    worth = len(chosen) >= 2 or (not config.episodes_only and any(fragmented(g) for g in chosen))
    return chosen if worth else []


def compact(
    layout: LakeLayout,
    config: CompactConfig | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> CompactReport:
    """Merge the lake's small files (see the module docstring).

    Example:
        >>> compact(LakeLayout("/data/lake")).files_after["steps"]
        3
    """
    config = config or CompactConfig()
    say = progress or log.info
    started = time.monotonic()
    names = ("steps", "video", "episodes", *config.binpack_tables)
    report = CompactReport(files_before=_file_counts(layout, names))
    with maintenance_lock(layout, "compact"):
        lake = read_lake_files(layout)
        legacy = legacy_files(lake.markers)
        chosen = choose_groups(lake.groups, legacy, config)
        report.skipped_legacy_groups = sum(1 for g in lake.groups if set(g.episodes_files) & legacy)
        say(
            f"compact: {len(lake.groups)} file groups, {len(chosen)} small ones to merge "
            f"({sum(g.size_bytes for g in chosen) / 1e6:.1f} MB, {sum(g.markers for g in chosen)} markers)"
        )
        last = [time.monotonic()]

        def tick(done: int, total: int) -> None:
            if time.monotonic() - last[0] >= 2.0 or done == total:
                last[0] = time.monotonic()
                say(f"compact: {done}/{total} file groups read and rewritten")

        rewrite = merge_markers if config.episodes_only else rewrite_groups
        result = rewrite(
            layout,
            chosen,
            target_file_bytes=config.target_file_bytes,
            writer_id=config.writer_id,
            progress=tick,
        )
        report.groups_merged = result.groups
        report.episodes_rows_moved = result.markers_kept
        report.bytes_rewritten = sum(result.bytes_added.values())
        for name in config.binpack_tables:
            _binpack(layout, name, config.target_file_bytes, say)
    report.files_after = _file_counts(layout, names)
    report.seconds = time.monotonic() - started
    return report


def _binpack(layout: LakeLayout, name: str, target_file_bytes: int, say: Callable[[str], None]) -> None:
    """Merge the table's files below `target_file_bytes` into files of about that size (in
    path order), each merge one commit of its adds and removes (`data_change=false`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from pi_format import TABLE_SCHEMAS
    from pi_format.lake import commit_actions, table_filesystem, write_file
    from pi_format.lake._commit import file_sizes
    from pi_format.lake.tables import row_group_sizes

    try:
        table = DeltaTable(layout.table(name))
    except Exception:  # a lake older than this table: nothing to compact
        return
    small = sorted((p, s) for p, s in file_sizes(table).items() if s < target_file_bytes)
    bins: list[list[tuple[str, int]]] = [[]]
    for path, size in small:
        if bins[-1] and sum(s for _, s in bins[-1]) + size > target_file_bytes:
            bins.append([])
        bins[-1].append((path, size))
    fs, base = table_filesystem(layout.table(name))
    schema = TABLE_SCHEMAS[name]
    removed = added = 0
    for group in (b for b in bins if len(b) >= 2):
        parts = []
        for path, _ in group:
            with fs.open_input_file(f"{base}/{path}") as handle:
                rows = pq.ParquetFile(handle, page_checksum_verification=True).read()
            for f in schema:  # a file older than a nullable column
                if f.name not in rows.column_names:
                    rows = rows.append_column(f, pa.nulls(rows.num_rows, f.type))
            parts.append(rows.select(schema.names).cast(schema))
        merged = pa.concat_tables(parts)
        if merged.num_rows == 0:  # files without rows: removed, nothing to write
            commit_actions(table, name, removes=group, data_change=False, operation="compact")
            removed += len(group)
            continue
        written = write_file(
            layout.table(name),
            merged,
            row_group_sizes(name, merged.num_rows),
            writer_id="compact",
            compression="zstd",
        )
        commit_actions(table, name, adds=[written], removes=group, data_change=False, operation="compact")
        removed, added = removed + len(group), added + 1
    if removed:
        say(f"compact: {name}: {removed} files -> {added}")
