"""Per-episode strings (episode and attempt ids) packed into two arrays, for the copies of a
Dataset that workers hold.

A tuple of 100,000 ids is 100,000 Python objects (~70 bytes each, plus the pickle that carries
them into every worker); packed, an id costs its UTF-8 bytes plus a 4-byte offset, and a worker
unpickles two buffers. Readers index one id at a time (a cache miss, an error message), so
decoding on access costs nothing that matters.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import numpy as np
import pyarrow as pa


class PackedStrings(Sequence[str]):
    """An immutable sequence of str stored as UTF-8 bytes and int32 offsets.

    Example:
        >>> ids = PackedStrings.of(["ep-1", "ep-22"])
        >>> ids[1], len(ids), list(ids)
        ('ep-22', 2, ['ep-1', 'ep-22'])
    """

    __slots__ = ("_data", "_offsets")

    def __init__(self, offsets: np.ndarray, data: np.ndarray) -> None:
        # data is uint8 (not bytes) so a protocol-5 pickle can carry it out of band
        if offsets.ndim != 1 or len(offsets) < 1 or int(offsets[-1]) != len(data):
            raise ValueError(
                f"offsets {offsets[:3]}... of length {len(offsets)} do not fit {len(data)} bytes"
            )
        self._offsets = offsets
        self._data = data

    @classmethod
    def of(cls, values: Iterable[str]) -> PackedStrings:
        """Pack `values` (any iterable of str)."""
        encoded = [str(v).encode() for v in values]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        return cls(_narrow(offsets), np.frombuffer(b"".join(encoded), dtype=np.uint8))

    @classmethod
    def from_arrow(cls, column: pa.Array | pa.ChunkedArray) -> PackedStrings:
        """Pack an Arrow string column without making a Python object per value (nulls refused)."""
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if array.null_count:
            raise ValueError(f"cannot pack a string column with {array.null_count} null(s)")
        array = array.cast(pa.large_string())
        _, offsets_buffer, data_buffer = array.buffers()
        offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[array.offset : array.offset + len(array) + 1]
        start, end = int(offsets[0]), int(offsets[-1])
        data = (
            np.frombuffer(data_buffer, dtype=np.uint8)[start:end].copy()
            if data_buffer is not None
            else np.zeros(0, np.uint8)
        )
        return cls(_narrow(offsets - start), data)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        n = len(self)
        i = int(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {index} out of range for {n} strings")
        return self._data[int(self._offsets[i]) : int(self._offsets[i + 1])].tobytes().decode()

    def __iter__(self) -> Iterator[str]:
        data, offsets = self._data.tobytes(), self._offsets.tolist()
        for i in range(len(offsets) - 1):
            yield data[offsets[i] : offsets[i + 1]].decode()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedStrings):
            return np.array_equal(self._data, other._data) and np.array_equal(self._offsets, other._offsets)
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    @property
    def nbytes(self) -> int:
        """Bytes held: the UTF-8 data and the offsets."""
        return int(self._data.nbytes + self._offsets.nbytes)

    def __repr__(self) -> str:
        head = ", ".join(repr(s) for s in self[:3])
        return f"PackedStrings([{head}{', ...' if len(self) > 3 else ''}], n={len(self)})"


def _narrow(offsets: np.ndarray) -> np.ndarray:
    return offsets.astype(np.int32) if int(offsets[-1]) < 2**31 else offsets.astype(np.int64)
