"""What a batch does when one of its samples reads damaged bytes (architecture decision 10):
raise (`on_corrupt="raise"`, the default: a `CorruptDataError` naming the lake table, file, row
group or page, and the episode), or skip that sample (`on_corrupt="skip"`, `Loader(...,
on_corrupt="skip")`): the batch is rebuilt without it (one sample at a time finds which; the
others come from the caches just filled; a batch of only damaged samples comes empty), the
skip is counted (`Dataset.read_stats`
"corrupt_skipped", summed into `LoaderStats.corrupt_skipped` and the metric
`pilake_loader_corrupt_skipped_total`) and logged. Never a wrong sample.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from pi_loader._errors import CorruptDataError

log = logging.getLogger("pi_loader")

ON_CORRUPT = ("raise", "skip")

Batch = dict[str, np.ndarray]


def check_on_corrupt(value: str) -> str:
    """`value` if it is one of ON_CORRUPT (ValueError naming them otherwise)."""
    if value not in ON_CORRUPT:
        raise ValueError(f"on_corrupt must be one of {ON_CORRUPT}, got {value!r}")
    return value


def batch_without_corrupt(
    build: Callable[[np.ndarray], Batch], flat: np.ndarray, first: CorruptDataError, size: int
) -> tuple[Batch, np.ndarray, int]:
    """The batch of `flat` built by `build` without the samples whose bytes are damaged, the
    indices it holds, and how many were skipped; `first` is the error the whole batch met,
    `size` the dataset's sample count. A batch whose every sample is damaged comes back empty
    (its arrays with 0 rows, shaped as the next readable sample's).

    Raises:
        CorruptDataError: no sample of the dataset reads.
    """
    good: list[int] = []
    skipped = 0
    for index in flat.tolist():
        try:
            build(np.array([index], np.int64))
        except CorruptDataError as err:
            skipped += 1
            log.warning("pi_loader: skipped sample %d: %s", index, err)
            continue
        good.append(index)
    kept = np.array(good, np.int64)
    if good:
        return build(kept), kept, skipped
    start = int(flat.max()) + 1
    for index in (i % size for i in range(start, start + size)):
        try:
            shaped = build(np.array([index], np.int64))
        except CorruptDataError:
            continue
        return {key: value[:0] for key, value in shaped.items()}, kept, skipped
    raise first
