"""Which row groups of a Delta data file hold a given id, kept per file for a long-running reader.

The raw table holds every message the stream job received (~11 per episode: 1.1 million rows at
100,000 episodes) in files that compaction bin-packs, not sorts, so neither file nor row-group
statistics narrow a filter on an episode or attempt id: a filtered scan reads the id column of
every file (~0.5 s a look-up at 100,000 episodes, for the UI's trace and quarantine previews).
Here the distinct (id, row group) pairs of a file are read once and kept under the file's path:
Delta never rewrites a data file in place (a compaction writes new paths), so an index kept
under a path stays true; `forget` drops the files a table no longer lists.

Example:
    >>> groups = row_groups("/lake/raw", "part-1.parquet", "episode_id", {"ep-1"}, opener)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

_LOCK = threading.Lock()
# (table uri, file path, column) -> (table of distinct (id, group) pairs, the file's footer):
# ~1 row per attempt and file (a few MB at 100,000 episodes), and the footer so that a hit does
# not parse it again
_INDEX: dict[tuple[str, str, str], tuple[pa.Table, Any]] = {}


def _index(table_uri: str, path: str, column: str, opener: Callable[[], Any]) -> tuple[pa.Table, Any]:
    import numpy as np

    key = (table_uri, path, column)
    with _LOCK:
        kept = _INDEX.get(key)
    if kept is not None:
        return kept
    parquet = opener()
    meta = parquet.metadata
    ids = parquet.read(columns=[column]).column(column)
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    groups = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
    index = pa.table({"id": ids, "group": groups}).group_by(["id", "group"]).aggregate([])
    with _LOCK:
        _INDEX[key] = (index, meta)
    return index, meta


def row_groups(
    table_uri: str, path: str, column: str, values: Iterable[str], opener: Callable[[], Any]
) -> tuple[list[int], Any]:
    """The row groups of data file `path` whose `column` holds one of `values`, and the file's
    footer (pq.FileMetaData); `opener()` gives the file as a pq.ParquetFile, called only the
    first time the file is indexed."""
    import numpy as np
    import pyarrow.compute as pc

    index, meta = _index(table_uri, path, column, opener)
    wanted = pa.array(sorted(set(values)), pa.string())
    hits = pc.filter(index.column("group"), pc.is_in(index.column("id"), value_set=wanted))
    return sorted({int(g) for g in np.asarray(hits)}), meta


def forget(table_uri: str, current: Iterable[str]) -> None:
    """Drop the index of `table_uri`'s files not in `current` (compacted or vacuumed away)."""
    keep = set(current)
    with _LOCK:
        for key in [k for k in _INDEX if k[0] == table_uri and k[1] not in keep]:
            del _INDEX[key]


def clear() -> None:
    """Forget every index (tests)."""
    with _LOCK:
        _INDEX.clear()
