"""`pilake repair`: bring back the episodes a scrub (`pilake verify`) found damaged.

For each damaged attempt (a `VerifyReport`'s `corrupt_episodes`):

* its `steps`, `video` or `episodes` rows are damaged and it is the visible attempt: the episode
  is rebuilt from `raw` (read with page CRCs checked, each message's wire CRC checked: the raw
  bytes prove themselves intact) and featurized again as a new attempt through the backfill's
  rebuild (`pi_jobs.backfill._rebuild`, the featurizer the damaged attempt was made with),
  committed by `LakeWriter` superseding exactly the damaged attempt (`replacing`), and recorded
  in the catalog;
* `raw` is damaged too (or does not assemble): the episode cannot be rebuilt, so it is kept
  aside: deleted from every new selection (`pi_jobs.maintenance.deletion`, reason given);
* a damaged attempt that is not the visible one (a pin still names it) is recorded only;
* damaged `raw` rows of an intact attempt are reported: nothing to rebuild, the training rows
  are intact.

Every damaged attempt handled gets a quarantine row (reason `corrupt`, the details say where and
what was done), so `pilake dataset show` reports it for the pins that name it. An `episodes`
file with a damaged page is removed from the table once every episode it named is handled (its
markers can no longer be trusted; the repaired attempts carry new ones). A second run finds the
episodes already repaired (their visible attempt is no longer the damaged one) and does nothing.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pi_format import QUARANTINE_SCHEMA, LakeLayout, QuarantineReason

from pi_jobs.integrity._relog import remove_unreadable_markers, repair_logs
from pi_jobs.integrity.verify import VerifyReport

log = logging.getLogger("pi_jobs.integrity")

_TRAINING_TABLES = ("steps", "video", "episodes")


@dataclass(frozen=True, slots=True)
class RepairConfig:
    """How `repair_lake` rebuilds.

    Args:
        catalog_path: the catalog the new attempts (and deletions) are recorded in; None: none
            (run `pilake catalog rebuild` afterwards).
        featurize: the FeaturizeConfig of the new attempts; None: the damaged attempt's own (its
            backfill featurizer's, or the stream job's video size and chunking from its marker).
        dry_run: say what would be done, change nothing.

    Example:
        >>> RepairConfig(catalog_path="/data/catalog")
    """

    catalog_path: str | None = None
    featurize: Any = None
    dry_run: bool = False


@dataclass(slots=True)
class RepairReport:
    """What `repair_lake` did, per damaged attempt."""

    repaired: list[dict[str, Any]] = field(default_factory=list)  # episode, damaged and new attempt
    files_rewritten: list[str] = field(default_factory=list)  # damaged steps/video files replaced
    kept_aside: list[dict[str, Any]] = field(default_factory=list)  # raw damaged too: deleted
    not_visible: list[dict[str, Any]] = field(default_factory=list)  # older attempts pins name
    raw_only: list[dict[str, Any]] = field(default_factory=list)  # damaged raw, intact rows
    already_done: list[str] = field(default_factory=list)
    unattributed: list[str] = field(default_factory=list)  # faults naming no episode
    files_removed: list[str] = field(default_factory=list)
    logs_repaired: list[str] = field(default_factory=list)  # Delta logs whose damaged head was set aside
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        """0: every damaged training row was rebuilt; 2: some could not be (kept aside)."""
        return 2 if self.kept_aside or self.unattributed else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "repaired": self.repaired,
            "kept_aside": self.kept_aside,
            "not_visible": self.not_visible,
            "raw_only": self.raw_only,
            "already_done": self.already_done,
            "unattributed": self.unattributed,
            "files_removed": self.files_removed,
            "files_rewritten": self.files_rewritten,
            "logs_repaired": self.logs_repaired,
            "seconds": round(self.seconds, 3),
        }

    def lines(self) -> list[str]:
        out = [
            f"  repaired {r['episode_id']}: damaged attempt {r['damaged_attempt']} -> new attempt "
            f"{r['new_attempt']} (re-featurized from raw, {r['featurizer'] or 'stream featurizer'})"
            for r in self.repaired
        ]
        out += [
            f"  kept aside {r['episode_id']} ({r['damaged_attempt']}): {r['why']}" for r in self.kept_aside
        ]
        out += [
            f"  recorded {r['episode_id']} attempt {r['damaged_attempt']}: not the visible attempt "
            f"(pins: {', '.join(r['pins']) or 'none'})"
            for r in self.not_visible
        ]
        out += [
            f"  raw rows of {r['episode_id']} damaged; its training rows are intact" for r in self.raw_only
        ]
        out += [f"  removed damaged episodes file {f}" for f in self.files_removed]
        out += [f"  rebuilt log: {line}" for line in self.logs_repaired]
        out += [f"  rewrote damaged file {f} without the damaged rows" for f in self.files_rewritten]
        out += [f"  cannot attribute: {u}" for u in self.unattributed]
        out.append(
            f"repair: {len(self.repaired)} repaired, {len(self.kept_aside)} kept aside, "
            f"{len(self.not_visible)} older attempts recorded, {len(self.already_done)} already done "
            f"in {self.seconds:.1f} s"
        )
        return out


# The marker columns a rebuild needs: read alone, so a damaged page of another column of the
# same markers (their statistics, say) does not hide them (pyarrow checks the pages it reads).
_MARKER_COLUMNS = [
    "episode_id", "attempt_id", "featurizer", "video_width", "video_height", "video_chunk_frames",
]  # fmt: skip


def _marker(layout: LakeLayout, episode_id: str, attempt_id: str) -> dict[str, Any] | None:
    """What the rebuild needs of the episodes row of (episode_id, attempt_id) (`_MARKER_COLUMNS`),
    read with page CRCs checked; when those pages are damaged too, the video size and chunking
    from the attempt's video rows (None when neither reads)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as pads
    from deltalake import DeltaTable
    from pi_format.lake import table_filesystem
    from pi_format.lake._commit import file_sizes

    checked = pads.ParquetFileFormat(
        default_fragment_scan_options=pads.ParquetFragmentScanOptions(page_checksum_verification=True)
    )
    where = (pc.field("episode_id") == episode_id) & (pc.field("attempt_id") == attempt_id)
    fs, base = table_filesystem(layout.episodes)
    for path in sorted(file_sizes(DeltaTable(layout.episodes))):
        try:
            rows = pads.dataset([f"{base}/{path}"], format=checked, filesystem=fs).to_table(
                columns=_MARKER_COLUMNS, filter=where
            )
        except Exception:  # those columns' pages are damaged in this file
            continue
        if rows.num_rows:
            return dict(rows.slice(0, 1).to_pylist()[0])
    try:
        video = (
            DeltaTable(layout.video)
            .to_pyarrow_dataset()
            .to_table(columns=["width", "height", "frame_count", "chunk_index"], filter=where)
        )
    except Exception:  # damaged too: the caller falls back to the defaults
        return None
    if not video.num_rows:
        return None
    first = video.filter(pc.equal(video.column("chunk_index"), 0))
    return {
        "featurizer": None,
        "video_width": int(video.column("width")[0].as_py()),
        "video_height": int(video.column("height")[0].as_py()),
        "video_chunk_frames": int(pc.max((first if first.num_rows else video).column("frame_count")).as_py()),
    }


def _featurizer_of(marker: dict[str, Any] | None, override: Any) -> tuple[Any, str | None]:
    """(FeaturizeConfig, featurizer tag) for the new attempt: the damaged attempt's own."""
    from pi_jobs.backfill.featurizers import FEATURIZERS
    from pi_jobs.stream.featurize import FeaturizeConfig

    tag = marker.get("featurizer") if marker else None
    if override is not None:
        return override, tag
    if tag:
        name, _, version = str(tag).partition("@")
        found = FEATURIZERS.get(name)
        if found is not None and str(found.version) == version:
            return found.config, tag
    if marker:
        config = FeaturizeConfig(
            video_width=int(marker["video_width"]),
            video_height=int(marker["video_height"]),
            chunk_frames=int(marker["video_chunk_frames"]),
        )
        return config, tag
    return FeaturizeConfig(), tag


def _quarantine_row(episode_id: str, attempt_id: str, details: str, raw: pa.Table | None) -> pa.Table:
    offsets = sorted(raw.column("kafka_offset").to_pylist()) if raw is not None and raw.num_rows else []
    partition = int(raw.column("kafka_partition")[0].as_py()) if raw is not None and raw.num_rows else -1
    pointer = f"raw: attempt_id={attempt_id} partition={partition} offsets={offsets[:1] + offsets[-1:]}"
    size = int(sum(len(m) for m in raw.column("message").to_pylist())) if raw is not None else 0
    return pa.Table.from_pylist(
        [
            {
                "quarantine_id": str(uuid.uuid4()),
                "episode_id": episode_id,
                "reason": QuarantineReason.CORRUPT.value,
                "details": details[:2000],
                "kafka_topic": "",
                "kafka_partition": partition,
                "kafka_offsets": offsets,
                "raw_pointer": pointer,
                "size_bytes": size,
                "attempt_id": attempt_id,
                "quarantined_at_ns": time.time_ns(),
            }
        ],
        schema=QUARANTINE_SCHEMA,
    )


def _places(entry: dict[str, Any]) -> str:
    return "; ".join(
        f"{p['table']} {p['file']} row group {p['row_group']} ({p['kind']})" for p in entry["places"]
    )


def repair_lake(
    layout: LakeLayout,
    report: VerifyReport,
    config: RepairConfig | None = None,
    *,
    say: Callable[[str], None] | None = None,
) -> RepairReport:
    """Repair what `report` (a scrub of this lake) found; see the module docstring.

    Example:
        >>> found = verify_lake(layout)
        >>> repair_lake(layout, found, RepairConfig(catalog_path="/data/catalog")).exit_code
        0
    """
    from pi_format.lake import LakeWriter, commit_actions, ensure_lake_tables

    from pi_jobs.backfill._raw_files import raw_files_of
    from pi_jobs.backfill._rebuild import read_raw_rows, rebuild_episode

    config = config or RepairConfig()
    tell = say or log.info
    started = time.monotonic()
    out = RepairReport()
    if report.lake_root != layout.root:
        raise ValueError(f"the verify report is of lake {report.lake_root}, not of {layout.root}")
    logs_done = set()
    if not config.dry_run:  # first: nothing opens a table whose log does not load
        out.logs_repaired = repair_logs(layout, report, tell)
        logs_done = {
            line.split(":", 1)[0] for line in out.logs_repaired if "left for an operator" not in line
        }
    out.unattributed = [
        f"{f.table}/{f.file}: {f.kind}: {f.detail}"
        for f in report.faults
        if not f.episodes and not (f.kind == "delta_log" and f.table in logs_done)
    ]
    raw_damaged = {p_ep for f in report.faults if f.table == "raw" for p_ep, _ in f.episodes}
    tables = ensure_lake_tables(layout) if not config.dry_run else {}
    if not config.dry_run:  # markers nobody can read leave first: the writer reads every marker file
        out.files_removed += remove_unreadable_markers(layout, report, tables)
    writer = LakeWriter(layout, writer_id=f"repair-{uuid.uuid4().hex[:8]}") if not config.dry_run else None
    handled: set[tuple[str, str]] = set()
    rebuild_ids = sorted(
        {e["episode_id"] for e in report.corrupt_episodes if {p["table"] for p in e["places"]} - {"raw"}}
    )
    try:
        raw_files = raw_files_of(layout, rebuild_ids)
    except Exception:  # a raw file's id column is damaged: look in every raw file
        from deltalake import DeltaTable
        from pi_format.lake._commit import file_sizes

        every = tuple(sorted(file_sizes(DeltaTable(layout.raw))))
        raw_files = {e: every for e in rebuild_ids}
    catalog: Any = None
    for entry in report.corrupt_episodes:
        episode_id, attempt_id = str(entry["episode_id"]), str(entry["attempt_id"])
        damaged_tables = {p["table"] for p in entry["places"]}
        summary = {"episode_id": episode_id, "damaged_attempt": attempt_id, "pins": list(entry["pins"])}
        if not damaged_tables & set(_TRAINING_TABLES):
            out.raw_only.append(summary)  # its training rows are intact: nothing to rebuild
            continue
        handled.add((episode_id, attempt_id))  # its training rows leave the damaged files
        vanished = bool(entry.get("vanished"))
        visible = writer.committed_attempt(episode_id) if writer is not None else attempt_id
        if vanished and writer is None:
            visible = None  # a dry run: it would be rebuilt
        only_lost = all(p["kind"] == "lost_commit" for p in entry["places"])
        if only_lost and visible is not None:  # a marker is there after all (a repaired log)
            out.already_done.append(episode_id)
            continue
        # no marker of any attempt (its commit lost, its markers' file removed above): a fresh commit
        fresh = visible is None
        if not fresh and visible != attempt_id:
            if not entry["visible"] and visible is not None:
                out.not_visible.append(summary)
                details = f"damaged: {_places(entry)}; not the visible attempt ({visible}), kept for its pins"
                _record(writer, episode_id, attempt_id, details, None)
            else:
                out.already_done.append(episode_id)
            handled.add((episode_id, attempt_id))
            continue
        marker = _marker(layout, episode_id, attempt_id)
        featurize_config, tag = _featurizer_of(marker, config.featurize)
        raw: pa.Table | None = None
        why = ""
        rebuilt = None
        files = raw_files.get(episode_id, ())
        raw_note = ""
        try:
            try:
                raw = read_raw_rows(layout.root, episode_id, files)
            except Exception as err:  # a raw page does not check (pyarrow's OSError): the messages may
                raw = read_raw_rows(layout.root, episode_id, files, verify_pages=False)
                raw_note = f" (raw page damaged: {err}; rebuilt from the messages whose wire CRCs check)"
            rebuilt = rebuild_episode(
                episode_id, attempt_id, raw, featurize_config=featurize_config, featurizer_tag=tag
            )
        except Exception as err:  # wire CRCs, missing chunks, unreadable raw
            damaged_raw = " (its raw rows are damaged too)" if episode_id in raw_damaged else ""
            why = f"raw cannot rebuild it{damaged_raw}: {type(err).__name__}: {err}"
        if config.dry_run:
            (out.repaired if rebuilt is not None else out.kept_aside).append(
                {**summary, "new_attempt": None, "featurizer": tag, "why": why}
            )
            continue
        assert writer is not None
        if rebuilt is not None:
            if fresh:
                result = writer.commit_episodes([rebuilt])
            else:
                result = writer.commit_episodes([rebuilt], supersede=True, replacing={episode_id: attempt_id})
            if episode_id in result.committed:
                new_attempt = rebuilt.attempt_id
                out.repaired.append({**summary, "new_attempt": new_attempt, "featurizer": tag})
                details = (
                    f"damaged: {_places(entry)}; repaired: re-featurized from raw as attempt "
                    f"{new_attempt}{raw_note}"
                )
                _record(writer, episode_id, attempt_id, details, raw)
                if config.catalog_path:
                    if catalog is None:
                        from pi_catalog import Catalog

                        catalog = Catalog(config.catalog_path)
                    catalog.record_episodes(result.episodes, episodes_version=result.version)
                tell(f"repair: {episode_id}: attempt {attempt_id} -> {new_attempt}")
            else:
                out.already_done.append(episode_id)
            handled.add((episode_id, attempt_id))
            continue
        _keep_aside(layout, writer, config, entry, why, raw)
        out.kept_aside.append({**summary, "why": why})
        handled.add((episode_id, attempt_id))
        tell(f"repair: {episode_id}: kept aside: {why}")
    if catalog is not None:
        catalog.close()
    if not config.dry_run:
        from pi_jobs.maintenance import maintenance_lock

        # the damaged files leave the lake as compaction and GC move rows: under their lock
        with maintenance_lock(layout, "repair"):
            _remove_damaged_markers(layout, report, handled, tables, out, commit_actions)
            _rewrite_damaged_files(layout, report, handled, out)
    out.seconds = time.monotonic() - started
    return out


def _record(writer: Any, episode_id: str, attempt_id: str, details: str, raw: pa.Table | None) -> None:
    """The quarantine row (reason `corrupt`) of one damaged attempt handled (None: a dry run)."""
    if writer is not None:
        writer.write_quarantine(_quarantine_row(episode_id, attempt_id, details, raw))


def _keep_aside(
    layout: LakeLayout,
    writer: Any,
    config: RepairConfig,
    entry: dict[str, Any],
    why: str,
    raw: pa.Table | None,
) -> None:
    """An episode that cannot be rebuilt leaves every new selection (a deletion with the reason)."""
    from pi_jobs.maintenance.deletion import delete_episodes

    episode_id, attempt_id = str(entry["episode_id"]), str(entry["attempt_id"])
    details = f"damaged: {_places(entry)}; {why}; deleted from new selections"
    _record(writer, episode_id, attempt_id, details, raw)
    delete_episodes(
        layout,
        [episode_id],
        reason=f"pilake repair: damaged beyond repair ({why})",
        selection=f"ids: {episode_id}",
        catalog=config.catalog_path,
    )


def _remove_damaged_markers(
    layout: LakeLayout,
    report: VerifyReport,
    handled: set[tuple[str, str]],
    tables: dict[str, Any],
    out: RepairReport,
    commit_actions: Any,
) -> None:
    """Remove each episodes file with a damaged page once every episode it names is handled."""
    from pi_format.lake._commit import file_sizes

    damaged: dict[str, set[tuple[str, str]]] = {}
    for fault in report.faults:
        if fault.table == "episodes" and fault.kind != "delta_log":
            damaged.setdefault(fault.file, set()).update(fault.episodes)
    if not damaged:
        return
    table = tables["episodes"]
    table.update_incremental()
    sizes = file_sizes(table)
    removes = [
        (path, sizes[path])
        for path, episodes in sorted(damaged.items())
        if path in sizes and episodes and episodes <= handled
    ]
    if removes:
        commit_actions(table, "episodes", removes=removes, operation="repair")
        out.files_removed += [p for p, _ in removes]


def _rewrite_damaged_files(
    layout: LakeLayout, report: VerifyReport, handled: set[tuple[str, str]], out: RepairReport
) -> None:
    """Rewrite the file groups holding a damaged steps or video file without the damaged
    attempts' rows (`pi_format.lake.rewrite`, as compaction does: every other row copied with
    its page CRCs checked), so the damaged bytes leave the lake and the next scrub is clean."""
    import pyarrow.compute as pc
    from pi_format.lake.file_groups import read_lake_files
    from pi_format.lake.rewrite import rewrite_groups

    damaged = {
        (f.table, f.file) for f in report.faults if f.table in ("steps", "video") and f.row_group is not None
    }
    if not damaged:
        return
    lake = read_lake_files(layout)
    groups = [
        g
        for g in lake.groups
        if {("steps", p) for p in g.steps_files} & damaged or {("video", p) for p in g.video_files} & damaged
    ]
    drop = pa.array(sorted(f"{e}\x1f{a}" for e, a in handled), pa.string())

    def keep(markers: pa.Table) -> pa.Array:
        keys = pc.binary_join_element_wise(markers.column("episode_id"), markers.column("attempt_id"), "\x1f")
        return pc.invert(pc.is_in(keys, value_set=drop))

    if groups:
        rewrite_groups(layout, groups, keep, writer_id="repair")
        out.files_rewritten += sorted(
            p
            for g in groups
            for t, files in (("steps", g.steps_files), ("video", g.video_files))
            for p in files
            if (t, p) in damaged
        )
