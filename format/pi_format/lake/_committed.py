"""Which episodes are committed: the writer's memory of the episodes table.

Each visible marker is remembered with its `featurizer` (the lineage column: null for the stream
job's own attempts, "<name>@<version>" for a backfill's), so a superseding commit
(`LakeWriter.commit_episodes(..., supersede=True)`) knows whether an episode already carries it.

Read in full once when a writer opens (one projected scan of the commit markers), then kept up
to date from only the episodes files that other writers added since (`refresh`), found in the
JSON commits of the versions since the last refresh rather than in the table's file list, so its
cost per group commit does not grow with the lake. `pi_format.lake.visibility.latest_commits` decides
which attempt counts when an episode has several rows; `_merge` applies the same rule pair by
pair (latest committed_at_ns, ties to the larger attempt_id).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from pi_format.lake._files import table_filesystem
from pi_format.lake.visibility import COMMIT_COLUMNS

# More new versions than this since the last refresh: list the table's files instead of reading
# each version's JSON commit (a writer that slept while others committed).
_MAX_LOG_READS = 64
# The lineage column: read only from files that have it (older files predate it: null).
FEATURIZER_COLUMN = "featurizer"


def read_file(uri: str, columns: list[str] | None = None, filters: Any = None) -> pa.Table:
    """One Parquet data file of a table, by the URI `DeltaTable.file_uris()` gives."""
    filesystem, path = table_filesystem(uri)
    return pq.read_table(path, columns=columns, filters=filters, filesystem=filesystem)


class CommittedEpisodes:
    """episode_id -> (attempt_id, committed_at_ns, featurizer) of the visible commit marker.

    Example:
        >>> committed = CommittedEpisodes(delta_table)
        >>> committed.refresh()          # picks up other writers' commits
        >>> committed.attempt("r1-000001")
        '5c0f...'
    """

    def __init__(self, table: Any) -> None:
        self._table = table
        self._version = -1  # the table version of the last refresh
        self._known_files: set[str] = set()
        # episode_id -> (attempt_id, committed_at_ns, index into _files of its marker's file,
        # featurizer or None)
        self._visible: dict[str, tuple[str, int, int, str | None]] = {}
        self._files: list[str] = []
        self.refresh()

    def __len__(self) -> int:
        return len(self._visible)

    def attempt(self, episode_id: str) -> str | None:
        found = self._visible.get(episode_id)
        return found[0] if found is not None else None

    def featurizer(self, episode_id: str) -> str | None:
        """The `featurizer` of the visible marker of `episode_id` (None: the stream job's own,
        or not committed)."""
        found = self._visible.get(episode_id)
        return found[3] if found is not None else None

    def committed_at_ns(self, episode_id: str) -> int | None:
        """committed_at_ns of the visible marker of `episode_id` (None: not committed)."""
        found = self._visible.get(episode_id)
        return found[1] if found is not None else None

    def marker_file(self, episode_id: str) -> str | None:
        """URI of the file holding the visible marker of `episode_id` (None: not committed)."""
        found = self._visible.get(episode_id)
        return self._files[found[2]] if found is not None else None

    def refresh(self) -> list[str]:
        """Bring the table up to its latest version and learn the episodes of files added since
        the last refresh; returns their episode ids."""
        self._table.update_incremental()
        version = int(self._table.version())
        if version == self._version:
            return []
        uris = None
        if self._version >= 0 and version - self._version <= _MAX_LOG_READS:
            uris = self._added_in(range(self._version + 1, version + 1))
        if uris is None:  # first refresh, a long gap, or log entries already cleaned up
            uris = self._table.file_uris()
        self._version = version
        new = [u for u in uris if u not in self._known_files]
        if not new:
            return []
        return self._learn(new)

    def _added_in(self, versions: range) -> list[str] | None:
        """URIs of the files the JSON commits of `versions` add (Delta protocol: one action per
        line, `add.path` relative to the table root and URL-encoded); None when one is missing."""
        root = str(self._table.table_uri).rstrip("/")
        base = root.removeprefix("file://")
        filesystem, root_path = table_filesystem(root)
        log_dir = f"{root_path}/_delta_log"
        uris: list[str] = []
        for v in versions:
            try:
                with filesystem.open_input_stream(f"{log_dir}/{v:020d}.json") as stream:
                    lines = stream.read().decode().splitlines()
            except (FileNotFoundError, OSError):
                return None
            for line in lines:
                if '"add"' not in line:
                    continue
                path = json.loads(line).get("add", {}).get("path")
                if path:
                    uris.append(path if "://" in path or path.startswith("/") else f"{base}/{unquote(path)}")
        return uris

    def learn_own(self, uri: str, rows: pa.Table) -> None:
        """Record the markers of a file this writer just committed, without reading it back."""
        self._known_files.add(uri)
        self._merge(uri, rows)

    def _learn(self, uris: list[str]) -> list[str]:
        learned: list[str] = []
        for uri in uris:
            rows = _read_markers(uri)
            self._known_files.add(uri)
            self._merge(uri, rows)
            learned += [str(e) for e in rows.column("episode_id").to_pylist()]
        return learned

    def _merge(self, uri: str, rows: pa.Table) -> None:
        file_index = len(self._files)
        self._files.append(uri)
        featurizers = (
            rows.column(FEATURIZER_COLUMN).to_pylist()
            if FEATURIZER_COLUMN in rows.column_names
            else [None] * rows.num_rows
        )
        for eid, attempt, at_ns, featurizer in zip(
            rows.column("episode_id").to_pylist(),
            rows.column("attempt_id").to_pylist(),
            rows.column("committed_at_ns").to_pylist(),
            featurizers,
            strict=True,
        ):
            known = self._visible.get(eid)
            # latest_commits' rule (pi_format.lake.visibility), for one pair at a time
            # (equal: the same marker in a newer file, e.g. after compaction: point at that one)
            if known is None or (at_ns, attempt) >= (known[1], known[0]):
                self._visible[eid] = (attempt, at_ns, file_index, featurizer)


def _read_markers(uri: str) -> pa.Table:
    """COMMIT_COLUMNS and, where the file has it, the featurizer column of one episodes file
    (files written before the lineage column lack it; asking pq.read_table for it would fail)."""
    filesystem, path = table_filesystem(uri)
    with filesystem.open_input_file(path) as handle:
        parquet = pq.ParquetFile(handle)
        columns = list(COMMIT_COLUMNS)
        if FEATURIZER_COLUMN in parquet.schema_arrow.names:
            columns.append(FEATURIZER_COLUMN)
        return parquet.read(columns=columns)
