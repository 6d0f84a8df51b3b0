"""Reconciliation (`pilake audit`): what was produced against what the lake and catalog hold.

Counts, per episode id:

* **in**: every episode produced: submitted through an uploader's spool (its ledger keeps every
  submission, also after the entry is confirmed and deleted), or seen on the raw topic by the
  stream job (the raw table keeps every message it read), or named by the lake at all;
* **visible**: distinct episode ids with a committed `episodes` row (architecture decision 3);
* **quarantined**: the counting keys of open quarantine rows (format/SPEC.md 7.5): an episode
  id named by a quarantine row, unless the episode is visible or was released
  (`quarantine_releases`); a row without an episode id (garbage) counts under
  `kafka:<topic>/<partition>/<first offset>` and is "in" under that key too;
* **missing**: in - visible - quarantined (lost, or not processed yet: see `topic_lag_offsets`);
* **duplicated**: visible more than once: several `episodes` rows (several committed attempts),
  or several rows in the catalog's deduplicated `episodes` view.

Records without an episode id (garbage on the topic, a message without a key that names no
episode) are counted by offset, as the SPEC's counting key says, and also as records.
The catalog must agree with the lake (it is derived from it, decision 7): ids visible in one
and not the other are reported, and make the audit fail like missing or duplicated ones.

The counting (`reconcile`, here) is pure; `pi_jobs.ops.audit.collect` reads the spools, the
Delta tables, the catalog and the topic's offsets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pi_jobs.errors import PiJobsError
from pi_jobs.ops._topic_records import Unaccounted

# Ids listed in the printed table per category (the JSON has them all).
_SHOWN_IDS = 10


class AuditError(PiJobsError):
    """The audit could not read one of its sources (the message names it and what to do)."""


@dataclass(frozen=True, slots=True)
class QuarantineRecord:
    """One row of the quarantine table, as far as the audit needs it."""

    episode_id: str | None
    reason: str
    record_count: int  # Kafka messages concerned (len(kafka_offsets))
    quarantined_at_ns: int = 0
    # the SPEC's counting key when episode_id is None: kafka:<topic>/<partition>/<first offset>
    kafka_key: str = ""

    @property
    def counting_key(self) -> str:
        return self.episode_id if self.episode_id is not None else self.kafka_key


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    """Per partition of the raw topic: its true end offset and the stream job's committed offset
    (-1 when the job's group has committed none)."""

    end: Mapping[int, int]
    committed: Mapping[int, int]

    @property
    def lag_offsets(self) -> int:
        """How far the stream job's committed offsets are behind the topic's ends, summed over
        partitions: 0 once the job's group committed everything. An offset distance, not a
        record count (the local broker's offsets can skip), and the group commits only on
        checkpoints: a job stopped with Ctrl-C can leave a lag it re-reads harmlessly."""
        return sum(max(0, end - max(self.committed.get(p, -1), 0)) for p, end in self.end.items())


@dataclass(frozen=True, slots=True)
class AuditInputs:
    """Everything `reconcile` counts; built by `collect` (or by hand in tests).

    Example:
        >>> inputs = AuditInputs(submitted={"e1": 1}, visible_rows=[("e1", "a1")])
        >>> reconcile(inputs).missing
        0
    """

    # episode_id -> how many times it was submitted, over all spool ledgers read
    submitted: Mapping[str, int] = field(default_factory=dict)
    # episode_id -> the last status an uploader was acked with ("committed" / "quarantined")
    confirmed: Mapping[str, str] = field(default_factory=dict)
    # the episode_id of each raw-table row (None: the message had no key)
    raw_episode_ids: Sequence[str | None] = ()
    # (episode_id, attempt_id) of each episodes-table row of the visible lineage: the rows made
    # by the featurizer of the episode's visible attempt (the stream job's, or a backfill's that
    # superseded it); two of them for one episode are a duplicate, a backfill's new attempt is not
    visible_rows: Sequence[tuple[str, str]] = ()
    # episode ids in the lake's deletions table (`pilake episodes delete`): accounted for, not missing
    deleted: Collection[str] = ()
    quarantine_rows: Sequence[QuarantineRecord] = ()
    # episode ids with a quarantine_releases row (their quarantine rows are closed)
    released: Collection[str] = ()
    # episode_id of each row of the catalog's `episodes` view; None: the catalog was not read
    catalog_ids: Sequence[str] | None = None
    topic: TopicOffsets | None = None
    spool_dirs: Sequence[str] = ()
    # what is left in the spools (pi_jobs.ops._spools.SpoolLeftover.line()): pending entries,
    # and import staging directories (counted in `staging_leftovers` too)
    spool_leftovers: Sequence[str] = ()
    staging_leftovers: int = 0
    # records of the topic with no raw row (pi_jobs.ops._topic_records); None: not read
    unaccounted: Unaccounted | None = None


@dataclass(frozen=True, slots=True)
class AuditReport:
    """The reconciliation of one lake. `ok` when nothing is missing, duplicated or out of step.

    Example:
        >>> report = reconcile(inputs)
        >>> (report.episodes_in, report.visible, report.quarantined, report.missing, report.duplicated)
        (12, 10, 2, 0, 0)
    """

    episodes_in: int
    submitted: int  # of `episodes_in`: submitted through a spool whose ledger was read
    topic_only: int  # of `episodes_in`: seen on the topic (or in the lake) but in no ledger read
    visible: int
    quarantined: int
    missing: int
    duplicated: int
    unconfirmed: int  # submitted but never acked to its uploader (still in its spool)
    quarantined_by_reason: Mapping[str, int]
    raw_records: int
    raw_records_without_id: int
    quarantined_without_id: int  # of `quarantined`: garbage counted by offset (no episode id)
    quarantined_records_without_id: int
    catalog_checked: bool
    catalog_missing: tuple[str, ...]  # visible in the lake, absent from the catalog
    catalog_extra: tuple[str, ...]  # in the catalog, not visible in the lake
    topic_lag_offsets: int | None  # see TopicOffsets.lag_offsets; None: the topic was not read
    missing_ids: tuple[str, ...] = ()
    duplicated_ids: tuple[str, ...] = ()
    spool_dirs: tuple[str, ...] = ()
    deleted: int = 0  # deleted by an operator (`pilake episodes delete`): in, accounted for
    spool_leftovers: tuple[str, ...] = ()  # one line per spool with pending entries / staging dir
    staging_leftovers: int = 0  # import staging directories left by a killed import
    # records on the topic that reached neither raw nor quarantine (None: the records were not
    # read); their episodes count as "in", keyless ones as missing
    topic_records_unaccounted: int | None = None
    unaccounted_records: tuple[str, ...] = ()  # "partition:offset key=..." of the first of them

    @property
    def catalog_agrees(self) -> bool:
        return not self.catalog_missing and not self.catalog_extra

    @property
    def ok(self) -> bool:
        # a pending spool entry of an episode the lake lacks is counted as missing already; a
        # staging directory is an import killed while reading: nothing was sent, but it is litter
        return (
            self.missing == 0 and self.duplicated == 0 and self.catalog_agrees and not self.staging_leftovers
        )

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["quarantined_by_reason"] = dict(self.quarantined_by_reason)
        doc["catalog_agrees"] = self.catalog_agrees
        doc["ok"] = self.ok
        return doc


def reconcile(inputs: AuditInputs) -> AuditReport:
    """Count in / visible / quarantined / missing / duplicated (pure; see the module doc).

    Example:
        >>> r = reconcile(AuditInputs(submitted={"e1": 1, "e2": 1}, visible_rows=[("e1", "a")]))
        >>> (r.episodes_in, r.visible, r.missing, r.missing_ids)
        (2, 1, 1, ('e2',))
    """
    deleted = set(inputs.deleted)
    rows_per_id = Counter(eid for eid, _ in inputs.visible_rows if eid not in deleted)
    visible = set(rows_per_id)
    duplicated = {eid for eid, n in rows_per_id.items() if n > 1}
    catalog_missing: tuple[str, ...] = ()
    catalog_extra: tuple[str, ...] = ()
    if inputs.catalog_ids is not None:
        in_catalog = Counter(inputs.catalog_ids)
        duplicated |= {eid for eid, n in in_catalog.items() if n > 1}
        catalog_missing = tuple(sorted(visible - set(in_catalog)))
        catalog_extra = tuple(sorted(set(in_catalog) - visible))

    latest_reason: dict[str, tuple[int, str]] = {}
    without_id: set[str] = set()
    records_without_id = 0
    for q in inputs.quarantine_rows:
        key = q.counting_key
        if q.episode_id is None:
            without_id.add(key)
            records_without_id += q.record_count
        seen = latest_reason.get(key)
        if seen is None or q.quarantined_at_ns >= seen[0]:
            latest_reason[key] = (q.quarantined_at_ns, q.reason)
    # open rows: rows without an id always; others unless committed later or released
    closed = visible | set(inputs.released) | deleted
    quarantined = {key for key in latest_reason if key in without_id or key not in closed}

    received = {eid for eid in inputs.raw_episode_ids if eid is not None}
    submitted = {eid for eid, n in inputs.submitted.items() if n > 0}
    episodes_in = submitted | received | visible | set(latest_reason) | deleted
    if inputs.unaccounted is not None:  # on the topic, in neither raw nor quarantine
        episodes_in |= inputs.unaccounted.episode_ids | inputs.unaccounted.keyless
    missing = episodes_in - visible - quarantined - deleted
    by_reason = Counter(latest_reason[eid][1] for eid in quarantined)
    return AuditReport(
        episodes_in=len(episodes_in),
        submitted=len(submitted),
        topic_only=len(episodes_in - submitted),
        visible=len(visible),
        quarantined=len(quarantined),
        missing=len(missing),
        duplicated=len(duplicated),
        unconfirmed=len(submitted - set(inputs.confirmed)),
        quarantined_by_reason=dict(sorted(by_reason.items())),
        raw_records=len(inputs.raw_episode_ids),
        raw_records_without_id=sum(1 for eid in inputs.raw_episode_ids if eid is None),
        quarantined_without_id=len(without_id & quarantined),
        quarantined_records_without_id=records_without_id,
        catalog_checked=inputs.catalog_ids is not None,
        catalog_missing=catalog_missing,
        catalog_extra=catalog_extra,
        topic_lag_offsets=None if inputs.topic is None else inputs.topic.lag_offsets,
        missing_ids=tuple(sorted(missing)),
        duplicated_ids=tuple(sorted(duplicated)),
        spool_dirs=tuple(inputs.spool_dirs),
        deleted=len(deleted & episodes_in),
        spool_leftovers=tuple(inputs.spool_leftovers),
        staging_leftovers=inputs.staging_leftovers,
        topic_records_unaccounted=None if inputs.unaccounted is None else len(inputs.unaccounted.records),
        unaccounted_records=() if inputs.unaccounted is None else inputs.unaccounted.lines(),
    )


def format_report(report: AuditReport, *, lake_root: str = "") -> str:
    """The report as the table `pilake audit` prints.

    Example:
        >>> print(format_report(reconcile(AuditInputs(submitted={"e1": 1}))))  # doctest: +SKIP
    """

    def ids(values: Sequence[str]) -> str:
        shown = ", ".join(values[:_SHOWN_IDS])
        return f"  [{shown}{', ...' if len(values) > _SHOWN_IDS else ''}]" if values else ""

    reasons = ", ".join(f"{k} {v}" for k, v in report.quarantined_by_reason.items())
    if not report.catalog_checked:
        catalog = "catalog not checked"
    elif report.catalog_agrees:
        catalog = "catalog agrees"
    else:
        catalog = (
            f"catalog DISAGREES: {len(report.catalog_missing)} not indexed{ids(report.catalog_missing)}, "
            f"{len(report.catalog_extra)} indexed but not visible{ids(report.catalog_extra)}"
        )
    unread = "not read" if report.topic_lag_offsets is None else str(report.topic_lag_offsets)
    lines = [
        f"audit of {lake_root}" if lake_root else "audit",
        f"  in           {report.episodes_in:>8}   submitted through spools {report.submitted}, "
        f"seen only on the topic {report.topic_only}, never acked to the uploader {report.unconfirmed}",
        f"  visible      {report.visible:>8}   {catalog}",
        f"  quarantined  {report.quarantined:>8}   {reasons}"
        + (
            f" ({report.quarantined_without_id} without an episode id)"
            if report.quarantined_without_id
            else ""
        ),
        f"  deleted      {report.deleted:>8}   by operators (pilake episodes delete)",
        f"  missing      {report.missing:>8}{ids(report.missing_ids)}",
        f"  duplicated   {report.duplicated:>8}{ids(report.duplicated_ids)}",
        f"  records: {report.raw_records} in the raw table ({report.raw_records_without_id} without a key), "
        f"{report.quarantined_records_without_id} of them quarantined without an episode id, "
        f"stream job's offset lag on the topic: {unread}",
        *_unaccounted_lines(report),
        f"  spools: {len(report.spool_dirs)} read, {len(report.spool_leftovers)} with leftovers",
        *(f"    {line}" for line in report.spool_leftovers[:_SHOWN_IDS]),
        f"  result: {'OK' if report.ok else 'FAILED'}",
    ]
    return "\n".join(lines)


def _unaccounted_lines(report: AuditReport) -> list[str]:
    if report.topic_records_unaccounted is None:
        return []
    shown = report.unaccounted_records[:_SHOWN_IDS]
    return [
        f"  topic records in neither raw nor quarantine: {report.topic_records_unaccounted}"
        + (
            f"  [{', '.join(shown)}{', ...' if report.topic_records_unaccounted > len(shown) else ''}]"
            if shown
            else ""
        )
    ]


# -- I/O --------------------------------------------------------------------------------------
