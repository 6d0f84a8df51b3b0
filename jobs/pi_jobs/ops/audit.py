"""`pilake audit`: read the spools, the Delta tables, the catalog and the topic's offsets, and
reconcile them (`pi_jobs.ops._reconcile` holds the counting rules and the report).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pi_jobs.ops._reconcile import (
    AuditError,
    AuditInputs,
    AuditReport,
    QuarantineRecord,
    TopicOffsets,
    format_report,
    reconcile,
)
from pi_jobs.ops._spools import find_spools, spool_leftovers

if TYPE_CHECKING:
    from pi_format import LakeLayout

    from pi_jobs.stream.config import StreamJobConfig

__all__ = [
    "AuditError",
    "AuditInputs",
    "AuditReport",
    "QuarantineRecord",
    "TopicOffsets",
    "audit",
    "collect",
    "find_spools",
    "format_report",
    "read_spools",
    "read_topic",
    "reconcile",
]

log = logging.getLogger("pi_jobs.ops.audit")


def _read_table(path: str, columns: list[str]) -> Any:
    """Columns of a Delta table (those of `columns` it has), or None when the table does not
    exist yet."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path)
    except TableNotFoundError:
        return None
    except Exception as err:  # unreadable log, permissions: say which table
        raise AuditError(f"cannot read the Delta table at {path}: {err}") from err
    import pyarrow as pa

    have = set(pa.schema(table.schema().to_arrow()).names)
    return table.to_pyarrow_table(columns=[c for c in columns if c in have])


def read_spools(spool_dirs: Sequence[Path]) -> tuple[dict[str, int], dict[str, str]]:
    """(submissions per episode id, last ack status per episode id) over the spools' ledgers."""
    from pi_ingest.spool import read_ledger

    submitted: Counter[str] = Counter()
    confirmed: dict[str, str] = {}
    for root in spool_dirs:
        for event in read_ledger(Path(root)):
            if event.event == "submitted":
                submitted[event.episode_id] += 1
            elif event.event == "confirmed":
                confirmed[event.episode_id] = event.status
    return dict(submitted), confirmed


def read_topic(config: StreamJobConfig) -> TopicOffsets:
    """True end offsets of the raw topic and the stream job's committed offsets.

    Raises:
        AuditError: the broker or the topic cannot be reached.
    """
    from pi_jobs.stream.offsets import committed_offsets, true_end_offsets

    try:
        ends = true_end_offsets(config, quiet_s=0.5)
        committed = committed_offsets(config, sorted(ends))
    except Exception as err:
        raise AuditError(
            f"cannot read offsets of {config.raw_topic} on {config.bootstrap_servers}: {err}; "
            "start the broker (pilake up) or audit without the topic (--no-topic)"
        ) from err
    return TopicOffsets(end=ends, committed=committed)


def collect(
    layout: LakeLayout,
    *,
    spool_dirs: Sequence[Path] = (),
    catalog_path: str | None = None,
    topic_config: StreamJobConfig | None = None,
) -> AuditInputs:
    """Read what `reconcile` needs. The catalog is skipped when `catalog_path` is None, the
    topic when `topic_config` is None.

    Raises:
        AuditError: a source exists but cannot be read.

    Example:
        >>> inputs = collect(LakeLayout("/data/lake"), spool_dirs=[Path("/data/spool")],
        ...                  catalog_path="/data/catalog")
    """
    submitted, confirmed = read_spools(spool_dirs)
    raw = _read_table(layout.raw, ["episode_id", "kafka_topic", "kafka_partition", "kafka_offset"])
    episodes = _read_table(layout.episodes, ["episode_id", "attempt_id", "committed_at_ns", "featurizer"])
    quarantine = _read_table(
        layout.quarantine,
        ["episode_id", "reason", "kafka_topic", "kafka_partition", "kafka_offsets", "quarantined_at_ns"],
    )
    releases = _read_table(layout.table("quarantine_releases"), ["episode_id"])
    visible_rows = [] if episodes is None else _lineage_rows(episodes)
    deletions = _read_table(layout.deletions, ["episode_id"])
    quarantine_rows: list[QuarantineRecord] = []
    if quarantine is not None:
        for row in quarantine.to_pylist():
            offsets = row["kafka_offsets"] or [-1]
            quarantine_rows.append(
                QuarantineRecord(
                    episode_id=row["episode_id"],
                    reason=row["reason"],
                    record_count=len(row["kafka_offsets"] or ()),
                    quarantined_at_ns=int(row["quarantined_at_ns"]),
                    kafka_key=f"kafka:{row['kafka_topic']}/{row['kafka_partition']}/{offsets[0]}",
                )
            )
    catalog_ids: list[str] | None = None
    if catalog_path is not None:
        catalog_ids = _catalog_ids(catalog_path)
    topic = read_topic(topic_config) if topic_config is not None else None
    unaccounted = None
    if topic_config is not None and topic is not None:  # every record on the topic: did it reach raw?
        from pi_jobs.ops._topic_records import topic_unaccounted

        unaccounted = topic_unaccounted(topic_config, dict(topic.end), raw)
    leftovers = spool_leftovers([Path(p) for p in spool_dirs])
    return AuditInputs(
        submitted=submitted,
        confirmed=confirmed,
        raw_episode_ids=[] if raw is None else raw.column("episode_id").to_pylist(),
        visible_rows=visible_rows,
        quarantine_rows=quarantine_rows,
        released=[] if releases is None else releases.column("episode_id").to_pylist(),
        deleted=[] if deletions is None else deletions.column("episode_id").to_pylist(),
        catalog_ids=catalog_ids,
        topic=topic,
        unaccounted=unaccounted,
        spool_dirs=[str(p) for p in spool_dirs],
        spool_leftovers=[x.line() for x in leftovers],
        staging_leftovers=sum(1 for x in leftovers if x.kind == "staging"),
    )


def _lineage_rows(episodes: Any) -> list[tuple[str, str]]:
    """(episode_id, attempt_id) of the episodes rows made by the featurizer of each episode's
    visible attempt (`latest_commits`): a backfill's new attempt supersedes the stream job's
    without being a duplicate of it, while two rows of one featurizer are."""
    from pi_format.lake import latest_commits

    if episodes.num_rows == 0:
        return []
    lineage = (
        episodes.column("featurizer").to_pylist()
        if "featurizer" in episodes.column_names
        else [None] * episodes.num_rows
    )
    winners = latest_commits(episodes.select(["episode_id", "attempt_id", "committed_at_ns"]))
    winning = dict(
        zip(winners.column("episode_id").to_pylist(), winners.column("attempt_id").to_pylist(), strict=True)
    )
    ids = episodes.column("episode_id").to_pylist()
    attempts = episodes.column("attempt_id").to_pylist()
    winner_lineage = {e: f for e, a, f in zip(ids, attempts, lineage, strict=True) if winning.get(e) == a}
    return [(e, a) for e, a, f in zip(ids, attempts, lineage, strict=True) if winner_lineage.get(e) == f]


def _catalog_ids(catalog_path: str) -> list[str]:
    """Every row's episode_id in the catalog's deduplicated view (repeats kept: they count)."""
    from pi_catalog import Catalog, PiCatalogError

    try:
        catalog = Catalog(catalog_path)
        catalog.ensure_schema()
        table = catalog.query_arrow("SELECT episode_id FROM episodes")
    except PiCatalogError as err:
        raise AuditError(f"cannot read the catalog at {catalog_path}: {err}") from err
    return [v.decode() if isinstance(v, bytes) else str(v) for v in table.column("episode_id").to_pylist()]


def audit(
    layout: LakeLayout,
    *,
    spool_dirs: Collection[Path] = (),
    catalog_path: str | None = None,
    topic_config: StreamJobConfig | None = None,
) -> AuditReport:
    """Collect and reconcile: the report `pilake audit` prints.

    Example:
        >>> report = audit(LakeLayout("/data/lake"), spool_dirs=[Path("/data/spool")],
        ...                catalog_path="/data/catalog")
        >>> report.ok
        True
    """
    inputs = collect(
        layout, spool_dirs=list(spool_dirs), catalog_path=catalog_path, topic_config=topic_config
    )
    report = reconcile(inputs)
    log.debug("audit: %s", json.dumps(report.to_json())[:2000])
    return report
