"""Which episodes a scrub's faults hold (`pilake verify`'s report): the markers the lake can
still vouch for, and per damaged (episode_id, attempt_id) its places, whether it is the visible
attempt, whether its marker vanished, and the dataset pins that name it."""

from __future__ import annotations

from typing import Any

from pi_format import LakeLayout

from pi_jobs.integrity._scan import Fault, FileResult


def read_markers(layout: LakeLayout, results: list[FileResult]) -> Any:
    """The episodes rows the lake can still vouch for: every episodes file except damaged ones,
    read with page CRCs checked (the commit columns and the locator's file names)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pi_format.lake import table_filesystem

    from pi_jobs.integrity.verify import _table_files

    files, _ = _table_files(layout, "episodes")
    damaged = {r.file for r in results if r.table == "episodes" and r.status == "corrupt"}
    fs, base = table_filesystem(layout.episodes)
    columns = ["episode_id", "attempt_id", "committed_at_ns", "steps_file", "video_file"]
    parts = []
    for path in sorted(set(files or {}) - damaged):
        try:
            with fs.open_input_file(f"{base}/{path}") as handle:
                parquet = pq.ParquetFile(handle, page_checksum_verification=True)
                have = [c for c in columns if c in parquet.schema_arrow.names]
                rows = parquet.read(columns=have)
        except Exception:  # damaged in a way the scrub did not select (a sample): skip it
            continue
        for name in columns:
            if name not in rows.column_names:
                rows = rows.append_column(name, pa.nulls(rows.num_rows, pa.string()))
        parts.append(rows.select(columns))
    if not parts:
        return None
    return pa.concat_tables(parts, promote_options="permissive")


def corrupt_episodes(layout: LakeLayout, faults: list[Fault], markers: Any) -> list[dict[str, Any]]:
    """Per damaged (episode_id, attempt_id): its places, whether it is the visible attempt, and
    the dataset pins that name it. A fault whose row group's ids are damaged too is given the
    episodes whose locators name its file."""
    from pi_format.lake import PinStore, latest_commits, read_deleted_ids

    if not faults:
        return []
    by_file: dict[tuple[str, str], set[tuple[str, str]]] = {}
    visible: set[tuple[str, str]] = set()
    if markers is not None and markers.num_rows:
        pairs = list(
            zip(
                markers.column("episode_id").to_pylist(),
                markers.column("attempt_id").to_pylist(),
                strict=True,
            )
        )
        for table in ("steps", "video"):
            for pair, path in zip(pairs, markers.column(f"{table}_file").to_pylist(), strict=True):
                if path:
                    by_file.setdefault((table, str(path)), set()).add((str(pair[0]), str(pair[1])))
        shown = latest_commits(markers, read_deleted_ids(layout))
        visible = set(
            zip(shown.column("episode_id").to_pylist(), shown.column("attempt_id").to_pylist(), strict=True)
        )
    marked = {str(e) for e in markers.column("episode_id").to_pylist()} if markers is not None else set()
    pinned: dict[tuple[str, str], list[str]] = {}
    try:
        for pin in PinStore(layout).all_pins():
            for pair in zip(pin.episode_ids, pin.attempt_ids, strict=True):
                pinned.setdefault(pair, []).append(pin.name)
    except Exception:  # a damaged pins table is a fault of its own; the episodes are still named
        pass
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for fault in faults:
        episodes = fault.episodes or sorted(by_file.get((fault.table, fault.file), set()))
        if not fault.episodes and episodes:
            fault.episodes = list(episodes)
        for pair in episodes:
            entry = found.setdefault(
                pair,
                {
                    "episode_id": pair[0],
                    "attempt_id": pair[1],
                    "visible": pair in visible,
                    # no marker of any attempt: rebuilt from raw as a new one (repair)
                    "vanished": pair[0] not in marked,
                    "pins": sorted(pinned.get(pair, [])),
                    "places": [],
                },
            )
            entry["places"].append(
                {"table": fault.table, "file": fault.file, "kind": fault.kind, "row_group": fault.row_group}
            )
    return [found[k] for k in sorted(found)]
