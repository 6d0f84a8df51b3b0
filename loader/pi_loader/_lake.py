"""Reading the visible part of the lake at pinned Delta versions.

Visibility (architecture decision 3) is `pi_format.lake.visibility`'s rule, applied here to the
rows pi_loader reads through its own storage (`latest_commits`, `visible_rows`).

deltalake runs here, in the main process only (its tokio runtime panics in forked workers): it
resolves each table at its pinned version into a list of data-file URIs with per-file episode_id
ranges from the Delta log. From then on every file is opened by pyarrow through
`Storage.local_path` (the file itself for a local lake, a cached copy for s3://), so workers never
touch deltalake and files of other episodes are never opened.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from pi_format import LakeLayout
from pi_format.lake import latest_commits, visible_rows

from pi_loader._cache import CacheConfig
from pi_loader._errors import PiLoaderError, SnapshotDataMissingError
from pi_loader._storage import Storage, storage_for

# The tables a dataset reads; their versions pin a dataset (snapshots record them).
READ_TABLES = ("episodes", "steps", "video")
STAT_FIELDS = ("mean", "std", "min", "max")


def make_storage(
    lake_root: str, storage_options: Mapping[str, str] | None, cache: CacheConfig | None
) -> Storage:
    """The Storage readers open files through (pi_loader._storage; cached copies for s3://)."""
    return storage_for(lake_root, storage_options=storage_options, cache=cache)


@dataclass(frozen=True, slots=True)
class TableFiles:
    """The data files of one table at one version, with each file's episode_id range."""

    name: str
    version: int
    uris: tuple[str, ...]
    min_episode: tuple[str | None, ...]  # None: no statistics, the file may hold any episode
    max_episode: tuple[str | None, ...]

    def files_by_episode(self, episode_ids: Sequence[str]) -> dict[str, tuple[int, ...]]:
        """For each of `episode_ids`, the indices of the files that may hold its rows (one pass
        over the files; the stream job writes one file per episode and table)."""
        ids = sorted(episode_ids)
        wanted = np.array(ids, dtype=object)
        out: dict[str, list[int]] = {e: [] for e in ids}
        for i, (lo, hi) in enumerate(zip(self.min_episode, self.max_episode, strict=True)):
            if lo is None or hi is None:
                first, last = 0, len(ids)
            else:
                first = int(np.searchsorted(wanted, lo, side="left"))
                last = int(np.searchsorted(wanted, hi, side="right"))
            for e in ids[first:last]:
                out[e].append(i)
        return {e: tuple(v) for e, v in out.items()}

    def files_for(self, episode_ids: Sequence[str]) -> list[int]:
        """Indices of the files that may hold rows of any of `episode_ids`."""
        wanted = np.array(sorted(episode_ids), dtype=object)
        out = []
        for i, (lo, hi) in enumerate(zip(self.min_episode, self.max_episode, strict=True)):
            if (
                lo is None
                or hi is None
                or np.searchsorted(wanted, lo, side="left") < np.searchsorted(wanted, hi, side="right")
            ):
                out.append(i)
        return out


def open_table(
    layout: LakeLayout,
    name: str,
    version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Any:
    """A deltalake.DeltaTable, or a PiLoaderError naming the path when it cannot be opened."""
    from deltalake import DeltaTable

    path = layout.table(name)
    options = dict(storage_options) if storage_options else None
    try:
        return DeltaTable(path, storage_options=options, version=version)
    except Exception as err:  # deltalake's TableNotFoundError and friends
        if version is not None:
            try:
                latest = DeltaTable(path, storage_options=options).version()
            except Exception:
                latest = None
            if latest is not None:
                raise SnapshotDataMissingError(
                    f"version {version} of the {name} table at {path} is gone (latest is {latest}): its "
                    f"log was cleaned up; this snapshot can no longer be read ({err})"
                ) from err
        raise PiLoaderError(
            f"cannot open the {name} table at {path}"
            + ("" if version is None else f" at version {version}")
            + f": {err}; is the lake root right and has the stream job committed episodes?"
        ) from err


def _file_uri(table_uri: str, path: str) -> str:
    if "://" in path or path.startswith("/"):
        return path
    from urllib.parse import unquote

    return f"{table_uri.rstrip('/')}/{unquote(path)}"


def resolve_tables(
    layout: LakeLayout, versions: Mapping[str, int] | None, storage_options: Mapping[str, str] | None
) -> dict[str, TableFiles]:
    """Every table of READ_TABLES at its pinned version (the current one when `versions` is None)."""
    out: dict[str, TableFiles] = {}
    for name in READ_TABLES:
        table = open_table(layout, name, None if versions is None else versions[name], storage_options)
        if table.metadata().partition_columns:
            raise NotImplementedError(
                f"the {name} table is partitioned by {table.metadata().partition_columns}; pi_loader reads "
                "unpartitioned tables (as the lake writer makes them)"
            )
        actions = pa.table(table.get_add_actions(flatten=True))
        paths = actions.column("path").to_pylist()
        names = actions.column_names
        lo = (
            actions.column("min.episode_id").to_pylist() if "min.episode_id" in names else [None] * len(paths)
        )
        hi = (
            actions.column("max.episode_id").to_pylist() if "max.episode_id" in names else [None] * len(paths)
        )
        order = sorted(range(len(paths)), key=lambda i: paths[i])  # stable across runs
        uri = layout.table(name)
        out[name] = TableFiles(
            name=name,
            version=int(table.version()),
            uris=tuple(_file_uri(uri, paths[i]) for i in order),
            min_episode=tuple(lo[i] for i in order),
            max_episode=tuple(hi[i] for i in order),
        )
    return out


def _read(
    files: TableFiles,
    storage: Storage,
    episode_ids: Sequence[str] | None,
    columns: list[str],
    flt: pads.Expression | None,
) -> pa.Table:
    indices = range(len(files.uris)) if episode_ids is None else files.files_for(episode_ids)
    paths = []
    for i in indices:
        try:
            paths.append(storage.local_path(files.uris[i]))
        except FileNotFoundError as err:  # other StorageErrors (endpoint down, file > cache) pass through
            raise SnapshotDataMissingError(_missing(files, files.uris[i], err)) from err
    if not paths:
        return pa.table({c: pa.array([], pa.null()) for c in columns}).slice(0, 0)
    missing = [p for p in paths if "://" not in p and not os.path.exists(p)]
    if missing:
        raise SnapshotDataMissingError(_missing(files, missing[0], None, len(missing)))
    try:
        table: pa.Table = pads.dataset(paths, format="parquet").to_table(columns=columns, filter=flt)
    except FileNotFoundError as err:
        raise SnapshotDataMissingError(_missing(files, str(err), err)) from err
    return table


def _missing(files: TableFiles, path: str, err: Exception | None, count: int = 1) -> str:
    return (
        f"{count} data file(s) of the {files.name} table at version {files.version} are gone, e.g. {path}"
        + (f" ({err})" if err else "")
        + "; they were probably vacuumed. Open the dataset at the current versions (no snapshot), or "
        "keep vacuum from removing files that live snapshots need"
    )


def read_committed_episodes(
    files: TableFiles, storage: Storage, episode_ids: Sequence[str] | None
) -> pa.Table:
    """The episodes rows of `episode_ids` (all committed episodes when None), one per id, sorted."""
    columns = [
        "episode_id",
        "attempt_id",
        "cameras",
        "step_count",
        "proprio_dim",
        "action_dim",
        "video_width",
        "video_height",
        "committed_at_ns",
    ] + [f"{kind}_{stat}" for kind in ("proprio", "action") for stat in STAT_FIELDS]
    flt = None if episode_ids is None else pads.field("episode_id").isin(list(episode_ids))
    table = _read(files, storage, episode_ids, columns, flt)
    if table.num_rows == 0:
        return table
    return latest_commits(table)


@dataclass(frozen=True, slots=True)
class StepArrays:
    """Per-step arrays of all selected episodes, concatenated in (episode_id, step) order."""

    proprio: np.ndarray  # float32 [N, D]
    action: np.ndarray  # float32 [N, A]
    frame_index: list[np.ndarray]  # per episode: int32 [T, cameras of that episode]
    lengths: np.ndarray  # int64 [episodes]


def _flat_matrix(column: pa.ChunkedArray, what: str, dtype: type) -> np.ndarray:
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    rows = len(lengths)
    if rows and (lengths != lengths[0]).any():
        raise PiLoaderError(
            f"{what} vectors differ in length across the selected steps ({sorted(set(lengths.tolist()))}); "
            "select episodes of one robot type"
        )
    width = int(lengths[0]) if rows else 0
    flat = pc.list_flatten(column).to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat.astype(dtype, copy=False).reshape(rows, width))


def read_steps(files: TableFiles, storage: Storage, episodes: pa.Table) -> StepArrays:
    """Steps of the committed attempt of every episode in `episodes` (sorted by episode_id)."""
    ids = episodes.column("episode_id").to_pylist()
    attempts = episodes.column("attempt_id").to_pylist()
    flt = pads.field("episode_id").isin(ids) & pads.field("attempt_id").isin(sorted(set(attempts)))
    steps = _read(
        files,
        storage,
        ids,
        ["episode_id", "attempt_id", "step_index", "proprio", "action", "camera_frame_index"],
        flt,
    )
    # isin on each column alone admits (episode A, attempt of B): keep exact pairs only.
    steps = visible_rows(steps, episodes).sort_by(
        [("episode_id", "ascending"), ("step_index", "ascending")]
    )
    step_ids = steps.column("episode_id").to_numpy(zero_copy_only=False)
    uniq, counts = np.unique(step_ids, return_counts=True)
    where = {str(e): int(c) for e, c in zip(uniq, counts, strict=True)}
    declared = episodes.column("step_count").to_numpy()
    lengths = np.zeros(len(ids), np.int64)
    for i, eid in enumerate(ids):
        count = where.get(eid, 0)
        if count != declared[i]:
            raise PiLoaderError(
                f"episode {eid} (attempt {attempts[i]}) has {count} steps rows, but its episodes row says "
                f"step_count={declared[i]}; the lake is inconsistent (run GC / re-backfill)"
            )
        lengths[i] = count
    index = steps.column("step_index").to_numpy()
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    expected = np.arange(len(index)) - np.repeat(offsets[:-1], lengths)
    if not np.array_equal(index, expected):
        bad = int(np.searchsorted(offsets, int(np.argmax(index != expected)), side="right")) - 1
        raise PiLoaderError(f"episode {ids[bad]}: step_index is not 0..T-1 without gaps or repeats")
    cfi_col = steps.column("camera_frame_index")
    cfi_flat = pc.list_flatten(cfi_col).to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    cfi_len = pc.list_value_length(cfi_col).to_numpy(zero_copy_only=False)
    cfi_off = np.concatenate([[0], np.cumsum(cfi_len)])
    frame_index = []
    for i, row_cameras in enumerate(episodes.column("cameras").to_pylist()):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        width = len(row_cameras)
        if hi > lo and (cfi_len[lo:hi] != width).any():
            raise PiLoaderError(
                f"episode {ids[i]}: camera_frame_index entries per step differ from its {width} cameras "
                f"{row_cameras}"
            )
        frame_index.append(cfi_flat[cfi_off[lo] : cfi_off[hi]].reshape(hi - lo, width))
    return StepArrays(
        proprio=_flat_matrix(steps.column("proprio"), "proprio", np.float32),
        action=_flat_matrix(steps.column("action"), "action", np.float32),
        frame_index=frame_index,
        lengths=lengths,
    )


@dataclass(frozen=True, slots=True)
class Stats:
    """Statistics of one feature (proprio or action) over every step of a dataset."""

    mean: np.ndarray  # float32 [D]
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray


def pooled_stats(episodes: pa.Table, kind: str) -> Stats:
    """Dataset statistics from the per-episode ones (count-weighted; no pass over the steps)."""
    counts = episodes.column("step_count").to_numpy().astype(np.float64)
    mats = {}
    for stat in STAT_FIELDS:
        mats[stat] = _flat_matrix(episodes.column(f"{kind}_{stat}"), f"{kind}_{stat}", np.float64)
    total = counts.sum()
    mean = (counts[:, None] * mats["mean"]).sum(0) / total
    second = (counts[:, None] * (mats["std"] ** 2 + mats["mean"] ** 2)).sum(0) / total
    std = np.sqrt(np.maximum(second - mean**2, 0.0))
    return Stats(
        mean=mean.astype(np.float32),
        std=std.astype(np.float32),
        min=mats["min"].min(0).astype(np.float32),
        max=mats["max"].max(0).astype(np.float32),
    )


@dataclass(frozen=True, slots=True)
class EpisodeData:
    """One committed episode, in memory: the per-step arrays a sample is cut from."""

    episode_id: str
    attempt_id: str
    cameras: tuple[str, ...]
    proprio: np.ndarray  # float32 [T, D]
    action: np.ndarray  # float32 [T, A]
    camera_frame_index: np.ndarray  # int32 [T, len(cameras)]
    video_width: int
    video_height: int

    @property
    def num_steps(self) -> int:
        return int(self.proprio.shape[0])
