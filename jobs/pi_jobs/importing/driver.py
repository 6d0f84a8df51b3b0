"""The import driver: outside datasets enter the lake through the fleet's own ingest contract.

Each `ImportedEpisode` is encoded with the wire protocol and spooled by a `pi_ingest.Uploader`
(the robots' uploader), sent to the broker's raw topic, and committed by the stream job, which
validates it against the robot registry, quarantines it with its reason, featurizes it and
commits it exactly once, as it does for a robot's upload (architecture decisions 1-3). With a
`stream` config the driver runs that job on the local mini-cluster until the topic is idle (as
`pilake demo` does); without one the episodes wait in the topic for the stream job that is
running (`pilake stream`). Then it waits for the lake's acknowledgements and adds the episodes'
annotations (LeRobot tasks -> instructions) for the ones committed.

A rerun imports nothing twice: episode ids are deterministic (file contents and item), the ones
the lake already shows are skipped before any encoding, and the stream job drops any duplicate
that reaches it anyway.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pi_format import LakeLayout

from pi_jobs.importing._episodes import ImportedEpisode

if TYPE_CHECKING:
    from pi_ingest import UploaderConfig

    from pi_jobs.stream.config import StreamJobConfig


@dataclass(frozen=True, slots=True)
class ImportConfig:
    """Where an import sends its episodes and who commits them.

    Args:
        uploader: the uploader's broker, topics and spool (a spool of its own: the driver waits
            for every episode in it).
        lake_root: the lake the stream job commits to (read to skip episodes already there).
        stream: run this stream job until idle after sending (None: a running job commits them).
        catalog_path: where annotations are indexed too (None: the lake only).
        confirm_timeout_s: how long to wait for the lake's acknowledgements.
        idle_timeout_s: the stream job's quiet time that ends it.
        annotation_source: the `source` of the annotations an import writes.

    Example:
        >>> ImportConfig(UploaderConfig("127.0.0.1:19092", Path("spool-import")), "/data/lake")
    """

    uploader: UploaderConfig
    lake_root: str
    stream: StreamJobConfig | None = None
    catalog_path: str | None = None
    # an import of thousands of episodes through a 2-core stream job takes minutes to commit
    confirm_timeout_s: float = 600.0
    idle_timeout_s: float = 3.0
    annotation_source: str = "import"

    def __post_init__(self) -> None:
        if not self.confirm_timeout_s > 0:
            raise ValueError(f"confirm_timeout_s must be > 0, got {self.confirm_timeout_s}")


@dataclass(slots=True)
class ImportReport:
    """What an import did."""

    read: int = 0
    already_in_lake: list[str] = field(default_factory=list)
    submitted: list[str] = field(default_factory=list)
    committed: list[str] = field(default_factory=list)
    quarantined: dict[str, str] = field(default_factory=dict)  # episode -> reason: details
    pending: list[str] = field(default_factory=list)
    annotations_added: int = 0
    spooled_mb: float = 0.0
    seconds: float = 0.0

    def lines(self) -> list[str]:
        rate = len(self.submitted) / self.seconds if self.seconds else 0.0
        out = [
            f"import: {self.read} episodes read, {len(self.already_in_lake)} already in the lake (skipped), "
            f"{len(self.submitted)} sent ({self.spooled_mb:.2f} MB) in {self.seconds:.1f} s "
            f"({rate:.2f} episodes/s)",
            f"import: {len(self.committed)} committed, {len(self.quarantined)} quarantined, "
            f"{len(self.pending)} not confirmed; {self.annotations_added} annotations added",
        ]
        for episode, why in sorted(self.quarantined.items())[:10]:
            out.append(f"  quarantined {episode}: {why}")
        if self.pending:
            out.append(
                f"  not confirmed yet: {self.pending[:5]}: is the stream job running (`pilake stream`)? "
                "rerun the import (nothing is imported twice) or `pilake upload --wait-s` later"
            )
        return out


def run_import(
    episodes: Iterable[ImportedEpisode],
    config: ImportConfig,
    *,
    say: Callable[[str], None] = print,
) -> ImportReport:
    """Send `episodes` through the ingest path (see the module docstring) and report.

    Example:
        >>> report = run_import(read_hdf5(Path("lift.hdf5")), config)
        >>> len(report.committed), report.quarantined
        (200, {})
    """
    from pi_ingest import Uploader

    started = time.monotonic()
    report = ImportReport()
    layout = LakeLayout(config.lake_root)
    in_lake = _visible_ids(layout)
    notes: dict[str, ImportedEpisode] = {}
    spooled_bytes = 0
    with Uploader(config.uploader) as uploader:
        for item in episodes:
            report.read += 1
            eid = item.episode.episode_id
            if eid in in_lake:
                report.already_in_lake.append(eid)
                continue
            entry = uploader.submit(item.episode)
            spooled_bytes += entry.size_bytes
            report.submitted.append(eid)
            notes[eid] = item
            elapsed = max(time.monotonic() - started, 1e-9)
            say(
                f"  import: {report.read} read, {len(report.submitted)} spooled "
                f"({len(report.submitted) / elapsed:.2f} episodes/s, "
                f"{spooled_bytes / 1e6 / elapsed:.2f} MB/s) "
                f"{item.source}"
            )
        report.spooled_mb = spooled_bytes / 1e6
        if report.submitted:
            sent = uploader.send_pending()
            say(f"  import: {sent} messages sent to {config.uploader.raw_topic}")
            if config.stream is not None:
                from pi_jobs.stream.driver import run_stream_job

                say("  import: running the stream job until the topic is idle (validate, featurize, commit)")
                stream = run_stream_job(config.stream, until_idle=True, idle_timeout_s=config.idle_timeout_s)
                say(f"  import: {stream}")
            else:
                say("  import: waiting for the running stream job (`pilake stream`) to commit them")
            result = uploader.run_until_confirmed(timeout_s=config.confirm_timeout_s)
            wanted = set(report.submitted)
            quarantined = sorted(wanted & set(result.quarantined))
            report.pending = sorted(wanted & set(result.pending))
            report.committed = sorted(wanted - set(quarantined) - set(report.pending))
            report.quarantined = _quarantine_reasons(layout, quarantined)
    report.annotations_added = _annotate(layout, [notes[e] for e in report.committed], config)
    report.seconds = time.monotonic() - started
    return report


def _visible_ids(layout: LakeLayout) -> set[str]:
    from pi_format.lake import read_committed

    try:
        return set(read_committed(layout, ["episode_id"]).column("episode_id").to_pylist())
    except Exception:  # deltalake's TableNotFoundError: a lake not made yet has no episodes
        return set()


def _quarantine_reasons(layout: LakeLayout, episode_ids: list[str]) -> dict[str, str]:
    """episode -> "reason: details" of its latest quarantine row (the stream job wrote it)."""
    from deltalake import DeltaTable

    out = {e: "quarantined (no quarantine row found)" for e in episode_ids}
    if not episode_ids:
        return out
    try:
        rows = DeltaTable(layout.quarantine).to_pyarrow_table(
            columns=["episode_id", "reason", "details", "quarantined_at_ns"]
        )
    except Exception:  # no quarantine table yet
        return out
    for row in sorted(rows.to_pylist(), key=lambda r: r["quarantined_at_ns"]):
        if row["episode_id"] in out:
            out[row["episode_id"]] = f"{row['reason']}: {row['details'][:300]}"
    return out


def _annotate(layout: LakeLayout, items: list[ImportedEpisode], config: ImportConfig) -> int:
    from pi_format.lake import Annotation, read_committed

    from pi_jobs.maintenance.annotations import add_annotations

    wanted = [i for i in items if i.annotations]
    if not wanted:
        return 0
    rows = read_committed(layout, ["attempt_id"])
    attempts = dict(
        zip(rows.column("episode_id").to_pylist(), rows.column("attempt_id").to_pylist(), strict=True)
    )
    annotations = [
        Annotation(
            episode_id=item.episode.episode_id,
            attempt_id=attempts[item.episode.episode_id],
            step_start=span.start,
            step_end=span.end,
            kind=span.kind,
            value=span.value,
            source=config.annotation_source,
            version=0,
        )
        for item in wanted
        if item.episode.episode_id in attempts
        for span in item.annotations
    ]
    added, _ = add_annotations(layout, annotations, catalog=config.catalog_path)
    return added
