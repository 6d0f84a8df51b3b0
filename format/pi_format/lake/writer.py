"""The lake's commit protocol, written once: every writer of the lake goes through `LakeWriter`.

Commit order (SPEC.md §7.7): rows of `steps` and `video` first, the `episodes` row last. It is
the commit marker (`pi_format.lake.visibility` is the reading side of the same rule).

Architecture decision 3: an episode becomes visible when its `episodes` row is committed, so
`commit_episode` writes steps and video first and the episodes row last. Kafka redelivers and
Flink replays, so the episodes commit is idempotent: the writer remembers which episodes are
committed (read from the episodes table at start, then kept up to date) and also records a
Delta application transaction per episode, checked before each commit.

Several writers may commit to one lake at once (two jobs, a backfill next to the stream job).
delta-rs resolves concurrent appends itself (optimistic concurrency: it re-tries the commit at
the next version), except when the winning commit carries the same application transaction,
i.e. another writer committed the same episode first: delta-rs then raises CommitFailedError,
which `commit_episode` turns into "already committed" (measured with two processes: 60 of 60
distinct commits kept; of 30 same-episode pairs, 30 committed once and 30 refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pi_format.lake.layout import LakeLayout
from pi_format.lake.schemas import TABLE_SCHEMAS


@dataclass(frozen=True, slots=True, eq=False)
class EpisodeRows:
    """The lake rows of one episode attempt, ready for `LakeWriter.commit_episode` (the stream
    job's featurizer, a backfill and a quarantine release all produce these).

    Example:
        >>> rows = EpisodeRows(episode=episode_row, steps=steps_rows, video=video_rows)
        >>> rows.episode_id, rows.attempt_id
        ('r1-000001', '5c0f...')
    """

    episode: pa.Table  # one row, pi_format.EPISODES_SCHEMA
    steps: pa.Table  # pi_format.STEPS_SCHEMA
    video: pa.Table  # pi_format.VIDEO_SCHEMA

    @property
    def episode_id(self) -> str:
        return str(self.episode.column("episode_id")[0].as_py())

    @property
    def attempt_id(self) -> str:
        return str(self.episode.column("attempt_id")[0].as_py())

# Delta application transaction of an episode's commit. One app_id per episode with version 1:
# an episode is committed at most once, ever, so a new job run (new attempt ids, rewound
# offsets) can never skip an episode that is not yet in the lake -- unlike a per-partition
# offset watermark, which a topic recreated after a broker restart would reset below.
EPISODE_TXN_VERSION = 1

# Rows per Parquet row group: ~1k steps read in 1-2 ms (ARCHITECTURE.md); video rows hold a
# ~10-50 kB chunk each, so a small group keeps one sample's read small.
_ROW_GROUP_ROWS = {"steps": 1024, "video": 64, "raw": 64, "episodes": 1024, "quarantine": 1024}
# String columns that repeat within a file keep dictionary encoding; everything else turns it
# off, because dictionary-encoded floats make proprio files larger than raw (0.77x). delta-rs
# ignores column_properties on nested leaves, hence the default-off + per-column-on shape.
_DICT_COLUMNS = ("episode_id", "attempt_id", "camera", "codec", "robot_id", "robot_type", "task")


def table_writer_properties(name: str) -> Any:
    """The Parquet settings every writer of lake table `name` should use (a
    `deltalake.WriterProperties`): small row groups for video, so a reader fetching one
    episode's chunks reads only the row groups holding it, and dictionary encoding only on
    repeated strings.

    Example:
        >>> write_deltalake(layout.table("video"), rows, writer_properties=table_writer_properties("video"))
    """
    from deltalake import ColumnProperties, WriterProperties

    if name not in _ROW_GROUP_ROWS:
        raise ValueError(f"unknown lake table {name!r}; expected one of {sorted(_ROW_GROUP_ROWS)}")
    names = TABLE_SCHEMAS[name].names
    return WriterProperties(
        max_row_group_size=_ROW_GROUP_ROWS[name],
        default_column_properties=ColumnProperties(dictionary_enabled=False),
        column_properties={c: ColumnProperties(dictionary_enabled=True) for c in _DICT_COLUMNS if c in names},
    )


# Tries of the episodes commit when concurrent writers keep winning (delta-rs already re-tries
# each one up to 15 times at successive versions).
_COMMIT_ATTEMPTS = 3


def episode_app_id(episode_id: str) -> str:
    """The Delta application-transaction id that marks `episode_id` as committed."""
    return f"pilake-episode-{episode_id}"


class LakeWriter:
    """Appends to the lake's Delta tables; other writers may commit to the same lake at once.

    Example:
        >>> writer = LakeWriter(LakeLayout("/data/lake"))
        >>> writer.committed_attempt("r1-000001") is None
        True
        >>> version = writer.commit_episode(episode_rows)
    """

    def __init__(self, layout: LakeLayout) -> None:
        from deltalake import DeltaTable

        self.layout = layout
        # episodes commits refused because a concurrent writer won the race (for metrics/tests)
        self.commit_conflicts = 0
        self._tables: dict[str, DeltaTable] = {}
        for name, schema in TABLE_SCHEMAS.items():
            # mode="ignore": create when missing, open as-is otherwise
            self._tables[name] = DeltaTable.create(layout.table(name), schema=schema, mode="ignore")
        ids = self._tables["episodes"].to_pyarrow_table(columns=["episode_id", "attempt_id"])
        self._committed: dict[str, str] = dict(
            zip(ids.column("episode_id").to_pylist(), ids.column("attempt_id").to_pylist(), strict=True)
        )

    @property
    def committed_count(self) -> int:
        return len(self._committed)

    def committed_attempt(self, episode_id: str) -> str | None:
        """attempt_id of the visible episodes row of `episode_id`, or None if not committed."""
        return self._committed.get(episode_id)

    def _append(self, name: str, rows: pa.Table, app_id: str | None = None) -> int:
        from deltalake import CommitProperties, Transaction, write_deltalake

        schema = TABLE_SCHEMAS[name]
        if not rows.schema.equals(schema):
            try:
                rows = rows.select(schema.names).cast(schema)
            except (KeyError, ValueError, pa.ArrowInvalid) as err:
                raise ValueError(
                    f"rows for table {name!r} must match pi_format.TABLE_SCHEMAS[{name!r}]: {err}"
                ) from err
        props = table_writer_properties(name)
        commit = (
            CommitProperties(app_transactions=[Transaction(app_id, EPISODE_TXN_VERSION)])
            if app_id is not None
            else None
        )
        table = self._tables[name]
        write_deltalake(table, rows, mode="append", writer_properties=props, commit_properties=commit)
        return int(table.version())

    def write_raw(self, rows: pa.Table) -> int:
        """Append rows of pi_format.RAW_SCHEMA; returns the raw table's new version."""
        return self._append("raw", rows)

    def write_quarantine(self, rows: pa.Table) -> int:
        """Append rows of pi_format.QUARANTINE_SCHEMA; returns the table's new version."""
        return self._append("quarantine", rows)

    def commit_episode(self, episode_rows: EpisodeRows) -> int:
        """Write steps, video, then the episodes row (the commit marker).

        Returns:
            The episodes table's version holding the row, or -1 when the episode was already
            committed (then nothing is written).

        Example:
            >>> writer.commit_episode(episode_rows)
            7
            >>> writer.commit_episode(episode_rows)
            -1
        """
        from deltalake.exceptions import CommitFailedError

        eid = episode_rows.episode_id
        app_id = episode_app_id(eid)
        episodes = self._tables["episodes"]
        if eid in self._committed:
            return -1
        # Belt and braces: delta-rs does not enforce app transactions, a committed one is only
        # seen if we look (e.g. a row committed by a writer that has since been replaced).
        episodes.update_incremental()
        if (episodes.transaction_version(app_id) or 0) >= EPISODE_TXN_VERSION:
            self._committed[eid] = self._attempt_in_table(eid) or episode_rows.attempt_id
            return -1
        # Rows of steps/video written here but never followed by an episodes row (a crash in
        # between) carry an attempt id no episodes row names: invisible, and removed by GC.
        if episode_rows.steps.num_rows:
            self._append("steps", episode_rows.steps)
        if episode_rows.video.num_rows:
            self._append("video", episode_rows.video)
        for attempt in range(_COMMIT_ATTEMPTS):
            try:
                version = self._append("episodes", episode_rows.episode, app_id=app_id)
                break
            except CommitFailedError as err:
                self.commit_conflicts += 1
                # Lost a race with another writer. If it committed this episode, we are done
                # (our steps/video rows stay invisible, decision 3); otherwise try again.
                episodes.update_incremental()
                if (episodes.transaction_version(app_id) or 0) >= EPISODE_TXN_VERSION:
                    self._committed[eid] = self._attempt_in_table(eid) or episode_rows.attempt_id
                    return -1
                if attempt + 1 == _COMMIT_ATTEMPTS:
                    raise CommitFailedError(
                        f"episodes commit of {eid} to {self.layout.episodes} failed {_COMMIT_ATTEMPTS} "
                        f"times against concurrent writers: {err}"
                    ) from err
        self._committed[eid] = episode_rows.attempt_id
        return version

    def _attempt_in_table(self, episode_id: str) -> str | None:
        row = self.committed_episode_row(episode_id)
        return str(row[0].column("attempt_id")[0].as_py()) if row is not None else None

    def committed_episode_row(self, episode_id: str) -> tuple[pa.Table, int] | None:
        """The visible episodes row of `episode_id` and the table version it was read at.

        Reads the episodes table (a scan filtered on episode_id): meant for the rare duplicate,
        not for every message.

        Example:
            >>> row, version = writer.committed_episode_row("r1-000001")
        """
        import pyarrow.compute as pc

        table = self._tables["episodes"]
        table.update_incremental()
        rows = table.to_pyarrow_table(filters=pc.field("episode_id") == episode_id)
        return (rows.slice(0, 1), int(table.version())) if rows.num_rows else None
