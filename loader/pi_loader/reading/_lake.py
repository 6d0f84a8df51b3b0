"""Reading the visible part of the lake at pinned Delta versions.

Visibility (architecture decision 3) is `pi_format.lake.visibility`'s rule, applied here to the
rows pi_loader reads through its own storage (`latest_commits`).

deltalake runs here, in the main process only (its tokio runtime panics in forked workers): it
resolves the episodes table at its pinned version into a list of data-file URIs with per-file
episode_id ranges from the Delta log, and pins the versions of `steps` and `video` without
listing their files. The selected episodes rows (the commit markers) carry the locators of their
steps and video rows (SPEC.md §7.2), so nothing else is read at open: every later read is one
row group of a named file, opened by pyarrow through `Storage.local_path` (`_row_groups`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from pi_format import LakeLayout
from pi_format.lake import checksums_required, latest_commits, pinned_rows

from pi_loader._errors import PiLoaderError, SnapshotDataMissingError
from pi_loader.reading._cache import CacheConfig
from pi_loader.reading._damage import (
    Unreadable,
    as_corrupt,
    damaged_files,
    is_damage,
    pages_damaged,
    readable_version,
)
from pi_loader.reading._delta_log import open_delta
from pi_loader.reading._episodes_rows import FILE_COLUMN, episodes_rows
from pi_loader.reading._retry import RetryConfig, StoreUnreachableError
from pi_loader.reading._storage import Storage, storage_for

# The tables a dataset reads; their versions pin a dataset (snapshots record them).
READ_TABLES = ("episodes", "steps", "video")
STAT_FIELDS = ("mean", "std", "min", "max")
# A selection spanning at least this many episodes files is read from the host's copy of the rows.
MANY_FILES = 64


def make_storage(
    lake_root: str,
    storage_options: Mapping[str, str] | None,
    cache: CacheConfig | None,
    retry: RetryConfig | None = None,
) -> Storage:
    """The Storage readers open files through (pi_loader.reading._storage; cached copies for s3://)."""
    return storage_for(lake_root, storage_options=storage_options, cache=cache, retry=retry)


@dataclass(frozen=True, slots=True)
class TableFiles:
    """The data files of one table at one version, with each file's episode_id range."""

    name: str
    version: int
    uris: tuple[str, ...]
    min_episode: tuple[str | None, ...]  # None: no statistics, the file may hold any episode
    max_episode: tuple[str | None, ...]
    schema: pa.Schema | None = None  # the table's schema at this version (files may predate it)
    checksummed: bool = False  # the table records page CRCs in every file: pages are walked too

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
    retry: RetryConfig | None = None,
) -> Any:
    """A deltalake.DeltaTable (transient store errors retried: `_delta_log.open_delta`), or a
    PiLoaderError naming the path when it cannot be opened (StoreUnreachableError when the store
    did not answer until the retry deadline)."""
    path = layout.table(name)
    try:
        return open_delta(path, version, storage_options, retry)
    except StoreUnreachableError as err:
        raise StoreUnreachableError(f"cannot open the {name} table at {path}: {err}") from None
    except Exception as err:  # deltalake's TableNotFoundError and friends
        if version is not None:
            try:
                latest = open_delta(path, None, storage_options, retry).version()
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


def file_uri(table_uri: str, path: str) -> str:
    """The URI of a data file named as in a Delta add action (relative to the table root, URL-
    quoted) or already absolute."""
    if "://" in path or path.startswith("/"):
        return path
    from urllib.parse import unquote

    return f"{table_uri.rstrip('/')}/{unquote(path)}"


def _check_unpartitioned(name: str, table: Any) -> None:
    if table.metadata().partition_columns:
        raise NotImplementedError(
            f"the {name} table is partitioned by {table.metadata().partition_columns}; pi_loader reads "
            "unpartitioned tables (as the lake writer makes them)"
        )


def resolve_tables(
    layout: LakeLayout,
    versions: Mapping[str, int] | None,
    storage_options: Mapping[str, str] | None,
    unreadable: list[Unreadable] | None = None,
    checksummed: set[str] | None = None,
    retry: RetryConfig | None = None,
) -> tuple[TableFiles, dict[str, int]]:
    """The episodes table's files at its pinned version, and the version of every table of
    READ_TABLES (the current ones when `versions` is None).

    Only the episodes table's files are listed: steps and video are reached through the
    locators of the episodes rows, so their versions are pinned (for the snapshot) and their
    file lists, which grow with the lake, are never turned into Python objects.

    With `unreadable` (and no `versions`), a table whose latest log version does not load is
    read at its newest version that does, and the commits after it are appended to `unreadable`
    (`_damage.readable_version`): a damaged log entry costs what it holds, not the open.
    `checksummed` gets the names of the tables that record page CRCs in every file.
    """
    pinned: dict[str, int] = {}
    episodes: TableFiles | None = None
    for name in READ_TABLES:
        try:
            table = open_table(
                layout, name, None if versions is None else versions[name], storage_options, retry
            )
        except PiLoaderError as err:
            found = None
            if (
                unreadable is not None
                and versions is None
                and not isinstance(err, SnapshotDataMissingError | StoreUnreachableError)
            ):
                found = readable_version(name, layout.table(name), storage_options, err)
            if found is None or unreadable is None:
                raise
            table = found[0]
            unreadable.append(found[1])
        _check_unpartitioned(name, table)
        pinned[name] = int(table.version())
        if checksummed is not None and checksums_required(table.metadata().description):
            checksummed.add(name)
        if name != "episodes":
            continue
        actions = pa.table(table.get_add_actions(flatten=True))
        paths = actions.column("path").to_pylist()
        names = actions.column_names
        lo = (
            actions.column("min.episode_id").to_pylist() if "min.episode_id" in names else [None] * len(paths)
        )
        hi = (
            actions.column("max.episode_id").to_pylist() if "max.episode_id" in names else [None] * len(paths)
        )
        # in episode-id order (then path: stable across runs), so the rows of a compacted lake
        # (files of disjoint id ranges) read already sorted and `latest_commits` takes no copy
        order = sorted(range(len(paths)), key=lambda i: (lo[i] is None, lo[i] or "", paths[i]))
        uri = layout.table(name)
        episodes = TableFiles(
            name=name,
            version=pinned[name],
            uris=tuple(file_uri(uri, paths[i]) for i in order),
            min_episode=tuple(lo[i] for i in order),
            max_episode=tuple(hi[i] for i in order),
            # files written before a column was added lack it: read them with the table's schema
            schema=pa.schema(table.schema().to_arrow()),
            checksummed=checksums_required(table.metadata().description),
        )
    assert episodes is not None  # READ_TABLES holds "episodes"
    return episodes, pinned


def _read(
    files: TableFiles,
    storage: Storage,
    episode_ids: Sequence[str] | None,
    columns: list[str],
    flt: pads.Expression | None,
    *,
    indices: Sequence[int] | None = None,
    tag_files: bool = False,
    unreadable: list[Unreadable] | None = None,
) -> pa.Table:
    """Rows of the files `indices` (default: those that may hold `episode_ids`; all when None),
    projected to `columns` the table's schema has; with `tag_files`, plus `_episodes_rows`'
    FILE_COLUMN: each row's file index.

    A file that does not read (damaged: `_damage.is_damage`) raises a CorruptDataError naming
    it; with `unreadable`, it is left out instead and appended there (with the episode ids the
    log's statistics give for it), and the other files' rows come back."""
    if indices is None:
        indices = range(len(files.uris)) if episode_ids is None else files.files_for(episode_ids)
    paths = []
    for i in indices:
        try:
            paths.append(storage.local_path(files.uris[i]))
        except FileNotFoundError as err:  # other StorageErrors (endpoint down, file > cache) pass through
            raise SnapshotDataMissingError(
                missing_files_message(files.name, files.version, files.uris[i], err)
            ) from err
    schema = files.schema
    if schema is not None:
        # a lake older than some column (e.g. the locators) reads it as nulls
        columns = [c for c in columns if c in schema.names]
    if not paths:
        fields = [schema.field(c) if schema is not None else pa.field(c, pa.null()) for c in columns]
        empty = pa.schema(fields).empty_table()
        return empty.append_column(FILE_COLUMN, pa.array([], pa.int32())) if tag_files else empty
    missing = [p for p in paths if "://" not in p and not os.path.exists(p)]
    if missing:
        raise SnapshotDataMissingError(
            missing_files_message(files.name, files.version, missing[0], None, len(missing))
        )
    # every page's CRC checked (architecture decision 10; pages written before have none)
    checked = pads.ParquetFileFormat(
        default_fragment_scan_options=pads.ParquetFragmentScanOptions(page_checksum_verification=True)
    )
    wanted = [*columns, "__filename"] if tag_files else columns
    # pyarrow reads a page without a CRC unverified: where every file has them, walk the page
    # headers (a damaged CRC field marker is damage, not "no CRC"), in a thread beside the read
    # (pyarrow decodes without the GIL; the walk's CRCs are zlib-ng's)
    # (a pool per call, not per module: a forked process must not inherit a dead worker thread)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pi-loader-page-walk")
    walk = pool.submit(pages_damaged, files.name, paths) if files.checksummed else None
    try:
        table: pa.Table = pads.dataset(paths, format=checked, schema=schema).to_table(
            columns=wanted, filter=flt
        )
        bad = [] if walk is None else walk.result()
    except FileNotFoundError as err:
        raise SnapshotDataMissingError(
            missing_files_message(files.name, files.version, str(err), err)
        ) from err
    except Exception as err:
        if not is_damage(err):
            raise
        bad = damaged_files(files.name, paths, columns, schema)
        if not bad:
            raise as_corrupt(err, {"table": files.name, "file": ", ".join(paths[:3])}) from None
    finally:
        pool.shutdown(wait=True)  # a walk left running when the read failed ends here
    if bad:
        if unreadable is None:
            raise bad[0][1]
        by_path = dict(zip(paths, indices, strict=True))
        for path, found in bad:
            i = by_path[path]
            held = f"episode ids {files.min_episode[i]} .. {files.max_episode[i]} (Delta log statistics)"
            unreadable.append(Unreadable(files.name, files.uris[i], found.detail, held))
        dropped = {p for p, _ in bad}
        keep = [i for p, i in zip(paths, indices, strict=True) if p not in dropped]
        return _read(files, storage, episode_ids, columns, flt, indices=keep, tag_files=tag_files)
    if tag_files:
        # pyarrow names each row's file by the path it was given: map it back to the file index
        names = table.column("__filename").dictionary_encode().combine_chunks()
        index_of = {path: i for path, i in zip(paths, indices, strict=True)}
        lookup = np.array([index_of[p] for p in names.dictionary.to_pylist()], dtype=np.int32)
        file_of_row = lookup[names.indices.to_numpy(zero_copy_only=False)] if len(lookup) else lookup
        table = table.drop_columns(["__filename"]).append_column(FILE_COLUMN, pa.array(file_of_row))
    return table


def missing_files_message(table: str, version: int, path: str, err: Exception | None, count: int = 1) -> str:
    """The message of a SnapshotDataMissingError for data files of `table` that are gone."""
    return (
        f"{count} data file(s) of the {table} table at version {version} are gone, e.g. {path}"
        + (f" ({err})" if err else "")
        + "; they were probably vacuumed. Open the dataset at the current versions (no snapshot), or "
        "keep vacuum from removing files that live snapshots need"
    )


# Columns of the episodes rows a Dataset reads: identity, shape, statistics and the locators.
LOCATOR_COLUMNS = ("steps_file", "steps_row_group", "video_file", "video_row_groups")
EPISODE_COLUMNS = (
    "episode_id",
    "attempt_id",
    "cameras",
    "step_count",
    "proprio_dim",
    "action_dim",
    "video_width",
    "video_height",
    "video_chunk_frames",
    "committed_at_ns",
    *(f"{kind}_{stat}" for kind in ("proprio", "action") for stat in STAT_FIELDS),
    *LOCATOR_COLUMNS,
)


def read_committed_episodes(
    files: TableFiles,
    storage: Storage,
    episode_ids: Sequence[str] | None,
    rows_directory: Path | None = None,
    *,
    deleted_ids: pa.Array | None = None,
    attempt_ids: Sequence[str] | None = None,
    unreadable: list[Unreadable] | None = None,
) -> pa.Table:
    """The episodes rows of `episode_ids` (all committed episodes when None), one per id, sorted:
    the visible attempt of each (deleted episodes left out), or with `attempt_ids` (one per id,
    a pin's pairs) exactly those attempts, superseded or deleted ones included.

    Columns are EPISODE_COLUMNS; locator columns a lake predates come back as nulls. With a
    `rows_directory` (`_episodes_rows`), a selection that spans many files is read from this
    host's memory-mapped copy of the episodes rows, and only files new to it through Parquet.
    With `unreadable`, a damaged episodes file is left out and named there (`_read`).
    """
    columns = list(EPISODE_COLUMNS)
    ids = None if episode_ids is None else list(episode_ids)
    indices = None if ids is None else files.files_for(ids)
    if (
        rows_directory is not None
        and files.schema is not None
        and (indices is None or len(indices) >= MANY_FILES)
    ):
        left_out: list[Unreadable] = []
        sink = left_out if unreadable is not None else None  # None: a damaged file raises

        def read(chosen: Sequence[int]) -> pa.Table:
            return _read(files, storage, None, columns, None, indices=chosen, tag_files=True, unreadable=sink)

        projected = pa.schema([files.schema.field(c) for c in columns if c in files.schema.names])
        # a segment is written only when every file read: a damaged one is not cached as empty
        table = episodes_rows(
            rows_directory, files.uris, projected, read, complete=lambda: not left_out
        ).drop_columns([FILE_COLUMN])
        if unreadable is not None:
            unreadable += left_out
        if ids is not None:
            table = table.filter(pc.is_in(table.column("episode_id"), value_set=pa.array(ids, pa.string())))
    else:
        flt = None if ids is None else pads.field("episode_id").isin(ids)
        table = _read(files, storage, ids, columns, flt, indices=indices, unreadable=unreadable)
    for name in LOCATOR_COLUMNS:
        if name not in table.column_names:
            table = table.append_column(name, pa.nulls(table.num_rows))
    if table.num_rows == 0:
        return table
    if attempt_ids is not None:
        if ids is None:
            raise ValueError("attempt_ids need the episode_ids they belong to")
        return pinned_rows(table, ids, attempt_ids)
    return latest_commits(table, deleted_ids)


@dataclass(frozen=True, slots=True)
class Stats:
    """Statistics of one feature (proprio or action) over every step of a dataset."""

    mean: np.ndarray  # float32 [D]
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray


def pooled_stats(episodes: pa.Table, kind: str) -> Stats:
    """Dataset statistics from the per-episode ones (count-weighted; no pass over the steps).

    Summed batch by batch (one per episodes file read): no [episodes, D] float64 copy of each
    statistic is made (at 1,005,000 episodes: ~0.1 s each of the eight, 0.8-1.2 s of a cold open)."""
    names = [f"{kind}_{stat}" for stat in STAT_FIELDS]
    width = _common_width(episodes, names)
    total = 0.0
    first = np.zeros(width, np.float64)
    second = np.zeros(width, np.float64)
    low = np.full(width, np.inf, np.float32)
    high = np.full(width, -np.inf, np.float32)
    for batch in episodes.select(["step_count", *names]).to_batches():
        if not batch.num_rows:
            continue
        counts = batch.column(0).to_numpy(zero_copy_only=False).astype(np.float64)
        mean, std, lo, hi = (_rows_of(batch.column(1 + k), width) for k in range(4))
        total += counts.sum()
        # min and max are exact in the stored float32: only the weighted moments need float64
        mean64 = mean.astype(np.float64)
        first += counts @ mean64
        moments = np.square(std.astype(np.float64))
        moments += np.square(mean64, out=mean64)
        second += counts @ moments
        np.minimum(low, lo.min(0), out=low)
        np.maximum(high, hi.max(0), out=high)
    mean_all = first / total if total else np.full(width, np.nan)
    std_all = np.sqrt(np.maximum(second / total - mean_all**2, 0.0)) if total else np.full(width, np.nan)
    return Stats(
        mean=mean_all.astype(np.float32),
        std=std_all.astype(np.float32),
        min=low,
        max=high,
    )


def _common_width(episodes: pa.Table, names: list[str]) -> int:
    """The one vector length of the `names` list columns (0 without rows); refused by name when
    it differs across the selected episodes."""
    width = None
    for name in names:
        lengths = pc.unique(pc.list_value_length(episodes.column(name))).to_pylist()
        if len(lengths) > 1:
            raise PiLoaderError(
                f"{name} vectors differ in length across the selected episodes "
                f"({sorted(lengths)}); select episodes of one robot type"
            )
        if lengths and width is not None and lengths[0] != width:
            raise PiLoaderError(
                f"{name} vectors are {lengths[0]} long, {names[0]} ones {width}; the episodes rows "
                "are inconsistent: run `pilake audit`"
            )
        if lengths:
            width = int(lengths[0])
    return width or 0


def _rows_of(column: pa.Array, width: int) -> np.ndarray:
    """A list column of one batch as a [rows, width] float32 matrix (zero-copy where it can)."""
    flat = pc.list_flatten(column).to_numpy(zero_copy_only=False)
    return flat.astype(np.float32, copy=False).reshape(len(column), width)


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
