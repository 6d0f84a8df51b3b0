"""The quarantine, seen by an operator: list it, show (and dump) the raw bytes, release episodes.

Sits beside the stream job: the job appends quarantine rows and the raw rows they point to;
this module reads them, and `release_episode` re-admits an episode after a fix (e.g. a
corrected robot registry) by rebuilding it from its raw rows and committing it through the
normal path: contract -> featurize -> `LakeWriter.commit_episode` -> catalog. The semantics
(one row per event; open vs closed; the counting key) are in format/SPEC.md sections 7.5-7.6.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pi_format import QUARANTINE_RELEASES_SCHEMA, LakeLayout, ProtocolError, QuarantineReason

from pi_jobs.errors import PiJobsError
from pi_jobs.stream.contract import RobotRegistry, check_episode
from pi_jobs.stream.featurize import FeaturizeConfig, featurize

STATUS_OPEN = "open"
STATUS_COMMITTED = "committed"  # the episode was committed later (a re-send, or a release)
STATUS_RELEASED = "released"  # an operator released it (the release row names the rows)


class QuarantineError(PiJobsError):
    """A quarantine command cannot do what was asked (unknown id, nothing to release...)."""


class ReleaseRejected(QuarantineError):
    """The episode still breaks the protocol or the contract; `reason` says which rule."""

    def __init__(self, episode_id: str, err: ProtocolError) -> None:
        super().__init__(
            f"episode {episode_id} cannot be released: [{err.reason.value}] {err.detail}; fix the cause "
            "(e.g. the robot registry, PILAKE_ROBOTS) and release again"
        )
        self.reason = err.reason


@dataclass(frozen=True, slots=True)
class QuarantineEntry:
    """One row of the quarantine table and whether it is still open (SPEC.md 7.5)."""

    quarantine_id: str
    episode_id: str | None
    reason: str
    details: str
    kafka_topic: str
    kafka_partition: int
    kafka_offsets: tuple[int, ...]
    raw_pointer: str
    size_bytes: int
    attempt_id: str
    quarantined_at_ns: int
    status: str  # open | committed | released

    @property
    def counting_key(self) -> str:
        """What the row quarantines: the episode_id, else `kafka:<topic>/<partition>/<offset>`."""
        if self.episode_id is not None:
            return self.episode_id
        first = self.kafka_offsets[0] if self.kafka_offsets else -1
        return f"kafka:{self.kafka_topic}/{self.kafka_partition}/{first}"


@dataclass(frozen=True, slots=True)
class ReleaseResult:
    """What `release_episode` did."""

    episode_id: str
    outcome: str  # "committed" | "already_committed"
    attempt_id: str  # the attempt visible in episodes
    quarantine_ids: tuple[str, ...]  # the rows it closed
    episodes_version: int  # the episodes table version holding the row (-1 if not known)


def _table(path: str, columns: list[str] | None = None, filters: Any = None) -> pa.Table | None:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path)
    except TableNotFoundError:
        return None
    return table.to_pyarrow_table(columns=columns, filters=filters)


def _ids(path: str) -> set[str]:
    table = _table(path, columns=["episode_id"])
    return set() if table is None else {str(v) for v in table.column("episode_id").to_pylist()}


def list_quarantine(layout: LakeLayout, *, include_closed: bool = False) -> list[QuarantineEntry]:
    """The quarantine rows, oldest first, with their status; only open ones unless asked.

    Example:
        >>> [e.reason for e in list_quarantine(LakeLayout("/data/lake"))]
        ['unknown_robot_type']
    """
    rows = _table(layout.quarantine)
    if rows is None or rows.num_rows == 0:
        return []
    committed = _ids(layout.episodes)
    released = _ids(layout.quarantine_releases)
    out = []
    for r in sorted(rows.to_pylist(), key=lambda r: (r["quarantined_at_ns"], r["quarantine_id"])):
        eid = r["episode_id"]
        status = (
            STATUS_COMMITTED
            if eid is not None and eid in committed
            else STATUS_RELEASED
            if eid is not None and eid in released
            else STATUS_OPEN
        )
        if status != STATUS_OPEN and not include_closed:
            continue
        out.append(
            QuarantineEntry(
                quarantine_id=r["quarantine_id"],
                episode_id=eid,
                reason=r["reason"],
                details=r["details"],
                kafka_topic=r["kafka_topic"],
                kafka_partition=int(r["kafka_partition"]),
                kafka_offsets=tuple(int(o) for o in r["kafka_offsets"]),
                raw_pointer=r["raw_pointer"],
                size_bytes=int(r["size_bytes"]),
                attempt_id=r["attempt_id"],
                quarantined_at_ns=int(r["quarantined_at_ns"]),
                status=status,
            )
        )
    return out


def open_quarantine_keys(layout: LakeLayout) -> set[str]:
    """Counting keys of the open quarantine rows: how many things are quarantined right now.

    Example:
        >>> len(open_quarantine_keys(LakeLayout("/data/lake")))
        3
    """
    return {e.counting_key for e in list_quarantine(layout)}


def find_entries(layout: LakeLayout, ident: str) -> list[QuarantineEntry]:
    """Rows whose quarantine_id or episode_id is `ident` (open and closed).

    Raises:
        QuarantineError: nothing matches.
    """
    found = [
        e for e in list_quarantine(layout, include_closed=True) if ident in (e.quarantine_id, e.episode_id)
    ]
    if not found:
        raise QuarantineError(
            f"no quarantine row has quarantine_id or episode_id {ident!r} in {layout.quarantine}; "
            "see `pilake quarantine list --all`"
        )
    return found


def raw_rows(layout: LakeLayout, entry: QuarantineEntry) -> pa.Table:
    """The raw (bronze) rows a quarantine row points to, in offset order.

    Example:
        >>> raw_rows(layout, entry).column("message")[0].as_py()[:4]
        b'PIEP'
    """
    rows = _table(
        layout.raw,
        filters=(pc.field("attempt_id") == entry.attempt_id)
        & (pc.field("kafka_topic") == entry.kafka_topic)
        & (pc.field("kafka_partition") == entry.kafka_partition),
    )
    if rows is None:
        raise QuarantineError(f"the raw table {layout.raw} does not exist")
    wanted = pa.array(list(entry.kafka_offsets), type=pa.int64())
    rows = rows.filter(pc.is_in(rows.column("kafka_offset"), value_set=wanted))
    return rows.sort_by([("kafka_offset", "ascending")])


def dump_raw(layout: LakeLayout, entries: Iterable[QuarantineEntry], path: Path) -> int:
    """Write the raw messages of `entries` as one bundle file (`pilake upload` can re-send it).

    Returns the number of messages written (each once, in (partition, offset) order).

    Example:
        >>> dump_raw(layout, find_entries(layout, "r1-000001"), Path("r1-000001.piep"))
        9
    """
    from pi_format.wire import write_bundle

    seen: dict[tuple[int, int], bytes] = {}
    for entry in entries:
        for r in raw_rows(layout, entry).to_pylist():
            seen.setdefault((r["kafka_partition"], r["kafka_offset"]), r["message"])
    write_bundle(path, [seen[k] for k in sorted(seen)])
    return len(seen)


def _episode_raw(layout: LakeLayout, episode_id: str) -> pa.Table:
    rows = _table(layout.raw, filters=pc.field("episode_id") == episode_id)
    if rows is None or rows.num_rows == 0:
        raise QuarantineError(f"the raw table {layout.raw} holds no messages of episode {episode_id}")
    return rows.sort_by([("received_at_ns", "ascending"), ("kafka_offset", "ascending")])


def rebuild_from_raw(layout: LakeLayout, episode_id: str) -> tuple[Any, pa.Table]:
    """Assemble `episode_id` from every raw row stored under its key (any attempt, any run).

    Messages that do not decode, name another episode, or disagree with the manifest's chunk
    count were quarantined on their own and are skipped; identical duplicates collapse.

    Returns:
        (the assembled pi_format.Episode, the raw rows used).

    Raises:
        ProtocolError: the chunks do not make a valid episode (missing, conflicting...).
    """
    from pi_format.wire import ChunkKind, EpisodeAssembler, decode_chunk

    rows = _episode_raw(layout, episode_id)
    chunks = []
    for i, message in enumerate(rows.column("message").to_pylist()):
        try:
            chunk = decode_chunk(message)
        except ProtocolError:
            continue
        if chunk.episode_id == episode_id:
            chunks.append((i, chunk))
    counts = {c.chunk_count for _, c in chunks if c.kind is ChunkKind.MANIFEST}
    # the manifest's count wins when the chunks disagree; without a manifest, the first's
    count = min(counts) if len(counts) == 1 else (chunks[0][1].chunk_count if chunks else 0)
    asm = EpisodeAssembler(episode_id)
    used = []
    for i, chunk in chunks:
        if chunk.chunk_count != count:
            continue
        asm.add(chunk)  # duplicate_conflict propagates: the raw bytes disagree, no release
        used.append(i)
    if not asm.is_complete:
        missing = [i for i in range(count) if i not in asm.chunks]
        raise ProtocolError(
            QuarantineReason.COUNT_MISMATCH,
            f"raw holds {len(asm.chunks)} of {count} chunks of {episode_id}; missing {missing[:20]}",
        )
    return asm.assemble(), rows.take(pa.array(used, type=pa.int64()))


def _pointer(rows: pa.Table) -> str:
    parts = []
    for attempt in sorted(set(rows.column("attempt_id").to_pylist())):
        mine = rows.filter(pc.equal(rows.column("attempt_id"), attempt))
        offsets = sorted(mine.column("kafka_offset").to_pylist())
        partitions = sorted(set(mine.column("kafka_partition").to_pylist()))
        parts.append(f"attempt_id={attempt} partition={partitions} offsets={offsets[0]}..{offsets[-1]}")
    return "raw: " + "; ".join(parts)


def _write_release(layout: LakeLayout, row: dict[str, Any]) -> None:
    # the lake's own writer (page CRCs, architecture decision 10), not delta-rs's write_deltalake
    from pi_format.lake import commit_actions, ensure_lake_tables, write_file

    table = ensure_lake_tables(layout)["quarantine_releases"]
    rows = pa.Table.from_pylist([row], schema=QUARANTINE_RELEASES_SCHEMA)
    written = write_file(layout.quarantine_releases, rows, [1], writer_id="release", compression="zstd")
    commit_actions(table, "quarantine_releases", adds=[written], operation="release")


def release_episode(
    layout: LakeLayout,
    episode_id: str,
    *,
    catalog_path: str | None,
    registry: RobotRegistry,
    featurize_config: FeaturizeConfig,
    note: str = "",
) -> ReleaseResult:
    """Re-admit a quarantined episode: rebuild it from raw, check it, commit it exactly once.

    Runs the same steps as the stream job (assembly, the contract with `registry`, featurize,
    `LakeWriter.commit_episode`, catalog) on every raw row stored under `episode_id`, then
    appends a `quarantine_releases` row. Re-running after a crash is safe: an episode already
    in `episodes` is not committed again (outcome `already_committed`).

    Args:
        layout: the lake.
        episode_id: an episode with quarantine rows.
        catalog_path: the catalog to index the episode in; None skips it (rebuild it later).
        registry: the robot registry to check against (usually the corrected one).
        featurize_config: the same video settings as the stream job.
        note: why it is released, kept in the release row.

    Raises:
        QuarantineError: the episode has no quarantine rows or no raw rows.
        ReleaseRejected: it still breaks the protocol or the contract (nothing is written).

    Example:
        >>> release_episode(LakeLayout("/data/lake"), "r1-000001", catalog_path="/data/catalog",
        ...                 registry=load_registry("robots.toml"), featurize_config=FeaturizeConfig())
        ReleaseResult(episode_id='r1-000001', outcome='committed', ...)
    """
    from pi_format.lake import LakeWriter

    entries = [e for e in find_entries(layout, episode_id) if e.episode_id == episode_id]
    if not entries:
        raise QuarantineError(f"{episode_id!r} is a quarantine_id; release takes the row's episode_id")
    writer = LakeWriter(layout)
    attempt = writer.committed_attempt(episode_id)
    version = -1
    pointer = ""
    if attempt is None:
        try:
            episode, used = rebuild_from_raw(layout, episode_id)
            check_episode(episode, registry)
            attempt = str(uuid.uuid4())
            featurized = featurize(
                episode,
                attempt_id=attempt,
                received_at_ns=int(pc.max(used.column("received_at_ns")).as_py()),
                raw_size_bytes=sum(len(m) for m in set(used.column("message").to_pylist())),
                committed_at_ns=time.time_ns(),
                config=featurize_config,
            )
        except ProtocolError as err:
            raise ReleaseRejected(episode_id, err) from err
        pointer = _pointer(used)
        version = writer.commit_episode(featurized)
        if version < 0:  # another writer committed it meanwhile
            attempt = writer.committed_attempt(episode_id) or attempt
        elif catalog_path is not None:
            from pi_catalog import Catalog

            Catalog(catalog_path).record_episodes(featurized.episode, episodes_version=version)
    outcome = "committed" if version >= 0 else "already_committed"
    closed = tuple(e.quarantine_id for e in entries if e.status == STATUS_OPEN or version >= 0)
    _write_release(
        layout,
        {
            "release_id": str(uuid.uuid4()),
            "episode_id": episode_id,
            "quarantine_ids": list(closed),
            "outcome": outcome,
            "attempt_id": attempt,
            "raw_pointer": pointer,
            "note": note,
            "released_at_ns": time.time_ns(),
        },
    )
    return ReleaseResult(episode_id, outcome, attempt, closed, version)
