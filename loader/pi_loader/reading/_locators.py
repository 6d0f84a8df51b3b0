"""Where each selected episode's steps and video rows are: compact per-episode arrays.

Built once at open from the locator columns of the episodes rows (SPEC.md §7.2: `steps_file`,
`steps_row_group`, `video_file`, `video_row_groups`), so that no reader ever lists or scans the
steps and video tables. Files are numbered into two small tuples of unique URIs (a group commit
puts many episodes in one file); everything else is an int32 array with one entry per episode
(and per camera for video). This is what workers receive when a Dataset is pickled: its size
grows with the number of episodes, never with the number of samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pi_format import LakeLayout

from pi_loader._errors import PiLoaderError
from pi_loader.reading._lake import file_uri


@dataclass(frozen=True, slots=True, eq=False)
class EpisodeLocators:
    """Steps and video locations of the selected episodes (in `Dataset.episode_ids` order).

    Example:
        >>> loc = EpisodeLocators.from_rows(rows, LakeLayout("/data/lake"), cameras=("front",))
        >>> loc.steps_files[loc.steps_file[0]], int(loc.steps_row_group[0])
        ('/data/lake/steps/part-00000-....parquet', 3)
        >>> int(loc.video_row_group[0, 0]) + 2   # the row group of chunk 2 of camera "front"
        14
    """

    steps_files: tuple[str, ...]  # unique steps file URIs
    steps_file: np.ndarray  # int32 [E]: index into steps_files
    steps_row_group: np.ndarray  # int32 [E]: the row group holding exactly the episode's steps
    video_files: tuple[str, ...]  # unique video file URIs (empty without cameras)
    video_file: np.ndarray  # int32 [E]
    video_row_group: np.ndarray  # int32 [E, cameras]: row group of chunk 0 of each camera
    camera_column: np.ndarray  # int32 [E, cameras]: the camera's position in the episode's cameras
    chunk_frames: np.ndarray  # int32 [E]: frames per video chunk

    @staticmethod
    def from_rows(rows: pa.Table, layout: LakeLayout, cameras: Sequence[str]) -> EpisodeLocators:
        """Locators of the episodes rows `rows` (sorted by episode_id) for `cameras`, which every
        episode has (`choose_cameras` checked that).

        Raises:
            PiLoaderError: an episode without locators (a lake written before they existed) or
                with locators that do not fit its cameras.
        """
        need = ["steps_file", "steps_row_group"]
        if cameras:
            need += ["video_file", "video_row_groups"]
        for name in need:
            nulls = np.flatnonzero(rows.column(name).is_null().to_numpy(zero_copy_only=False))
            if nulls.size:
                e = int(nulls[0])
                raise PiLoaderError(
                    f"episode {rows.column('episode_id')[e].as_py()} (attempt "
                    f"{rows.column('attempt_id')[e].as_py()}) has no {name} in the episodes table, and "
                    f"{nulls.size} of the {rows.num_rows} selected episodes lack locators: the lake "
                    "predates format locators (SPEC.md §7.2). Re-ingest those episodes, or backfill "
                    "their locators, before reading them with pi_loader"
                )
        steps_files, steps_file = _files(rows.column("steps_file"), layout.table("steps"))
        chunk_frames = rows.column("video_chunk_frames").to_numpy().astype(np.int32)
        if not cameras:
            empty = np.zeros((rows.num_rows, 0), np.int32)
            video_files: tuple[str, ...] = ()
            video_file = np.zeros(rows.num_rows, np.int32)
            return EpisodeLocators(
                steps_files, steps_file, _int32(rows, "steps_row_group"), video_files, video_file,
                empty, empty, chunk_frames,
            )  # fmt: skip
        if (chunk_frames < 1).any():
            e = int(np.argmax(chunk_frames < 1))
            raise PiLoaderError(f"episode {rows.column('episode_id')[e].as_py()}: video_chunk_frames < 1")
        video_files, video_file = _files(rows.column("video_file"), layout.table("video"))
        camera_column = _camera_columns(rows, cameras)
        groups = rows.column("video_row_groups")
        counts = pc.list_value_length(groups).to_numpy(zero_copy_only=False)
        camera_counts = pc.list_value_length(rows.column("cameras")).to_numpy(zero_copy_only=False)
        if (counts != camera_counts).any():
            e = int(np.argmax(counts != camera_counts))
            raise PiLoaderError(
                f"episode {rows.column('episode_id')[e].as_py()}: video_row_groups has {counts[e]} entries "
                f"for {camera_counts[e]} cameras; the episodes row is malformed"
            )
        flat = pc.list_flatten(groups).to_numpy(zero_copy_only=False).astype(np.int32)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        video_row_group = flat[starts[:, None] + camera_column].astype(np.int32)
        return EpisodeLocators(
            steps_files, steps_file, _int32(rows, "steps_row_group"), video_files, video_file,
            video_row_group, camera_column, chunk_frames,
        )  # fmt: skip

    @property
    def nbytes(self) -> int:
        """Bytes of the per-episode arrays (the file tuples not counted)."""
        return sum(
            a.nbytes
            for a in (
                self.steps_file, self.steps_row_group, self.video_file, self.video_row_group,
                self.camera_column, self.chunk_frames,
            )
        )  # fmt: skip


def _int32(rows: pa.Table, name: str) -> np.ndarray:
    return np.ascontiguousarray(rows.column(name).to_numpy().astype(np.int32))


def _files(column: pa.ChunkedArray, table_root: str) -> tuple[tuple[str, ...], np.ndarray]:
    """Unique file URIs of a locator column (paths relative to `table_root`) and each row's index."""
    encoded = pc.dictionary_encode(column.combine_chunks())
    uris = tuple(file_uri(table_root, p) for p in encoded.dictionary.to_pylist())
    return uris, np.ascontiguousarray(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32))


def _camera_columns(rows: pa.Table, cameras: Sequence[str]) -> np.ndarray:
    """int32 [E, len(cameras)]: where each of `cameras` sits in each episode's own camera list
    (vectorized: one pass over the flattened lists per camera, not a Python loop per episode)."""
    column = rows.column("cameras").combine_chunks()
    names = pc.list_flatten(column)  # compared in Arrow: no Python str per camera entry
    parents = pc.list_parent_indices(column).to_numpy(zero_copy_only=False)
    bounds = column.offsets.to_numpy().astype(np.int64)
    offsets = bounds[:-1] - bounds[0]  # a sliced array's offsets do not start at 0
    out = np.full((rows.num_rows, len(cameras)), -1, np.int32)
    for c, camera in enumerate(cameras):
        hits = np.flatnonzero(pc.equal(names, camera).to_numpy(zero_copy_only=False))
        out[parents[hits], c] = hits - offsets[parents[hits]]
    if (out < 0).any():  # choose_cameras checked this; a guard against a malformed row
        e = int(np.argwhere(out < 0)[0][0])
        raise PiLoaderError(
            f"episode {rows.column('episode_id')[e].as_py()} lacks one of the cameras {cameras}"
        )
    return out
