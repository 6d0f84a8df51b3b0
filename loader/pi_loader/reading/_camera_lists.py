"""Each selected episode's camera names, as the few distinct lists and one int32 index per episode.

A tuple holding one (shared) tuple per episode costs 8 bytes a pointer per episode in every
process holding a Dataset, and a pickle reference per episode carried into every loader worker
(3.7 MB of private memory per worker at 460,000 episodes, measured; 8 MB at 1,000,000). The
lists are few (a fleet's camera rigs), so they are kept once and each episode holds an index
into them: an int32 array that a pickled Dataset carries out of band, which loader workers map
from the file the main process shares (`pi_loader.delivery._shared_dataset`) instead of copying.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np


class CameraLists(Sequence[tuple[str, ...]]):
    """An immutable sequence of camera-name tuples, one per episode, stored as distinct lists
    and an int32 index array.

    Example:
        >>> lists = CameraLists((("front", "wrist"), ("front",)), np.array([0, 1, 0], np.int32))
        >>> lists[2], len(lists), lists.counts().tolist()
        (('front', 'wrist'), 3, [2, 1, 2])
    """

    __slots__ = ("_distinct", "_index")

    def __init__(self, distinct: Sequence[tuple[str, ...]], index: np.ndarray) -> None:
        index = np.asarray(index)
        if index.ndim != 1 or index.dtype != np.int32:
            raise ValueError(f"the index is a 1-d int32 array, got {index.dtype} of shape {index.shape}")
        if index.size and (int(index.min()) < 0 or int(index.max()) >= len(distinct)):
            raise ValueError(
                f"index values must lie in [0, {len(distinct)}), got {index.min()}..{index.max()}"
            )
        self._distinct = tuple(tuple(str(c) for c in cams) for cams in distinct)
        self._index = index

    @property
    def distinct(self) -> tuple[tuple[str, ...], ...]:
        """The distinct camera lists (each episode's is one of them)."""
        return self._distinct

    @property
    def indices(self) -> np.ndarray:
        """int32 [episodes]: each episode's list, an index into `distinct`."""
        return self._index

    def counts(self) -> np.ndarray:
        """int32 [episodes]: how many cameras each episode has (no Python loop per episode)."""
        return np.array([len(c) for c in self._distinct], np.int32)[self._index]

    def __len__(self) -> int:
        return len(self._index)

    @overload
    def __getitem__(self, i: int) -> tuple[str, ...]: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[tuple[str, ...], ...]: ...

    def __getitem__(self, i: int | slice) -> tuple[str, ...] | tuple[tuple[str, ...], ...]:
        if isinstance(i, slice):
            return tuple(self._distinct[k] for k in self._index[i].tolist())
        return self._distinct[int(self._index[i])]

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        distinct = self._distinct
        return (distinct[k] for k in self._index.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == len(self) and all(a == tuple(b) for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CameraLists(distinct={self._distinct!r}, episodes={len(self)})"
