"""`pilake repair`'s part for damaged Delta logs and unreadable marker files (architecture
decision 10: damage costs what it holds, never the lake).

* A log whose newest commits do not load (`delta_log` fault: a commit that is not valid JSON):
  those commits are moved aside to `<table>/_delta_log_damaged/` (kept for an operator, never
  deleted), so the table loads at its newest good version, and the data files only they added
  are added again in a new commit: every file of the table directory the log no longer names
  that reads whole with its page CRCs checked and holds rows a marker points at (steps, video
  through the markers' locators; an episodes commit's markers are not made visible again: its
  episodes are found vanished and rebuilt from raw). A damaged commit in the middle of the log (a later one
  loads) is not moved: it is reported and left for an operator.
* An episodes file whose footer does not parse, or that is gone (`footer`, `missing`,
  `decode` faults): its markers cannot be read by anyone, so the file is removed from the
  episodes table before the rebuild (the writer reads every marker file when it starts); the
  episodes it held (named by verify from the steps rows no readable marker covers) are rebuilt
  from raw as new attempts.
"""

from __future__ import annotations

from typing import Any

from pi_format import LakeLayout

from pi_jobs.integrity._scan import KIND_DECODE, KIND_FOOTER, KIND_LOG, KIND_MISSING
from pi_jobs.integrity.verify import VerifyReport

_UNREADABLE_MARKERS = (KIND_FOOTER, KIND_MISSING, KIND_DECODE)
_DAMAGED_DIR = "_delta_log_damaged"
# How far below its newest version a log is searched for one that loads.
_MAX_FALLBACK = 64


def repair_logs(layout: LakeLayout, report: VerifyReport, say: Any) -> list[str]:
    """Repair the logs of `report`'s `delta_log` faults whose damage is at their head; returns
    what was done, one line per table."""
    done = []
    for table in sorted({f.table for f in report.faults if f.kind == KIND_LOG}):
        line = _repair_log(layout, table)
        say(f"repair: {line}")
        done.append(line)
    return done


def _repair_log(layout: LakeLayout, table: str) -> str:
    from deltalake import DeltaTable
    from pi_format.lake import table_filesystem

    uri = layout.table(table)
    fs, base = table_filesystem(uri)
    from pyarrow import fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(f"{base}/_delta_log"))
    commits = sorted(
        int(i.base_name[:-5]) for i in infos if i.base_name.endswith(".json") and i.base_name[:-5].isdigit()
    )
    if not commits:
        return f"{table}: no commits in its log; nothing to rebuild from"
    newest = commits[-1]
    try:
        DeltaTable(uri)
        return f"{table}: its log loads now; nothing to do"
    except Exception:  # deltalake's errors: it still does not load
        pass
    good = None
    for version in range(newest - 1, max(-1, newest - 1 - _MAX_FALLBACK), -1):
        try:
            DeltaTable(uri, version=version)
        except Exception:  # deltalake's errors: this version does not load either
            continue
        good = version
        break
    if good is None:
        return (
            f"{table}: no version of its log within {_MAX_FALLBACK} of the newest loads; left for an operator"
        )
    fs.create_dir(f"{base}/{_DAMAGED_DIR}", recursive=True)
    moved = []
    for version in (v for v in commits if v > good):
        name = f"{version:020d}.json"
        fs.move(f"{base}/_delta_log/{name}", f"{base}/{_DAMAGED_DIR}/{name}")
        moved.append(version)
    readded = _readd_orphans(layout, table)
    return (
        f"{table}: commits {moved} moved to {_DAMAGED_DIR}/ (the table loads at version {good}); "
        f"{len(readded)} data file(s) only they named added again"
    )


def _readd_orphans(layout: LakeLayout, table: str) -> list[str]:
    """Add back the table's data files its log no longer names, that read whole with page CRCs
    checked and that a marker points at (steps, video) or that hold markers (episodes)."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from pi_format.lake import WrittenFile, commit_actions, table_filesystem
    from pi_format.lake._commit import file_sizes
    from pi_format.lake._files import _delta_stats
    from pyarrow import fs as pafs

    uri = layout.table(table)
    delta = DeltaTable(uri)
    named = set(file_sizes(delta))
    fs, base = table_filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(base))
    orphans = sorted(
        i.base_name for i in infos if i.base_name.endswith(".parquet") and i.base_name not in named
    )
    if table not in ("steps", "video"):
        return []  # episodes: a lost marker's episode is rebuilt from raw (never an orphan made visible)
    pointed = _pointed_files(layout, table)
    adds = []
    for name in orphans:
        if name not in pointed:
            continue  # rows no marker points at: an uncommitted attempt's, GC's to remove
        try:
            with fs.open_input_file(f"{base}/{name}") as handle:
                rows = pq.ParquetFile(handle, page_checksum_verification=True).read()
        except Exception:  # damaged too: not added (its episodes are rebuilt from raw)
            continue
        size = fs.get_file_info(f"{base}/{name}").size
        adds.append(
            WrittenFile(
                relative_path=name,
                size_bytes=int(size),
                num_rows=rows.num_rows,
                stats_json=_delta_stats(rows),
            )
        )
    if adds:
        commit_actions(delta, table, adds=adds, operation="repair")
    return [a.relative_path for a in adds]


def _pointed_files(layout: LakeLayout, table: str) -> set[str]:
    """The file names the markers' locators point at in `table` (steps or video)."""
    from deltalake import DeltaTable

    column = f"{table}_file"
    try:
        markers = DeltaTable(layout.episodes).to_pyarrow_dataset()
        if column not in markers.schema.names:
            return set()
        values = markers.to_table(columns=[column]).column(column).to_pylist()
    except Exception:  # damaged markers: nothing is vouched for
        return set()
    return {str(v).rsplit("/", 1)[-1] for v in values if v}


def remove_unreadable_markers(layout: LakeLayout, report: VerifyReport, tables: dict[str, Any]) -> list[str]:
    """Remove from the episodes table each file whose markers nobody can read (footer, missing,
    decode faults); returns their paths."""
    from pi_format.lake import commit_actions
    from pi_format.lake._commit import file_sizes

    paths = sorted({f.file for f in report.faults if f.table == "episodes" and f.kind in _UNREADABLE_MARKERS})
    if not paths:
        return []
    table = tables["episodes"]
    table.update_incremental()
    sizes = file_sizes(table)
    removes = [(p, sizes[p]) for p in paths if p in sizes]
    if removes:
        commit_actions(table, "episodes", removes=removes, operation="repair")
    return [p for p, _ in removes]
