"""Normalization statistics of a dataset's snapshot, merged from its episodes rows.

`Dataset.norm_stats()` reads, at the snapshot's pinned episodes version, only the statistics
columns of the selected episodes rows (never a step or a frame) and merges them with
`pi_format.stats.merge_norm_stats`: exact moments (count, mean, std, min, max) and q01/q99 from
the per-episode quantile sketches, within `NormStats.rank_error_bound`. The sketches are read
on demand, not when the dataset opens, so opening a large selection costs what it did.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.dataset as pads
from pi_format import LakeLayout
from pi_format.lake import pinned_rows
from pi_format.stats import NormStats, Sketches, decode_sketches, merge_norm_stats

from pi_loader._errors import SnapshotError
from pi_loader.reading._lake import _read, resolve_tables
from pi_loader.reading._storage import Storage
from pi_loader.selection._snapshot import Snapshot

# sample key -> the episodes columns' feature name (as in Dataset.stats and batches)
FEATURES = {"observation.state": "proprio", "action": "action"}
_STATS = ("mean", "std", "min", "max", "mean64", "m2", "sketch")
COLUMNS = (
    "episode_id",
    "attempt_id",
    "committed_at_ns",
    "step_count",
    *(f"{kind}_{s}" for kind in FEATURES.values() for s in _STATS),
)


def read_stats_rows(
    layout: LakeLayout,
    storage: Storage,
    snapshot: Snapshot,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """The statistics columns (`COLUMNS`) of the snapshot's episodes rows, in its order.

    Raises:
        SnapshotError: the episodes table at the pinned version lacks a selected attempt.
        SnapshotDataMissingError: its files are gone (vacuumed).
    """
    # the snapshot's exact rows, in whatever files hold them now (see _selection)
    files, versions = resolve_tables(layout, None, storage_options)
    ids = list(snapshot.episode_ids)
    rows = _read(files, storage, ids, list(COLUMNS), pads.field("episode_id").isin(ids))
    rows = pinned_rows(rows, ids, snapshot.attempt_ids) if rows.num_rows else rows
    got = rows.column("episode_id").to_pylist() if rows.num_rows else []
    if got != ids or rows.column("attempt_id").to_pylist() != list(snapshot.attempt_ids):
        raise SnapshotError(
            f"the episodes table at version {versions['episodes']} does not hold the "
            f"snapshot's {len(ids)} episode attempts (found {len(got)}); GC removes attempts no pin holds"
        )
    return rows


def read_norm_stats(
    layout: LakeLayout,
    storage: Storage,
    snapshot: Snapshot,
    storage_options: Mapping[str, str] | None = None,
) -> dict[str, NormStats]:
    """{"observation.state": ..., "action": ...} over the snapshot's episodes (see module doc).

    Raises:
        SnapshotError / SnapshotDataMissingError: as `read_stats_rows`.
    """
    rows = read_stats_rows(layout, storage, snapshot, storage_options)
    # columns a lake predates (older rows) read as absent: the merge treats them as null
    merged = merge_norm_stats(rows, tuple(FEATURES.values()))
    return {key: merged[kind] for key, kind in FEATURES.items()}


def read_sketches(
    layout: LakeLayout,
    storage: Storage,
    snapshot: Snapshot,
    storage_options: Mapping[str, str] | None = None,
) -> dict[str, Sketches | None]:
    """{"observation.state": ..., "action": ...}: the snapshot's decoded quantile sketches, or
    None for a feature some of whose rows predate the sketches."""
    rows = read_stats_rows(layout, storage, snapshot, storage_options)
    out: dict[str, Sketches | None] = {}
    for key, kind in FEATURES.items():
        name = f"{kind}_sketch"
        present = name in rows.column_names and rows.column(name).null_count == 0
        out[key] = decode_sketches(rows.column(name)) if present else None
    return out
