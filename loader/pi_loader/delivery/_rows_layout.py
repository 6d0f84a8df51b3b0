"""The layout of a loader task's per-episode rows (`_batch_episodes.EpisodeRows`), parsed once.

Raises ValueError/TypeError for a layout that cannot be parsed; `BatchEpisodes.install` words it
as a `PiLoaderError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class RowsPlan:
    """An `EpisodeRows` layout parsed once: each part's dtype, items per row (+1 for packed
    offsets) and row shape, and which part is what (a worker installs ~30 batches a second;
    parsing the layout on each was most of `install`'s ~95 us, ~20 us with the parse kept).

    Example:
        >>> plan = RowsPlan.of((("keys", "int64", ()), ("offsets", "int64", ())))
        >>> plan.keys, plan.offsets, plan.lengths
        (0, 1, -1)
    """

    parts: tuple[tuple[np.dtype[Any], int, int, tuple[int, ...]], ...]
    keys: int
    offsets: int
    lengths: int  # -1: no lengths column
    columns: tuple[tuple[str, int], ...]
    packed: tuple[tuple[str, int], ...]
    files: tuple[tuple[str, int], ...]

    @staticmethod
    def of(layout: tuple[tuple[str, str, tuple[int, ...]], ...]) -> RowsPlan:
        names = [name for name, _, _ in layout]
        parts = tuple(
            (
                np.dtype(dtype),
                int(np.prod(shape, dtype=np.int64)),
                1 if name.startswith("packed:") else 0,
                tuple(shape),
            )
            for name, dtype, shape in layout
        )
        at = {name: i for i, name in enumerate(names)}
        if "keys" not in at or "offsets" not in at:
            raise ValueError("no keys or offsets part")

        def kind(prefix: str) -> tuple[tuple[str, int], ...]:
            return tuple((n[len(prefix) :], i) for i, n in enumerate(names) if n.startswith(prefix))

        return RowsPlan(
            parts=parts,
            keys=at["keys"],
            offsets=at["offsets"],
            lengths=at.get("column:lengths", -1),
            columns=kind("column:"),
            packed=kind("packed:"),
            files=kind("files:"),
        )
