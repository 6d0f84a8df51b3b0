"""The import driver: outside datasets enter the lake through the fleet's own ingest contract.

All or nothing: every `ImportedEpisode` is first read and encoded into a staging directory
(`pi_jobs.importing.staging`); only when the whole dataset has been read without error are they
moved, in one rename, into the import's own spool (`spool-import/<key>/`), from which a
`pi_ingest.Uploader` (the robots' uploader) sends them to the broker's raw topic, to be
committed by the stream job, which validates each against the robot registry, quarantines it
with its reason, featurizes it and commits it exactly once, as it does for a robot's upload
(architecture decisions 1-3). With a `stream` config the driver runs that job on the local
mini-cluster until the topic is idle (as `pilake demo` does); without one the episodes wait in
the topic for the stream job that is running (`pilake stream`). Then it waits for the lake's
acknowledgements and adds the annotations (LeRobot tasks -> instructions) of every episode of
the import the lake shows.

A rerun imports nothing twice: episode ids are deterministic (file contents and item), the ones
the lake already shows are skipped before any encoding (their annotations are still added if an
earlier run could not), the import's spool key is the same, so what an earlier run left pending
is resumed, and the stream job drops any duplicate that reaches it anyway. An unrelated import
has another key and never sends this one's episodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pi_format import LakeLayout

from pi_jobs.importing._episodes import ImportedEpisode, SpanText

if TYPE_CHECKING:
    from pi_ingest import Uploader, UploaderConfig

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
    spool_dir: str = ""  # the import's own spool (spool root / key)

    def lines(self) -> list[str]:
        rate = len(self.submitted) / self.seconds if self.seconds else 0.0
        out = [
            f"import: {self.read} episodes read, {len(self.already_in_lake)} already in the lake (skipped), "
            f"{len(self.submitted)} sent ({self.spooled_mb:.2f} MB new) in {self.seconds:.1f} s "
            f"({rate:.2f} episodes/s)",
            f"import: {len(self.committed)} committed, {len(self.quarantined)} quarantined, "
            f"{len(self.pending)} not confirmed; {self.annotations_added} annotations added",
        ]
        for episode, why in sorted(self.quarantined.items())[:10]:
            out.append(f"  quarantined {episode}: {why}")
        if self.pending:
            out.append(
                f"  not confirmed yet: {self.pending[:5]} (in {self.spool_dir}): is the stream job running "
                "(`pilake stream`)? rerun the same import: it resumes them and adds their annotations "
                "(nothing is imported twice)"
            )
        return out


def run_import(
    episodes: Iterable[ImportedEpisode],
    config: ImportConfig,
    *,
    say: Callable[[str], None] = print,
) -> ImportReport:
    """Send `episodes` through the ingest path (see the module docstring) and report.

    Every episode is read and encoded before any is spooled (`pi_jobs.importing.staging`): an
    import that fails while reading raises `DatasetImportError` and has spooled and sent
    nothing. The episodes go into the import's own spool (`<spool_dir>/<key>/`), so only this
    import (or its rerun, which resumes it) ever sends them; annotations are added for every
    episode of the import the lake shows at the end, also ones an earlier run committed.

    Raises:
        DatasetImportError: a file could not be read (nothing was sent).

    Example:
        >>> report = run_import(read_hdf5(Path("lift.hdf5")), config)
        >>> len(report.committed), report.quarantined
        (200, {})
    """
    from pi_ingest import Uploader

    from pi_jobs.importing.staging import stage_import

    started = time.monotonic()
    report = ImportReport()
    layout = LakeLayout(config.lake_root)
    in_lake = _visible_ids(layout)
    staged = stage_import(episodes, Path(config.uploader.spool_dir), in_lake=in_lake, say=say)
    report.read, report.already_in_lake = staged.read, list(staged.in_lake)
    report.spooled_mb = staged.staged_bytes / 1e6
    report.spool_dir = str(staged.spool_dir)
    if staged.spool_dir.is_dir():
        with Uploader(replace(config.uploader, spool_dir=staged.spool_dir)) as uploader:
            # an earlier run's entries that the lake committed after that run stopped waiting
            for entry in uploader.spool.entries():
                if entry.episode_id in in_lake:
                    uploader.spool.confirm(entry.episode_id, status="committed")
            report.submitted = sorted(e.episode_id for e in uploader.spool.entries())
            resumed = sorted(set(report.submitted) - set(staged.staged))
            if resumed:
                say(f"  import: resuming {len(resumed)} episodes an earlier run of this import spooled")
            if report.submitted:
                _send_and_confirm(uploader, config, report, layout, say)
    visible = _visible_ids(layout)
    items = {e: spans for e, spans in staged.annotations.items() if e in visible and spans}
    report.annotations_added = _annotate(layout, items, config)
    report.seconds = time.monotonic() - started
    return report


def _send_and_confirm(
    uploader: Uploader,
    config: ImportConfig,
    report: ImportReport,
    layout: LakeLayout,
    say: Callable[[str], None],
) -> None:
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


def _annotate(layout: LakeLayout, items: dict[str, tuple[SpanText, ...]], config: ImportConfig) -> int:
    """Add each episode's annotations (rows already in the lake are not added twice)."""
    from pi_format.lake import Annotation, read_committed

    from pi_jobs.maintenance.annotations import add_annotations

    if not items:
        return 0
    rows = read_committed(layout, ["attempt_id"])
    attempts = dict(
        zip(rows.column("episode_id").to_pylist(), rows.column("attempt_id").to_pylist(), strict=True)
    )
    annotations = [
        Annotation(
            episode_id=eid,
            attempt_id=attempts[eid],
            step_start=span.start,
            step_end=span.end,
            kind=span.kind,
            value=span.value,
            source=config.annotation_source,
            version=0,
        )
        for eid, spans in sorted(items.items())
        if eid in attempts
        for span in spans
    ]
    added, _ = add_annotations(layout, annotations, catalog=config.catalog_path)
    return added
