"""Reading the visible part of the lake: committed episodes and the steps of their attempt.

Visibility (architecture decision 3): a steps/video row counts only when an `episodes` row with
the same (episode_id, attempt_id) exists; rows of other attempts are garbage awaiting GC. Every
read is pinned to the Delta versions recorded when the dataset opened, so worker processes that
re-read the lake later see exactly the same data.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from pi_format.layout import LakeLayout

from pi_loader._errors import PiLoaderError

# The tables a dataset reads; their versions pin a dataset (snapshots build on this).
READ_TABLES = ("episodes", "steps", "video")
_KEY_SEP = "\x1f"  # cannot occur in ids written by the stream job, joins (episode, attempt) keys


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


def open_table(layout: LakeLayout, name: str, version: int | None = None) -> Any:
    """A deltalake.DeltaTable, or a PiLoaderError naming the path when it cannot be opened."""
    from deltalake import DeltaTable

    path = layout.table(name)
    try:
        return DeltaTable(path) if version is None else DeltaTable(path, version=version)
    except Exception as err:  # deltalake's TableNotFoundError and friends
        raise PiLoaderError(
            f"cannot open the {name} table at {path}"
            + ("" if version is None else f" at version {version}")
            + f": {err}; is the lake root right and has the stream job committed episodes?"
        ) from err


def table_versions(layout: LakeLayout) -> dict[str, int]:
    """The current Delta version of each table a dataset reads."""
    return {name: int(open_table(layout, name).version()) for name in READ_TABLES}


def pinned_dataset(layout: LakeLayout, name: str, versions: dict[str, int]) -> pads.Dataset:
    """A pyarrow dataset over table `name` at its pinned version, on a pyarrow filesystem.

    deltalake's own filesystem runs on a tokio runtime that panics in a forked process (torch
    DataLoader workers fork by default), so only the file list comes from deltalake; the
    returned dataset reads through pyarrow alone, and pickles into spawned workers as well.
    """
    import pyarrow.fs as pafs

    uri = layout.table(name)
    filesystem, base = pafs.FileSystem.from_uri(uri if "://" in uri else os.path.abspath(uri))
    table = open_table(layout, name, versions[name])
    dataset: pads.Dataset = table.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(base, filesystem))
    return dataset


def _pair_keys(episode_ids: pa.ChunkedArray | pa.Array, attempt_ids: pa.ChunkedArray | pa.Array) -> Any:
    return pc.binary_join_element_wise(episode_ids, attempt_ids, _KEY_SEP)


def read_committed_episodes(
    layout: LakeLayout, versions: dict[str, int], episode_ids: Sequence[str] | None
) -> pa.Table:
    """The episodes rows of `episode_ids` (all committed episodes when None), one per id."""
    dataset = pinned_dataset(layout, "episodes", versions)
    columns = [
        "episode_id",
        "attempt_id",
        "cameras",
        "step_count",
        "video_width",
        "video_height",
        "committed_at_ns",
    ]
    flt = None if episode_ids is None else pads.field("episode_id").isin(list(episode_ids))
    table = dataset.to_table(columns=columns, filter=flt)
    # Decision 3 says one visible row per episode; should a re-commit ever leave two, the
    # latest commit wins (ties broken by attempt_id) so the choice is still deterministic.
    table = table.sort_by(
        [("episode_id", "ascending"), ("committed_at_ns", "descending"), ("attempt_id", "descending")]
    )
    ids = table.column("episode_id").to_numpy(zero_copy_only=False)
    if len(ids) == 0:
        return table
    first = np.concatenate([[True], ids[1:] != ids[:-1]])
    return table.filter(pa.array(first))


def _matrix(column: pa.ChunkedArray, rows: int, what: str, episode_id: str, dtype: type) -> np.ndarray:
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    if rows and (lengths != lengths[0]).any():
        raise PiLoaderError(f"episode {episode_id}: {what} vectors differ in length ({sorted(set(lengths))})")
    width = int(lengths[0]) if rows else 0
    flat = pc.list_flatten(column).to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat.astype(dtype, copy=False).reshape(rows, width))


def read_episode_data(layout: LakeLayout, versions: dict[str, int], episodes: pa.Table) -> list[EpisodeData]:
    """Steps of the committed attempt of every episode in `episodes` (sorted by episode_id)."""
    ids = episodes.column("episode_id").to_pylist()
    attempts = episodes.column("attempt_id").to_pylist()
    dataset = pinned_dataset(layout, "steps", versions)
    flt = pads.field("episode_id").isin(ids) & pads.field("attempt_id").isin(sorted(set(attempts)))
    steps = dataset.to_table(
        columns=["episode_id", "attempt_id", "step_index", "proprio", "action", "camera_frame_index"],
        filter=flt,
    )
    # isin on each column alone admits (episode A, attempt of B): keep exact pairs only.
    wanted = pa.array([f"{e}{_KEY_SEP}{a}" for e, a in zip(ids, attempts, strict=True)])
    steps = steps.filter(pc.is_in(_pair_keys(steps.column("episode_id"), steps.column("attempt_id")), wanted))
    steps = steps.sort_by([("episode_id", "ascending"), ("step_index", "ascending")])
    step_ids = steps.column("episode_id").to_numpy(zero_copy_only=False)
    uniq, starts, counts = np.unique(step_ids, return_index=True, return_counts=True)
    where = {str(e): (int(s), int(c)) for e, s, c in zip(uniq, starts, counts, strict=True)}
    out: list[EpisodeData] = []
    for row in episodes.to_pylist():
        eid, cameras = row["episode_id"], tuple(row["cameras"])
        start, count = where.get(eid, (0, 0))
        if count != row["step_count"]:
            raise PiLoaderError(
                f"episode {eid} (attempt {row['attempt_id']}) has {count} steps rows, but its episodes "
                f"row says step_count={row['step_count']}; the lake is inconsistent (run GC / re-backfill)"
            )
        part = steps.slice(start, count)
        index = part.column("step_index").to_numpy()
        if count and not np.array_equal(index, np.arange(count)):
            raise PiLoaderError(f"episode {eid}: step_index is not 0..{count - 1} without gaps or repeats")
        cfi = _matrix(part.column("camera_frame_index"), count, "camera_frame_index", eid, np.int32)
        if count and cfi.shape[1] != len(cameras):
            raise PiLoaderError(
                f"episode {eid}: camera_frame_index has {cfi.shape[1]} entries per step for "
                f"{len(cameras)} cameras {list(cameras)}"
            )
        out.append(
            EpisodeData(
                episode_id=eid,
                attempt_id=row["attempt_id"],
                cameras=cameras,
                proprio=_matrix(part.column("proprio"), count, "proprio", eid, np.float32),
                action=_matrix(part.column("action"), count, "action", eid, np.float32),
                camera_frame_index=cfi.reshape(count, len(cameras)),
                video_width=int(row["video_width"]),
                video_height=int(row["video_height"]),
            )
        )
    return out
