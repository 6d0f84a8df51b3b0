"""Where each episode's raw rows are: planned once per backfill run, so a worker reads only the
raw files that hold its episode instead of filtering the whole raw table per episode.

A group commit's raw file holds the messages of a few dozen episodes from several robots, so its
episode_id range (the Delta statistics) spans most ids: filtering the table per episode opened
the footers of nearly every raw file for every episode, a cost that grew with the lake. Here the
`episode_id` column of the raw files that may hold a selected id is read once (statistics still
prune files whose range holds none), and each episode is handed the few files that do.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pi_format import LakeLayout
from pi_format.lake import table_filesystem

# Joins an episode's raw file paths into one string (the job's records are tuples of strings);
# cannot occur in a path the writers make.
FILES_SEP = "\x1f"


def raw_files_of(layout: LakeLayout, episode_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """episode_id -> the raw table's files (paths relative to the table, as in the Delta log)
    holding rows of it, for `episode_ids`; ids without raw rows are absent.

    Example:
        >>> raw_files_of(LakeLayout("/data/lake"), ["r1-000001"])
        {'r1-000001': ('part-sink-0-3f6c....parquet',)}
    """
    from deltalake import DeltaTable

    if not episode_ids:
        return {}
    wanted = np.array(sorted(set(episode_ids)), dtype=object)
    wanted_array = pa.array(wanted.tolist(), pa.string())
    actions = pa.table(DeltaTable(layout.raw).get_add_actions(flatten=True))
    names = actions.column_names
    paths = actions.column("path").to_pylist()
    lo = actions.column("min.episode_id").to_pylist() if "min.episode_id" in names else [None] * len(paths)
    hi = actions.column("max.episode_id").to_pylist() if "max.episode_id" in names else [None] * len(paths)
    filesystem, base = table_filesystem(layout.raw)
    found: dict[str, list[str]] = {}
    for path, low, high in zip(paths, lo, hi, strict=True):
        bounded = low is not None and high is not None
        if bounded and np.searchsorted(wanted, low, side="left") >= np.searchsorted(
            wanted, high, side="right"
        ):
            continue  # no selected id in this file's range
        ids = pq.read_table(f"{base}/{path}", columns=["episode_id"], filesystem=filesystem).column(
            "episode_id"
        )
        present = pc.unique(
            ids.combine_chunks().filter(pc.is_in(ids.combine_chunks(), value_set=wanted_array))
        )
        for episode_id in present.to_pylist():
            found.setdefault(str(episode_id), []).append(path)
    return {e: tuple(sorted(p)) for e, p in found.items()}
