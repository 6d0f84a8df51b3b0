"""`pilake gc`: remove what nothing needs any more, and never what a pin or a quarantine row needs.

What goes (SPEC.md §7.10):
* episodes rows of attempts no one reads: superseded attempts (a backfill's newer attempt is
  visible) and deleted episodes (`pilake episodes delete`), unless a live dataset pin names the
  (episode_id, attempt_id); their steps and video rows with them;
* rows of attempts that never committed (a writer that died before its markers, a duplicate
  that lost the race): inside a file that also holds committed rows, by rewriting its file group;
  a whole file no marker names, by removing it from its table once it is older than
  `tombstones.IN_FLIGHT_GRACE_S` (a writer may be about to commit its markers);
* raw (bronze) rows of deleted episodes no pin holds, except attempts a quarantine row points to;
* annotations rows of deleted episodes no pin holds (`pi_format.lake.annotations`);
* data files no table version holds and no marker names, past the retention (`tombstones`);
* expired Delta log entries (`delta.logRetentionDuration`, 7 days; pins never need them).

A live training run (`live_runs`, `pi_jobs.maintenance.live_runs`) holds the rows it reads like
a pin, and every file removed since it started past the retention.

Rewrites go through `pi_format.lake.rewrite` (the commit order of §7.7), under the lake's
maintenance lock. `dry_run` plans the same and reports it without writing or deleting anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pi_format import LakeLayout
from pi_format.lake import PinStore, drop_episode_annotations, latest_commits, read_deleted_ids
from pi_format.lake.file_groups import FileGroup, LakeFiles, read_lake_files
from pi_format.lake.rewrite import rewrite_groups
from pi_format.lake.tombstones import IN_FLIGHT_GRACE_S

from pi_jobs.maintenance._gc_files import delete_unneeded_files, remove_orphan_files, rewrite_raw
from pi_jobs.maintenance._lock import maintenance_lock
from pi_jobs.maintenance.live_runs import RunHold, keep_removed_since_ms

log = logging.getLogger(__name__)

_SEP = "\x1f"


@dataclass(frozen=True, slots=True)
class GcConfig:
    """What `gc` may remove and when.

    Example:
        >>> GcConfig(retention_hours=0, dry_run=True)
    """

    # Files a table no longer holds are kept this long after their removal: a training run that
    # opened the lake before a compaction still reads the old files through the locators it
    # read at open. 24 h outlasts an epoch of any run that opened before; 0 frees space at once.
    retention_hours: float = 24.0
    dry_run: bool = False
    target_file_bytes: int = 128 * 1024 * 1024
    writer_id: str = "gc"

    def __post_init__(self) -> None:
        if self.retention_hours < 0:
            raise ValueError(f"retention_hours must be >= 0, got {self.retention_hours}")


@dataclass(slots=True)
class GcReport:
    """What `gc` removed (or, with dry_run, would remove)."""

    dry_run: bool
    markers_removed: dict[str, int] = field(default_factory=dict)  # reason -> episodes rows
    groups_rewritten: int = 0
    groups_with_uncommitted_rows: int = 0
    orphan_files: dict[str, int] = field(default_factory=dict)  # table -> never-committed files dropped
    raw_rows_removed: int = 0
    annotation_rows_removed: int = 0
    files_deleted: dict[str, int] = field(default_factory=dict)
    bytes_deleted: dict[str, int] = field(default_factory=dict)
    bytes_to_free_after_retention: int = 0
    held_by_pins: dict[str, list[str]] = field(default_factory=dict)  # pin -> deleted episodes it keeps
    held_by_runs: dict[str, list[str]] = field(default_factory=dict)  # live run -> episodes it keeps
    files_kept_for_runs: int = 0  # past the retention, removed since a live run started
    quarantined_raw_kept: int = 0
    seconds: float = 0.0

    def lines(self) -> list[str]:
        verb = "would remove" if self.dry_run else "removed"
        out = [
            f"gc: {verb} {sum(self.markers_removed.values())} episodes rows"
            + (
                " (" + ", ".join(f"{n} {why}" for why, n in sorted(self.markers_removed.items())) + ")"
                if self.markers_removed
                else ""
            ),
            f"gc: {'would rewrite' if self.dry_run else 'rewrote'} {self.groups_rewritten} file groups "
            f"({self.groups_with_uncommitted_rows} holding rows of attempts that never committed)",
            f"gc: {verb} {sum(self.orphan_files.values())} files no marker names "
            f"{self.orphan_files or ''}".rstrip(),
            f"gc: {verb} {self.raw_rows_removed} raw rows of deleted episodes",
            f"gc: {verb} {self.annotation_rows_removed} annotations rows of deleted episodes",
        ]
        for table in sorted(self.files_deleted):
            out.append(
                f"gc: {'would delete' if self.dry_run else 'deleted'} {self.files_deleted[table]} files of "
                f"{table} ({self.bytes_deleted.get(table, 0) / 1e6:.2f} MB)"
            )
        total = sum(self.bytes_deleted.values())
        out.append(
            f"gc: {'would free' if self.dry_run else 'freed'} {total / 1e6:.2f} MB in {self.seconds:.1f} s"
        )
        if self.bytes_to_free_after_retention:
            out.append(
                f"gc: {self.bytes_to_free_after_retention / 1e6:.2f} MB more once the retention has passed "
                "(files rewritten now)"
            )
        for pin, ids in sorted(self.held_by_pins.items()):
            out.append(
                f"gc: kept {len(ids)} deleted episodes that dataset pin {pin!r} holds (e.g. {ids[:3]}); "
                f"`pilake dataset delete {pin}` lets the next gc remove them"
            )
        for run, ids in sorted(self.held_by_runs.items()):
            out.append(
                f"gc: kept {len(ids)} episodes rows that live training run {run!r} reads (e.g. {ids[:3]}); "
                "the next gc after it ends may remove them"
            )
        if self.files_kept_for_runs:
            out.append(
                f"gc: kept {self.files_kept_for_runs} files past their retention: removed since a live "
                "training run started, its loader may read them"
            )
        if self.quarantined_raw_kept:
            out.append(
                f"gc: kept {self.quarantined_raw_kept} raw rows of deleted episodes that quarantine rows need"
            )
        return out


@dataclass(frozen=True, slots=True)
class GcPlan:
    """Which markers stay, which file groups are rewritten, what pins hold."""

    lake: LakeFiles
    live: pa.Array  # bool per lake.markers row
    reasons: dict[str, int]
    groups: tuple[FileGroup, ...]
    uncommitted_groups: int
    deleted_unpinned: frozenset[str]
    held_by_pins: dict[str, list[str]]
    held_by_runs: dict[str, list[str]] = field(default_factory=dict)


def plan_gc(layout: LakeLayout, live_runs: Sequence[RunHold] = ()) -> GcPlan:
    """Decide what GC removes (reads the markers, the deletions and the pins; writes nothing);
    `live_runs` hold the rows they read as pins do."""
    lake = read_lake_files(layout)
    deleted = read_deleted_ids(layout)
    pins = PinStore(layout).all_pins()
    pin_keys = {
        f"{e}{_SEP}{a}" for pin in pins for e, a in zip(pin.episode_ids, pin.attempt_ids, strict=True)
    }
    run_keys = {
        r.run_id: {f"{e}{_SEP}{a}" for e, a in zip(r.episode_ids, r.attempt_ids, strict=True)}
        for r in live_runs
    }
    pinned = pin_keys | {k for keys in run_keys.values() for k in keys}
    deleted_set = set(deleted.to_pylist())
    held = {pin.name: sorted(e for e in pin.episode_ids if e in deleted_set) for pin in pins}
    held = {name: ids for name, ids in held.items() if ids}
    markers = lake.markers
    keys = _keys(markers)
    visible = latest_commits(markers.select(["episode_id", "attempt_id", "committed_at_ns"]), deleted)
    live_keys = pa.array(sorted({*_keys(visible).to_pylist(), *pinned}), pa.string())
    live = pc.is_in(keys, value_set=live_keys) if markers.num_rows else pa.array([], pa.bool_())
    dead = markers.filter(pc.invert(live))
    # what only a live run keeps: rows that would go without it (deleted or superseded)
    visible_keys = set(_keys(visible).to_pylist())
    present = set(keys.to_pylist())
    held_by_runs = {
        run: sorted(k.split(_SEP)[0] for k in mine - visible_keys - pin_keys if k in present)
        for run, mine in run_keys.items()
    }
    reasons: dict[str, int] = {}
    for eid in dead.column("episode_id").to_pylist():
        why = "deleted" if eid in deleted_set else "superseded"
        reasons[why] = reasons.get(why, 0) + 1
    dead_files = set(dead.column("file").to_pylist())
    # steps rows the markers (live or not) account for, per steps file: fewer than the file
    # holds means rows of attempts that never committed
    accounted: dict[str, int] = {}
    for path, count in zip(
        markers.column("steps_file").to_pylist(),
        markers.column("step_count").to_pylist(),
        strict=True,
    ):
        if path:
            accounted[path] = accounted.get(path, 0) + int(count)
    no_locator = set(
        markers.filter(
            pc.and_(pc.is_null(markers.column("steps_file")), pc.greater(markers.column("step_count"), 0))
        )
        .column("file")
        .to_pylist()
    )
    chosen: list[FileGroup] = []
    uncommitted = 0
    for group in lake.groups:
        if set(group.episodes_files) & no_locator:
            continue  # written before locators: left as it is
        extra = any(lake.rows["steps"].get(p, -1) > accounted.get(p, 0) for p in group.steps_files)
        if extra or set(group.episodes_files) & dead_files:
            chosen.append(group)
            uncommitted += int(extra)
    pinned_episodes = {k.split(_SEP)[0] for k in pinned}
    return GcPlan(
        lake=lake,
        live=live,
        reasons=reasons,
        groups=tuple(chosen),
        uncommitted_groups=uncommitted,
        deleted_unpinned=frozenset(deleted_set - pinned_episodes),
        held_by_pins=held,
        held_by_runs={run: ids for run, ids in held_by_runs.items() if ids},
    )


def _keys(rows: pa.Table) -> pa.Array:
    keys = pc.binary_join_element_wise(rows.column("episode_id"), rows.column("attempt_id"), _SEP)
    return keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys


def gc(
    layout: LakeLayout,
    config: GcConfig | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    live_runs: Sequence[RunHold] = (),
) -> GcReport:
    """Plan and (unless `config.dry_run`) carry out a GC of the lake; see the module docstring.
    `live_runs` (`live_runs.live_run_holds`) keep what the training runs now going read.

    Example:
        >>> print("\\n".join(gc(LakeLayout("/data/lake"), GcConfig(dry_run=True)).lines()))
    """
    config = config or GcConfig()
    say = progress or log.info
    started = time.monotonic()
    retention_s = config.retention_hours * 3600.0
    report = GcReport(dry_run=config.dry_run)
    with maintenance_lock(layout, "gc") as lock:
        plan = plan_gc(layout, live_runs)
        report.held_by_runs = plan.held_by_runs
        report.markers_removed = dict(plan.reasons)
        report.groups_rewritten = len(plan.groups)
        report.groups_with_uncommitted_rows = plan.uncommitted_groups
        report.held_by_pins = plan.held_by_pins
        say(
            f"gc: {plan.lake.markers.num_rows} episodes rows, {sum(plan.reasons.values())} to drop; "
            f"{len(plan.groups)} of {len(plan.lake.groups)} file groups to rewrite"
        )
        live_keys = pa.array(sorted(set(_keys(plan.lake.markers.filter(plan.live)).to_pylist())), pa.string())
        freed = sum(g.size_bytes for g in plan.groups) + sum(
            plan.lake.sizes["episodes"].get(p, 0) for g in plan.groups for p in g.episodes_files
        )
        if not config.dry_run and plan.groups:
            rewrite_groups(
                layout,
                plan.groups,
                lambda markers: pc.is_in(_keys(markers), value_set=live_keys),
                target_file_bytes=config.target_file_bytes,
                writer_id=config.writer_id,
                progress=lambda done, total: say(f"gc: rewrote {done}/{total} file groups"),
            )
        # deleting is irreversible: not once an object-store lease was lost (another GC may run)
        lock.ensure_held()
        report.orphan_files = remove_orphan_files(
            layout, plan.lake, max(retention_s, IN_FLIGHT_GRACE_S), dry_run=config.dry_run
        )
        report.raw_rows_removed, report.quarantined_raw_kept = rewrite_raw(
            layout, plan.deleted_unpinned, dry_run=config.dry_run, writer_id=config.writer_id
        )
        # a deleted episode's annotations go with its bytes (pi_format.lake.annotations)
        report.annotation_rows_removed = drop_episode_annotations(
            layout, plan.deleted_unpinned, dry_run=config.dry_run, writer_id=config.writer_id
        )
        lock.ensure_held()
        deleted_files, deleted_bytes, report.files_kept_for_runs = delete_unneeded_files(
            layout,
            retention_s,
            dry_run=config.dry_run,
            keep_removed_since_ms=keep_removed_since_ms(live_runs),
        )
        report.files_deleted, report.bytes_deleted = deleted_files, deleted_bytes
        if retention_s > 0 or config.dry_run:
            report.bytes_to_free_after_retention = freed
        if not config.dry_run:
            _cleanup_logs(layout)
    report.seconds = time.monotonic() - started
    return report


def _cleanup_logs(layout: LakeLayout) -> None:
    """Expired log entries (older than delta.logRetentionDuration and a checkpoint)."""
    from deltalake import DeltaTable
    from pi_format import TABLE_SCHEMAS

    for name in TABLE_SCHEMAS:
        try:
            table = DeltaTable(layout.table(name))
        except Exception:  # a table this lake does not have yet
            continue
        table.cleanup_metadata()
