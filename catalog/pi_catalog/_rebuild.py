"""What `Catalog.rebuild` indexes: the lake's visible episodes rows, read in bounded memory.

Sits between the lake and the catalog: the visibility rule is pi_format.lake's (latest attempt
per episode, deleted episodes left out; `pi_format.lake.visibility`), applied here in two
passes over one Delta snapshot of `episodes` so that a large lake never has to fit in memory:
first the three commit columns of every row decide the winning (episode_id, attempt_id) pairs,
then the indexed columns stream in batches and only the winners' rows are kept.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pi_format import LakeLayout
from pi_format.lake.visibility import COMMIT_COLUMNS, latest_commits, read_deleted_ids, visible_rows

from pi_catalog._errors import PiCatalogError
from pi_catalog._schema import INDEXED_FIELDS, index_rows

# Most bytes of episode ids bound into one statement (`forget_episodes`): query parameters
# travel in the URL on a server, whose length ClickHouse caps (http_max_uri_size, 1 MiB) and
# proxies cap lower (often 8-64 KiB).
_MAX_IDS_BYTES = 16_000


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """What `Catalog.rebuild` did.

    Attributes:
        episodes: episodes in the new index (the visible episodes of the lake).
        deleted_excluded: episodes with committed rows that the `deletions` table removed.
        superseded_rows: episodes rows of older attempts left out (a backfill superseded them).
        episodes_version: the Delta version of `episodes` that was read.
        seconds: how long the rebuild took, wall clock.
    """

    episodes: int
    deleted_excluded: int
    superseded_rows: int
    episodes_version: int
    seconds: float


@dataclass(frozen=True, slots=True)
class LakeEpisodes:
    """One Delta snapshot of `episodes` and its visible (episode_id, attempt_id) pairs."""

    dataset: Any  # pyarrow.dataset.Dataset of the snapshot
    version: int
    winners: pa.Table  # COMMIT_COLUMNS of the visible rows, one per episode
    deleted: pa.Array  # the deletions table's ids when the winners were decided
    deleted_excluded: int
    superseded_rows: int

    def index_batches(self, batch_rows: int) -> Iterator[pa.Table]:
        """The visible rows as the index takes them (`index_rows`), about `batch_rows` per
        table (Delta row groups are small: they are gathered up to it)."""
        names = [f.name for f in INDEXED_FIELDS]
        pending: list[pa.Table] = []
        pending_rows = 0
        for batch in self.dataset.to_batches(columns=names, batch_size=batch_rows):
            rows = visible_rows(pa.Table.from_batches([batch]), self.winners)
            if rows.num_rows == 0:
                continue
            pending.append(rows)
            pending_rows += rows.num_rows
            if pending_rows >= batch_rows:
                yield index_rows(pa.concat_tables(pending), self.version)
                pending, pending_rows = [], 0
        if pending:
            yield index_rows(pa.concat_tables(pending), self.version)


def read_lake_episodes(layout: LakeLayout) -> LakeEpisodes:
    """The latest snapshot of the lake's `episodes` table and the pairs visible in it (only the
    commit columns of every row are read here).

    Raises:
        PiCatalogError: the lake has no episodes table at `layout.episodes`.
    """
    from deltalake import DeltaTable

    try:
        delta = DeltaTable(layout.episodes)
    except Exception as err:  # deltalake raises TableNotFoundError and friends
        raise PiCatalogError(
            f"cannot read the episodes table at {layout.episodes}: {err}; check the lake root (PILAKE_LAKE)"
        ) from err
    dataset = delta.to_pyarrow_dataset()
    commits = dataset.to_table(columns=list(COMMIT_COLUMNS))
    deleted = read_deleted_ids(layout)
    latest = latest_commits(commits)
    winners = latest_commits(latest, deleted)
    return LakeEpisodes(
        dataset=dataset,
        version=int(delta.version()),
        winners=winners,
        deleted=deleted,
        deleted_excluded=latest.num_rows - winners.num_rows,
        superseded_rows=commits.num_rows - latest.num_rows,
    )


def unique_ids(episode_ids: Sequence[str] | pa.Array | pa.ChunkedArray) -> list[str]:
    """The distinct ids, in first-seen order, or a TypeError naming the first value that is not
    a string."""
    if isinstance(episode_ids, str):
        raise TypeError(f"episode_ids must be a sequence of ids, got the string {episode_ids!r}")
    values = episode_ids.to_pylist() if isinstance(episode_ids, pa.Array | pa.ChunkedArray) else episode_ids
    seen: dict[str, None] = {}
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"episode ids must be strings, got {value!r} ({type(value).__name__})")
        seen.setdefault(value, None)
    return list(seen)


def id_batches(ids: Sequence[str]) -> Iterator[list[str]]:
    """`ids` cut into lists of at most `_MAX_IDS_BYTES` of ids each (at least one id each)."""
    batch: list[str] = []
    size = 0
    for value in ids:
        cost = len(value.encode()) + 4  # quotes and separator of the bound array
        if batch and size + cost > _MAX_IDS_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(value)
        size += cost
    if batch:
        yield batch


def newly_deleted(before: pa.Array, now: pa.Array) -> list[str]:
    """Ids in `now` (the deletions table re-read) and not in `before`."""
    if len(now) == 0:
        return []
    fresh = now.filter(pc.invert(pc.is_in(now, value_set=before))) if len(before) else now
    return [str(v) for v in fresh.to_pylist()]
