"""The lake's commit protocol, written once: every writer of the lake goes through `LakeWriter`.

Commit order (SPEC.md §7.7): rows of `steps` and `video` first, the `episodes` rows last. They
are the commit markers (`pi_format.lake.visibility` is the reading side of the same rule).

Group commits (SPEC.md §7.8): `commit_episodes` commits many episodes at once, ONE Delta commit
per table (raw, steps, video, then episodes), so the log, the checkpoints and the per-commit
cost grow with the number of group commits, not of episodes. Their data files are written here
(`_files`) with a layout readers rely on, and each episodes row records where its rows are (the
locator columns).

Exactly once without a per-episode identity: Kafka redelivers and Flink replays, so the writer
remembers which episodes are committed (`_committed`: read once at open, then only the episodes
files other writers added since) and never commits one twice. Two writers racing for the same
episode are caught by Delta's conflict check: every episodes commit carries one application
transaction per hash bucket of its episode ids (a bounded set of 4096 ids, however large the
lake grows) and one for the writer's own identity (`writer_id`, which also fences a stale twin
of the same writer). delta-rs re-tries plain concurrent appends itself, but raises
CommitFailedError when a commit that won meanwhile carries one of the same application ids;
then the writer re-reads what was committed, drops those episodes as duplicates and re-tries
the rest.

Superseding attempts (a backfill, `pilake backfill`): with `supersede=True` an episode is a
duplicate only when its visible marker already carries the same `featurizer` as the new row;
otherwise the new marker is committed with a committed_at_ns later than the visible one's, so it
wins the visibility rule (latest commit) for every new reader, while the old attempt's rows stay
for the dataset pins that name them. The same bucket transactions catch two writers racing.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pi_format.lake._committed import CommittedEpisodes, read_file
from pi_format.lake._files import STEPS_ROW_GROUP_STEPS, WrittenFile, lay_out_group, write_file
from pi_format.lake.integrity import with_chunk_crcs
from pi_format.lake.layout import LakeLayout
from pi_format.lake.schemas import ADDED_COLUMNS, TABLE_SCHEMAS
from pi_format.lake.tables import ensure_lake_tables, post_commit_hooks, row_group_sizes
from pi_format.lake.visibility import read_deleted_ids


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


# Application-transaction buckets of episode ids (see the module doc): bounds the ids a
# checkpoint carries; two concurrent group commits of 32 episodes share a bucket with p ~ 22%,
# which costs the later one a re-read and a re-try, not a failure.
TXN_BUCKETS = 4096
# Tries of the episodes commit when concurrent writers keep winning (delta-rs already re-tries
# plain concurrent appends up to 15 times at successive versions).
_COMMIT_ATTEMPTS = 5
# Stages a group commit passes, for fault injection (`on_stage`): after the steps and video
# rows are committed and before the markers; after the markers are committed.
STAGE_ROWS_WRITTEN = "rows_written"
STAGE_COMMITTED = "committed"
# commitInfo key under which each commit carries a unique tag (to find its version afterwards)
_COMMIT_TAG = "pilake.commit"


def bucket_app_id(episode_id: str) -> str:
    """The application-transaction id of `episode_id`'s bucket (see the module doc)."""
    return f"pilake-episodes-{zlib.crc32(episode_id.encode()) % TXN_BUCKETS:04d}"


def writer_app_id(writer_id: str) -> str:
    """The application-transaction id of one writer identity (e.g. a sink subtask)."""
    return f"pilake-writer-{writer_id}"


@dataclass(frozen=True, slots=True)
class GroupCommit:
    """What `LakeWriter.commit_episodes` did.

    Example:
        >>> result = writer.commit_episodes([rows_a, rows_b])
        >>> result.version, result.committed, result.duplicates
        (12, ('r1-000001', 'r1-000002'), ())
    """

    version: int  # the episodes table's version holding the markers; -1: nothing committed
    committed: tuple[str, ...]  # episode ids committed now, sorted
    duplicates: tuple[str, ...]  # episode ids already committed before (nothing written for them)
    episodes: pa.Table  # the committed markers with their locator (what the catalog records)


def _table_path_uri(table: Any) -> str:
    uri = str(table.table_uri).rstrip("/")
    return uri.removeprefix("file://") if uri.startswith("file://") else uri


class LakeWriter:
    """Appends to the lake's Delta tables; other writers may commit to the same lake at once.

    Args:
        layout: the lake.
        writer_id: this writer's identity, unique among the writers running at once (the stream
            job uses one per sink subtask); it names its data files and fences a stale twin.
        on_stage: called with STAGE_ROWS_WRITTEN / STAGE_COMMITTED during each group commit
            (fault injection in tests; None in production).
        steps_group_steps: steps per steps row group (SPEC.md §7.8; readers take it from each
            episode's first row group, so lakes may mix sizes).

    Example:
        >>> writer = LakeWriter(LakeLayout("/data/lake"), writer_id="sink-0")
        >>> writer.committed_attempt("r1-000001") is None
        True
        >>> writer.commit_episodes([rows_a, rows_b]).committed
        ('r1-000001', 'r1-000002')
    """

    def __init__(
        self,
        layout: LakeLayout,
        *,
        writer_id: str = "default",
        on_stage: Callable[[str], None] | None = None,
        steps_group_steps: int = STEPS_ROW_GROUP_STEPS,
    ) -> None:
        from deltalake import DeltaTable

        if steps_group_steps < 1:
            raise ValueError(f"steps_group_steps must be >= 1, got {steps_group_steps}")
        self.layout = layout
        self.writer_id = writer_id
        self._steps_group_steps = steps_group_steps
        self._on_stage = on_stage
        # episodes commits refused because a concurrent writer won the race (for metrics/tests)
        self.commit_conflicts = 0
        self._tables: dict[str, DeltaTable] = ensure_lake_tables(layout)
        self._committed = CommittedEpisodes(self._tables["episodes"])
        # Deleted episodes (`pilake episodes delete`) are never committed again: a re-send after
        # GC removed their markers would otherwise come back (invisible, but recorded in the
        # catalog). Read once: an episode deleted later keeps its markers in this writer's memory.
        self._deleted = frozenset(read_deleted_ids(layout).to_pylist())
        self._sequence = self._tables["episodes"].transaction_version(writer_app_id(writer_id)) or 0
        # the current group commit's `replacing` (see commit_episodes)
        self._replacing: dict[str, str] = {}

    @property
    def committed_count(self) -> int:
        return len(self._committed)

    def committed_attempt(self, episode_id: str) -> str | None:
        """attempt_id of the visible episodes row of `episode_id`, or None if not committed."""
        return self._committed.attempt(episode_id)

    def _append(self, name: str, rows: pa.Table, *, find_version: bool = True) -> int:
        """Append rows to table `name` as one file of our own (delta-rs's `write_deltalake`
        costs grow with the table's file count: 10 -> 60 ms per append from 200 to 1,200 files)."""
        rows = _conform(name, rows)
        if rows.num_rows == 0:
            return int(self._tables[name].version())
        written = write_file(
            self.layout.table(name),
            rows,
            row_group_sizes(name, rows.num_rows),
            writer_id=self.writer_id,
            compression="zstd",
        )
        return self._commit_files(name, written, find_version=find_version)

    def write_raw(self, rows: pa.Table) -> int:
        """Append rows of pi_format.RAW_SCHEMA; returns the raw table's new version."""
        return self._append("raw", rows)

    def write_quarantine(self, rows: pa.Table) -> int:
        """Append rows of pi_format.QUARANTINE_SCHEMA; returns the table's new version."""
        return self._append("quarantine", rows)

    def commit_episode(self, episode_rows: EpisodeRows) -> int:
        """Commit one episode (a group of one, see `commit_episodes`).

        Returns:
            The episodes table's version holding the row, or -1 when the episode was already
            committed (then nothing is written).

        Example:
            >>> writer.commit_episode(episode_rows)
            7
            >>> writer.commit_episode(episode_rows)
            -1
        """
        return self.commit_episodes([episode_rows]).version

    def commit_episodes(
        self,
        batch: Sequence[EpisodeRows],
        *,
        raw: pa.Table | None = None,
        supersede: bool = False,
        replacing: Mapping[str, str] | None = None,
    ) -> GroupCommit:
        """Commit a group of episodes: `raw` rows (what arrived, kept even if nothing commits),
        then steps, video, and last the episodes rows, one Delta commit per table. Episodes
        already committed (by anyone) are skipped and reported as duplicates; an episode id
        twice in `batch` counts once (the first).

        Args:
            batch: the episodes' rows.
            raw: raw rows to append first (None: none).
            supersede: commit a new visible attempt of episodes that are already committed (a
                backfill): an episode is then a duplicate only when its visible marker already
                has the new row's `featurizer`; the new marker's committed_at_ns is moved past
                the visible one's if needed, so it wins the visibility rule.
            replacing: with `supersede`, episode id -> the damaged attempt its new rows replace
                (`pilake repair`): such an episode is a duplicate exactly when its visible
                attempt is no longer that one (already repaired, or superseded since).

        Example:
            >>> writer.commit_episodes([rows_a, rows_b], raw=raw_rows).committed
            ('r1-000001', 'r1-000002')
        """
        if raw is not None and raw.num_rows:
            self._append("raw", raw, find_version=False)
        unique: dict[str, EpisodeRows] = {}
        repeated: list[str] = []
        for rows in batch:
            if rows.episode.num_rows != 1:
                raise ValueError(f"EpisodeRows.episode must be one row, got {rows.episode.num_rows}")
            if rows.episode_id in unique:
                repeated.append(rows.episode_id)
            else:
                unique[rows.episode_id] = rows
        # What this writer knows (its own commits and every other writer's up to its last
        # refresh) keeps known duplicates out without a snapshot update; an episode another
        # writer committed since is caught at the markers' read point below (its rows written
        # here are then never made visible, and GC removes them).
        featurizers = {e: _featurizer(r.episode) for e, r in unique.items()}
        self._replacing = dict(replacing or {})
        fresh = sorted(e for e in unique if not self._is_done(e, featurizers[e], supersede))
        duplicates = sorted({*repeated, *(e for e in unique if e not in fresh)})
        if not fresh:
            return GroupCommit(-1, (), tuple(duplicates), _empty_markers())
        markers = self._write_rows([unique[e] for e in fresh])
        # The markers' read point: Delta checks the markers commit against every commit since
        # this refresh, so a writer that commits one of these episodes after it makes ours fail.
        self._committed.refresh()
        keep = [i for i, e in enumerate(fresh) if not self._is_done(e, featurizers[e], supersede)]
        markers = markers.take(pa.array(keep, pa.int64()))
        if self._on_stage is not None:
            self._on_stage(STAGE_ROWS_WRITTEN)
        version, committed, markers = (
            self._commit_markers(markers, supersede=supersede) if keep else (-1, [], _empty_markers())
        )
        duplicates = sorted({*duplicates, *(e for e in fresh if e not in committed)})
        if version >= 0 and self._on_stage is not None:
            self._on_stage(STAGE_COMMITTED)
        return GroupCommit(version, tuple(committed), tuple(duplicates), markers)

    def _is_done(self, episode_id: str, featurizer: str | None, supersede: bool) -> bool:
        """Whether committing `episode_id` now would be a duplicate: it is committed at all
        (supersede=False), or its visible marker already has `featurizer` (supersede=True); a
        deleted episode always is."""
        if episode_id in self._deleted:
            return True
        if self._committed.attempt(episode_id) is None:
            return False
        if supersede and episode_id in self._replacing:
            return self._committed.attempt(episode_id) != self._replacing[episode_id]
        return not supersede or self._committed.featurizer(episode_id) == featurizer

    def _after_visible(self, markers: pa.Table) -> pa.Table:
        """`markers` with each committed_at_ns moved past its episode's visible marker's (a
        superseding attempt must win the latest-commit rule even against a clock that lags)."""
        stamps = markers.column("committed_at_ns").to_pylist()
        moved = []
        for eid, at_ns in zip(markers.column("episode_id").to_pylist(), stamps, strict=True):
            visible = self._committed.committed_at_ns(eid)
            moved.append(at_ns if visible is None or at_ns > visible else visible + 1)
        if moved == stamps:
            return markers
        index = markers.schema.get_field_index("committed_at_ns")
        return markers.set_column(index, markers.schema.field(index), pa.array(moved, pa.int64()))

    def _commit_files(
        self,
        name: str,
        written: WrittenFile,
        app_versions: Mapping[str, int] | None = None,
        *,
        find_version: bool = False,
    ) -> int:
        """Commit one written file to table `name` with application transactions
        `app_versions` (id -> version); returns the version of that commit when `find_version`
        or `app_versions` (else -1: steps and video commits need none).

        One snapshot update per commit, after it: delta-rs's `update_incremental` replays every
        JSON commit since the last checkpoint (measured: 1 -> 9 ms from the 1st to the 99th),
        and `create_write_transaction` does not advance the table's snapshot itself.
        """
        from deltalake import CommitProperties, Transaction

        table = self._tables[name]
        before = int(table.version())
        tag = uuid.uuid4().hex
        transactions = [Transaction(a, v) for a, v in (app_versions or {}).items()]
        commit = CommitProperties(custom_metadata={_COMMIT_TAG: tag}, app_transactions=transactions or None)
        # A plain append needs no snapshot update before it: delta-rs checks it against the
        # commits since this writer's snapshot and takes the next free version (measured: 60
        # versions behind, one call). A commit with app transactions keeps the read point its
        # caller refreshed at (Delta checks conflicts against every commit since then).
        table.create_write_transaction(
            [written.add_action()],
            "append",
            TABLE_SCHEMAS[name],
            commit_properties=commit,
            post_commithook_properties=post_commit_hooks(),
        )
        table.update_incremental()
        after = int(table.version())
        if not (find_version or app_versions):
            return -1
        if after == before + 1:
            return after
        # Other writers committed around ours: find ours by its tag among the new versions.
        for entry in table.history(after - before):
            if entry.get(_COMMIT_TAG) == tag:
                return int(entry["version"])
        raise RuntimeError(
            f"commit {tag} to {self.layout.table(name)} is not in versions {before + 1}..{after}"
        )

    def _write_rows(self, group: list[EpisodeRows]) -> pa.Table:
        """Write and commit the steps and video of `group` (sorted by episode id); returns their
        episodes rows with the locator filled in."""
        laid = lay_out_group(
            [
                (
                    [str(c) for c in rows.episode.column("cameras")[0].as_py()],
                    _conform("steps", rows.steps),
                    # each chunk's checksum: set by the featurizer where it was encoded (checked
                    # here), or computed now for rows made without it
                    _conform("video", with_chunk_crcs(rows.video)),
                )
                for rows in group
            ],
            self._steps_group_steps,
        )
        steps_file, video_file = laid.write(self.layout.steps, self.layout.video, writer_id=self.writer_id)
        for name, written in (("steps", steps_file), ("video", video_file)):
            if written is not None:
                self._commit_files(name, written)
        return laid.locate(
            pa.concat_tables([_conform("episodes", r.episode) for r in group]), steps_file, video_file
        )

    def _commit_markers(
        self, markers: pa.Table, *, supersede: bool = False
    ) -> tuple[int, list[str], pa.Table]:
        """Commit the episodes rows; re-try without the episodes a concurrent writer committed
        first (with `supersede`: that already carry the same featurizer). Returns (version or
        -1, the ids committed, their rows)."""
        from deltalake.exceptions import CommitFailedError

        episodes = self._tables["episodes"]
        for attempt in range(_COMMIT_ATTEMPTS):
            ids = [str(e) for e in markers.column("episode_id").to_pylist()]
            if supersede:
                markers = self._after_visible(markers)
            written = write_file(
                self.layout.episodes,
                markers,
                [markers.num_rows],
                writer_id=self.writer_id,
                compression="zstd",
            )
            # Versions are not looked up (delta-rs replays the log since the last checkpoint for
            # each lookup: measured 5 ms a call, growing): a bucket's version is the commit time in
            # microseconds, the writer's its group count. Conflicts are decided on the ids.
            stamp = time.time_ns() // 1000
            app_versions = {bucket_app_id(e): stamp for e in sorted(set(ids))}
            app_versions[writer_app_id(self.writer_id)] = self._sequence + 1
            try:
                version = self._commit_files("episodes", written, app_versions)
            except CommitFailedError as err:
                self.commit_conflicts += 1
                _remove_uncommitted(self.layout.episodes, written)
                # Lost a race: learn what the winners committed, keep only what is still ours.
                self._committed.refresh()
                tags = markers.column("featurizer").to_pylist()
                keep = [i for i, e in enumerate(ids) if not self._is_done(e, tags[i], supersede)]
                if not keep:
                    return -1, [], _empty_markers()
                if attempt + 1 == _COMMIT_ATTEMPTS:
                    raise CommitFailedError(
                        f"episodes commit of {len(keep)} episodes to {self.layout.episodes} failed "
                        f"{_COMMIT_ATTEMPTS} times against concurrent writers: {err}"
                    ) from err
                markers = markers.take(pa.array(keep, pa.int64()))
                continue
            self._sequence += 1
            uri = f"{_table_path_uri(episodes)}/{written.relative_path}"
            self._committed.learn_own(uri, markers)
            return version, ids, markers
        raise AssertionError("unreachable")

    def committed_episode_row(self, episode_id: str) -> tuple[pa.Table, int] | None:
        """The visible episodes row of `episode_id` and the table version it was read at.

        Reads the one file holding its marker: meant for the rare duplicate, not every message.

        Example:
            >>> row, version = writer.committed_episode_row("r1-000001")
        """
        import pyarrow.compute as pc

        self._committed.refresh()
        uri = self._committed.marker_file(episode_id)
        attempt = self._committed.attempt(episode_id)
        if uri is None or attempt is None:
            return None
        rows = read_file(uri)
        rows = rows.filter(
            pc.and_(
                pc.equal(rows.column("episode_id"), episode_id), pc.equal(rows.column("attempt_id"), attempt)
            )
        )
        return (_conform("episodes", rows.slice(0, 1)), int(self._tables["episodes"].version()))


def _conform(name: str, rows: pa.Table) -> pa.Table:
    schema = TABLE_SCHEMAS[name]
    if rows.schema.equals(schema):
        return rows
    try:
        if name in ADDED_COLUMNS:  # rows of a lake older than the added (nullable) columns
            for field in schema:
                if field.name not in rows.column_names:
                    rows = rows.append_column(field, pa.nulls(rows.num_rows, field.type))
        return rows.select(schema.names).cast(schema)
    except (KeyError, ValueError, pa.ArrowInvalid) as err:
        raise ValueError(
            f"rows for table {name!r} must match pi_format.TABLE_SCHEMAS[{name!r}]: {err}"
        ) from err


def _featurizer(episode: pa.Table) -> str | None:
    """The `featurizer` of a one-row episodes table (None when the column is absent or null)."""
    if "featurizer" not in episode.column_names:
        return None
    value = episode.column("featurizer")[0].as_py()
    return None if value is None else str(value)


def _empty_markers() -> pa.Table:
    return TABLE_SCHEMAS["episodes"].empty_table()


def _remove_uncommitted(table_uri: str, written: WrittenFile) -> None:
    """Delete a data file whose commit was refused (no Delta version names it); GC would find
    it anyway, this only saves it the trouble."""
    if "://" not in table_uri:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(table_uri, written.relative_path))
