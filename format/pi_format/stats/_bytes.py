"""The bytes of a quantile sketch (`<kind>_sketch` of an episodes row): encoding one episode's,
decoding a column of them into one array.

Layout of one sketch (`encode_sketch`, little-endian): 16-byte header — magic b"PIQS", u8
version (1), u8 grid id (1), u16 knots K, u16 dims D, u16 reserved (0), u32 count n — then
D × K float32 knot values, dimension-major (the K knots of dimension 0, then of dimension 1, ...).
Knot k of a dimension is its order statistic of index round(grid[k] · (n − 1)).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pi_format.stats._errors import SketchError
from pi_format.stats._grid import GRID_V1, GRIDS, SketchGrid, knot_indices

SKETCH_MAGIC = b"PIQS"
SKETCH_VERSION = 1
_HEADER = struct.Struct("<4sBBHHHI")
SKETCH_HEADER_BYTES = _HEADER.size  # 16


def check_values(values: np.ndarray) -> np.ndarray:
    v = np.asarray(values)
    if v.ndim != 2 or v.shape[0] < 1 or v.shape[1] < 1:
        raise ValueError(f"values must be [steps >= 1, dims >= 1], got shape {v.shape}")
    if v.shape[0] > 0xFFFFFFFF or v.shape[1] > 0xFFFF:
        raise ValueError(f"values of shape {v.shape} exceed the sketch's u32 count / u16 dims")
    if not bool(np.isfinite(v).all()):
        raise ValueError("values must be finite")
    return v.astype(np.float32, copy=False)


def encode_sketch(values: np.ndarray, grid: SketchGrid = GRID_V1) -> bytes:
    """The quantile sketch of a [T, D] array (T >= 1, finite), as stored in `<kind>_sketch`."""
    v = check_values(values)
    knots = np.sort(v, axis=0)[knot_indices(v.shape[0], grid)]
    header = _HEADER.pack(SKETCH_MAGIC, SKETCH_VERSION, grid.grid_id, grid.knots, v.shape[1], 0, v.shape[0])
    return header + np.ascontiguousarray(knots.T, dtype="<f4").tobytes()  # [D, K]


@dataclass(frozen=True, slots=True)
class Sketches:
    """Decoded sketches of E episodes: `counts` [E] int64 and `knots` [E, D, K] float32
    (C-contiguous, as in the bytes). Several features decoded together
    (`decode_sketches(a, b)`) lie side by side along D."""

    counts: np.ndarray
    knots: np.ndarray
    grid: SketchGrid = GRID_V1


def _offset_type(arrow_type: pa.DataType) -> type:
    if pa.types.is_large_binary(arrow_type):
        return np.int64
    if pa.types.is_binary(arrow_type):
        return np.int32
    raise SketchError(f"sketches must be binary, got {arrow_type}")


def _blob_rows(chunk: pa.Array, off_type: type) -> np.ndarray:
    """[n, L] uint8 view of a binary array (offsets of `off_type`) whose values all have length
    L (no copy)."""
    if chunk.null_count:
        raise SketchError(f"{chunk.null_count} null sketch(es): select rows with sketches first")
    n = len(chunk)
    buffers = chunk.buffers()
    offsets: np.ndarray = np.frombuffer(buffers[1], dtype=off_type)[chunk.offset : chunk.offset + n + 1]
    start, width = int(offsets[0]), int(offsets[1] - offsets[0])
    # equal sizes: the rows then start every `width` bytes (checked in full when the total
    # disagrees; otherwise a shifted row would fail the per-row header check of the caller)
    if int(offsets[-1]) - start != n * width:
        lengths = np.diff(offsets)
        raise SketchError(f"sketches of different sizes ({sorted(set(lengths.tolist()))[:4]} bytes)")
    if width < SKETCH_HEADER_BYTES:
        raise SketchError(f"a sketch of {width} bytes is shorter than its header")
    data = np.frombuffer(buffers[2], dtype=np.uint8)
    return data[start : start + n * width].reshape(n, width)


def _sketch_rows(
    blobs: pa.Array | pa.ChunkedArray | Sequence[bytes],
) -> tuple[list[np.ndarray], SketchGrid, int]:
    """The sketches of one column as [n, L] byte views, one per chunk (no copy), checked:
    (views, grid, dims)."""
    if isinstance(blobs, pa.ChunkedArray):
        chunks = [c for c in blobs.chunks if len(c)]
    elif isinstance(blobs, pa.Array):
        chunks = [blobs] if len(blobs) else []
    else:
        chunks = [pa.array(list(blobs), type=pa.binary())] if len(blobs) else []
    if not chunks:
        raise SketchError("no sketches to decode")
    off_type = _offset_type(chunks[0].type)  # one type for all chunks of a column
    views = [_blob_rows(c, off_type) for c in chunks]
    widths = {v.shape[1] for v in views}
    if len(widths) != 1:
        raise SketchError(f"sketches of different sizes ({sorted(widths)} bytes)")
    width = widths.pop()
    first = views[0][0]
    magic, version, grid_id, k, d, _, _ = _HEADER.unpack(first[:SKETCH_HEADER_BYTES].tobytes())
    if magic != SKETCH_MAGIC or version != SKETCH_VERSION or grid_id not in GRIDS:
        raise SketchError(
            f"not a v{SKETCH_VERSION} quantile sketch (magic {magic!r}, version {version}, grid {grid_id})"
        )
    grid = GRIDS[grid_id]
    if k != grid.knots or width != SKETCH_HEADER_BYTES + 4 * k * d:
        raise SketchError(f"sketch of {k} knots x {d} dims does not fit its {width} bytes")
    return views, grid, d


def decode_sketches(*columns: pa.Array | pa.ChunkedArray | Sequence[bytes]) -> Sketches:
    """Decode the sketches of one or more features of the same E episodes (e.g. the
    `proprio_sketch` and `action_sketch` columns) into one [E, D1 + D2 + ..., K] array (one
    copy of the knots, straight from each Arrow chunk).

    Raises:
        SketchError: a null, a bad header, different grids/dims within a column, columns of
            different episodes (step counts), or a size that does not match.
    """
    if not columns:
        raise SketchError("no sketch column to decode")
    parts = [_sketch_rows(c) for c in columns]
    if len({grid.grid_id for _, grid, _ in parts}) != 1:
        raise SketchError("sketch columns of different grids")
    e = sum(len(v) for v in parts[0][0])
    if any(sum(len(v) for v in views) != e for views, _, _ in parts):
        raise SketchError("sketch columns of different lengths")
    grid = parts[0][1]
    total_d = sum(d for _, _, d in parts)
    out = np.empty((e, total_d, grid.knots), dtype=np.float32)
    heads = np.empty((len(parts), e, 4), dtype="<u4")  # magic, version..K, D.., count
    dims = np.cumsum([0] + [d for _, _, d in parts]).tolist()
    k = grid.knots
    for i, (views, _, _) in enumerate(parts):  # one C loop over the chunks per column
        np.concatenate([v[:, :SKETCH_HEADER_BYTES].view("<u4") for v in views], out=heads[i])
    lengths = [[len(v) for v in views] for views, _, _ in parts]
    if all(n == lengths[0] for n in lengths):  # chunks of the same rows: each filled whole in turn
        at = 0
        for n, *chunk in zip(lengths[0], *(views for views, _, _ in parts), strict=True):
            for v, lo, hi in zip(chunk, dims[:-1], dims[1:], strict=True):
                out[at : at + n, lo:hi] = v[:, SKETCH_HEADER_BYTES:].view("<f4").reshape(n, hi - lo, k)
            at += n
    else:
        for (views, _, d), lo in zip(parts, dims[:-1], strict=True):
            payload = [v[:, SKETCH_HEADER_BYTES:].view("<f4").reshape(len(v), d, k) for v in views]
            np.concatenate(payload, out=out[:, lo : lo + d])
    # within a column: one magic, version, grid, K, D in every sketch; across columns: one count
    if (heads[:, :, :3] != heads[:, :1, :3]).any():
        raise SketchError("sketches of different grids or dimensions: select one robot type")
    if (heads[:, :, 3] != heads[:1, :, 3]).any():
        raise SketchError("sketch columns disagree on the episodes' step counts")
    counts = heads[0, :, 3].astype(np.int64)
    if (counts < 1).any():
        raise SketchError("a sketch of an empty episode")
    return Sketches(counts=counts, knots=out, grid=grid)
