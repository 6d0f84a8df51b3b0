"""One steps row group as arrays, by either read path of `_steps`: decoded from the column
chunks the host's steps index locates (`decode_group`), or checked after pyarrow read it
(`parse_group`). Both give bit-identical arrays; the checks say what is wrong with a row group
that does not hold the steps its episode's locator promises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pi_loader._errors import CorruptDataError, PiLoaderError
from pi_loader.reading import _steps_index as index
from pi_loader.reading._parquet_pages import PageChecksumError, PageError, decode_list_chunk
from pi_loader.reading._steps_index import list_field


@dataclass(frozen=True, slots=True)
class StepsGroup:
    """The parsed arrays of one steps row group (what the steps cache holds)."""

    proprio: np.ndarray  # float32 [rows, D]
    action: np.ndarray  # float32 [rows, A]
    frame_index: np.ndarray  # int32 [rows, cameras of the episode]

    @property
    def nbytes(self) -> int:
        return int(self.proprio.nbytes + self.action.nbytes + self.frame_index.nbytes)


def decode_group(
    uri: str, group: int, entry: Sequence[int], chunks: list[memoryview], *, require_crc: bool = False
) -> StepsGroup | None:
    """Row group `group` of `uri` from its three list column chunks as the index row `entry`
    describes them, or None when a page holds what this path does not decode (empty lists,
    nulls, other widths: the row-group path then reads it and says what it is).

    Raises:
        PiLoaderError: a chunk does not parse as the index says (the file changed since it was
            indexed, or is corrupt).
    """
    rows = int(entry[index.ROWS])
    arrays = []
    for c, ((name, physical), raw) in enumerate(zip(index.LIST_COLUMNS, chunks, strict=True)):
        try:
            array = decode_list_chunk(
                raw,
                codec=int(entry[list_field(c, index.CODEC)]),
                rows=rows,
                width=int(entry[list_field(c, index.WIDTH)]),
                max_definition=int(entry[list_field(c, index.MAX_DEF)]),
                dtype=np.dtype("<f4" if physical == "FLOAT" else "<i4"),
                require_crc=require_crc,
            )
        except PageChecksumError as err:
            where = {"table": "steps", "file": uri, "row_group": group, "column": name, "page": err.page}
            raise CorruptDataError(str(err), where) from None
        except PageError as err:  # lake files are immutable: bytes that do not parse are damage
            where = {"table": "steps", "file": uri, "row_group": group, "column": name}
            raise CorruptDataError(
                f"the `{name}` column chunk read from the file's steps index ({len(raw)} bytes) is not "
                f"what the index describes: {err}. The file changed since it was indexed, or is corrupt",
                where,
            ) from None
        if array is None:
            return None
        arrays.append(array)
    proprio, action, frame_index = arrays
    return StepsGroup(
        proprio=proprio.astype(np.float32, copy=False),
        action=action.astype(np.float32, copy=False),
        frame_index=frame_index.astype(np.int32, copy=False),
    )


def parse_group(
    rows: pa.Table, where: str, *, identity: tuple[str, str], steps: tuple[int, int, int], cameras: int
) -> StepsGroup:
    """A row group read through pyarrow, checked to hold exactly the steps start..start+count-1
    (`steps` = (start, count, the episode's length)) of the attempt `identity` = (episode_id,
    attempt_id), with `cameras` frame indices per step; `where` names it in errors.

    Raises:
        PiLoaderError: it holds other rows, steps out of order, or another camera count.
    """
    (eid, attempt), (start, count, length) = identity, steps
    same = pc.and_(pc.equal(rows["episode_id"], eid), pc.equal(rows["attempt_id"], attempt))
    if rows.num_rows != count or not pc.all(same).as_py():
        raise PiLoaderError(
            f"{where} holds {rows.num_rows} rows, not exactly steps {start}..{start + count - 1} of "
            f"this attempt's {length} (step_count of its episodes row, in row groups as large as its "
            "first); the locator does not fit the file"
        )
    step_index = rows.column("step_index").to_numpy()
    if not np.array_equal(step_index, np.arange(start, start + count)):
        raise PiLoaderError(
            f"{where}: step_index is not {start}..{start + count - 1} in order, without gaps or repeats"
        )
    frame_index = _matrix(rows.column("camera_frame_index"), where, "camera_frame_index", np.int32)
    if frame_index.shape[1] != cameras:
        raise PiLoaderError(
            f"{where}: camera_frame_index has {frame_index.shape[1]} entries per step for the "
            f"episode's {cameras} cameras"
        )
    return StepsGroup(
        proprio=_matrix(rows.column("proprio"), where, "proprio", np.float32),
        action=_matrix(rows.column("action"), where, "action", np.float32),
        frame_index=frame_index,
    )


def _matrix(column: pa.ChunkedArray, where: str, what: str, dtype: type) -> np.ndarray:
    """A list column of equal-length lists as a [rows, width] array."""
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    rows = len(lengths)
    if rows and (lengths != lengths[0]).any():
        raise PiLoaderError(f"{where}: {what} vectors differ in length across steps")
    width = int(lengths[0]) if rows else 0
    flat = pc.list_flatten(column).to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(flat.astype(dtype, copy=False).reshape(rows, width))
