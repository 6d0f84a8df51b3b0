"""File groups: how the lake's steps, video and episodes files hang together through the markers'
locators (SPEC.md §7.10), read from the current tables. Compaction and GC plan from these;
`pi_format.lake.rewrite` carries the plans out.

A file group is the episodes files and the steps and video files their markers' locators name,
closed under that relation: a group commit makes one (one file per table); a rewrite makes
larger ones. A steps or video file outside every group holds only rows no marker names.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pi_format.lake._bad_file import UNREADABLE, name_the_bad_file
from pi_format.lake._files import table_filesystem
from pi_format.lake.layout import LakeLayout
from pi_format.lake.tables import ensure_lake_tables

# Columns of the episodes table a plan reads for every marker (the full rows are read per batch).
PLAN_COLUMNS = ("episode_id", "attempt_id", "committed_at_ns", "step_count", "steps_file", "video_file")
# The tables a rewrite replaces files of, in the commit order of SPEC.md §7.7.
REWRITTEN_TABLES = ("steps", "video", "episodes")


@dataclass(frozen=True, slots=True)
class FileGroup:
    """Episodes files and the steps and video files their markers name (paths as in the log)."""

    episodes_files: tuple[str, ...]
    steps_files: tuple[str, ...]
    video_files: tuple[str, ...]
    size_bytes: int  # steps + video bytes
    markers: int  # marker rows in its episodes files


@dataclass(frozen=True, slots=True)
class LakeFiles:
    """The markers of the current episodes table (PLAN_COLUMNS plus `file`, the episodes file
    holding each) and the file groups they form; what compaction and GC plan from."""

    markers: pa.Table
    groups: tuple[FileGroup, ...]
    sizes: dict[str, dict[str, int]]  # table -> path -> bytes, current snapshot
    modified_ms: dict[str, dict[str, int]]  # table -> path -> add action modification time
    rows: dict[str, dict[str, int]]  # table -> path -> row count (add action statistics; -1 unknown)
    versions: dict[str, int]


def read_lake_files(layout: LakeLayout) -> LakeFiles:
    """Plan input: every marker row of the current episodes table (all attempts) with its file,
    and the file groups. Reads PLAN_COLUMNS only (a few dozen bytes per episode).

    Example:
        >>> [g.markers for g in read_lake_files(LakeLayout("/data/lake")).groups][:3]
        [32, 32, 17]
    """
    import pyarrow.dataset as pads

    tables = ensure_lake_tables(layout)
    sizes: dict[str, dict[str, int]] = {}
    modified: dict[str, dict[str, int]] = {}
    rows: dict[str, dict[str, int]] = {}
    versions: dict[str, int] = {}
    for name in REWRITTEN_TABLES:
        table = tables[name]
        actions = pa.table(table.get_add_actions(flatten=True))
        paths = actions.column("path").to_pylist()
        sizes[name] = dict(
            zip(paths, (int(s) for s in actions.column("size_bytes").to_pylist()), strict=True)
        )
        stamps = actions.column("modification_time").cast(pa.int64()).to_pylist()
        modified[name] = dict(zip(paths, (int(m or 0) for m in stamps), strict=True))
        counts = (
            actions.column("num_records").to_pylist()
            if "num_records" in actions.column_names
            else [None] * len(paths)
        )
        rows[name] = dict(zip(paths, (-1 if c is None else int(c) for c in counts), strict=True))
        versions[name] = int(table.version())
    fs, base = table_filesystem(layout.episodes)
    episode_paths = sorted(sizes["episodes"])
    schema = pa.schema(tables["episodes"].schema().to_arrow())
    if episode_paths:
        uris = [f"{base}/{p}" for p in episode_paths]
        try:
            dataset = pads.dataset(uris, format="parquet", schema=schema, filesystem=fs)
            markers = dataset.to_table(columns=[*PLAN_COLUMNS, "__filename"])
        except UNREADABLE as err:  # a damaged episodes file: name it, plan nothing
            raise name_the_bad_file(
                uris, fs, err, table="episodes", columns=PLAN_COLUMNS, consequence="no plan was made"
            ) from err
        prefix = len(base) + 1
        files = pc.utf8_slice_codeunits(markers.column("__filename"), prefix)
        markers = markers.drop_columns(["__filename"]).append_column("file", files)
    else:
        markers = pa.schema(
            [schema.field(c) for c in PLAN_COLUMNS] + [pa.field("file", pa.string())]
        ).empty_table()
    return LakeFiles(markers, _groups(markers, sizes), sizes, modified, rows, versions)


def _groups(markers: pa.Table, sizes: dict[str, dict[str, int]]) -> tuple[FileGroup, ...]:
    """Union-find over (episodes file, steps file, video file) of every marker."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra

    counts: dict[str, int] = {}
    for file, steps, video in zip(
        markers.column("file").to_pylist(),
        markers.column("steps_file").to_pylist(),
        markers.column("video_file").to_pylist(),
        strict=True,
    ):
        key = f"e:{file}"
        find(key)
        counts[key] = counts.get(key, 0) + 1
        if steps:
            union(key, f"s:{steps}")
        if video:
            union(key, f"v:{video}")
    members: dict[str, list[str]] = {}
    for node in list(parent):
        members.setdefault(find(node), []).append(node)
    groups = []
    for nodes in members.values():
        by_kind: dict[str, list[str]] = {"e": [], "s": [], "v": []}
        for node in nodes:
            by_kind[node[0]].append(node[2:])
        size = sum(sizes["steps"].get(p, 0) for p in by_kind["s"]) + sum(
            sizes["video"].get(p, 0) for p in by_kind["v"]
        )
        groups.append(
            FileGroup(
                episodes_files=tuple(sorted(by_kind["e"])),
                steps_files=tuple(sorted(by_kind["s"])),
                video_files=tuple(sorted(by_kind["v"])),
                size_bytes=size,
                markers=sum(counts.get(f"e:{p}", 0) for p in by_kind["e"]),
            )
        )
    return tuple(sorted(groups, key=lambda g: g.episodes_files))
