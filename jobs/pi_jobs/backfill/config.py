"""A backfill run's options and its report (`pilake backfill` parses into `BackfillConfig`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pi_jobs.errors import PiJobsError
from pi_jobs.stream.featurize import FeaturizeConfig

_INTO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class BackfillError(PiJobsError):
    """A backfill could not plan or its Flink job failed; the message says where the logs are."""


@dataclass(frozen=True, slots=True)
class BackfillConfig:
    """What to re-featurize, with which featurizer, and where the new attempts go.

    Args:
        lake_root: the lake whose `raw` table is read (and, without `into`, written).
        catalog_path: its catalog (chdb path or server URL): the `--where` selection, the new
            attempts' index rows (same lake) and the `backfill_runs` record.
        featurizer: a name of `pi_jobs.backfill.featurizers.FEATURIZERS`.
        work_dir: Flink logs and the workers' progress files.
        where: a ClickHouse WHERE clause over the catalog's `episodes` view; None: every
            visible episode.
        into: None: commit the new attempts to the same lake (they supersede the visible ones);
            a name: write them into the separate lake `<lake_root>/derived/<into>` (its own
            catalog beside the main one, see `target_catalog`), the source lake untouched.
        parallelism: Flink subtasks of the backfill function, each its own lake writer.
        group_commit_episodes: episodes per group commit (one Delta commit per table).
        group_commit_delay_s: longest a featurized episode waits for its group commit.
        run_id: this run's id ("" = made from the featurizer and the start time); writer ids are
            "backfill-<run_id>-<subtask>", unique per run and subtask.
        progress_interval_s: how often the driver logs progress.

    Example:
        >>> BackfillConfig(lake_root="/data/lake", catalog_path="/data/catalog",
        ...                featurizer="res96", work_dir=Path("/data/backfill"), where="success")
    """

    lake_root: str
    catalog_path: str
    featurizer: str
    work_dir: Path
    where: str | None = None
    into: str | None = None
    # 1: the machine the project runs on has 2 cores, and one worker featurizing keeps one busy
    parallelism: int = 1
    # 16 episodes per group: a group's four Delta commits cost ~35 ms, a backfill worker
    # featurizes ~3 episodes/s, so commits stay a few percent of the time while a kill loses
    # at most ~5 s of work (the episodes waiting in memory are redone by the restart).
    group_commit_episodes: int = 16
    group_commit_delay_s: float = 10.0
    run_id: str = ""
    progress_interval_s: float = 5.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "work_dir", Path(self.work_dir))
        if self.where is not None and not self.where.strip():
            raise ValueError("where must be a non-empty SQL condition or None, got ''")
        if self.into is not None and not _INTO_NAME.match(self.into):
            raise ValueError(
                f"into must be a lake name matching {_INTO_NAME.pattern} (it becomes a directory "
                f"under <lake>/derived/), got {self.into!r}"
            )
        if self.parallelism < 1:
            raise ValueError(f"parallelism must be >= 1, got {self.parallelism}")
        if self.group_commit_episodes < 1:
            raise ValueError(f"group_commit_episodes must be >= 1, got {self.group_commit_episodes}")
        if not self.group_commit_delay_s > 0:
            raise ValueError(f"group_commit_delay_s must be > 0, got {self.group_commit_delay_s}")
        if not self.progress_interval_s > 0:
            raise ValueError(f"progress_interval_s must be > 0, got {self.progress_interval_s}")

    @property
    def target_root(self) -> str:
        """The lake the new attempts are committed to."""
        if self.into is None:
            return self.lake_root
        return f"{self.lake_root.rstrip('/')}/derived/{self.into}"

    @property
    def target_catalog(self) -> str | None:
        """The catalog the new attempts are recorded in: the main one (same lake), a chdb path
        `<catalog>-derived/<into>` beside it (`into`), or None for `into` with a server catalog
        (run `pilake catalog rebuild` against the derived lake there)."""
        if self.into is None:
            return self.catalog_path
        if "://" in self.catalog_path:
            return None
        return f"{self.catalog_path.rstrip('/')}-derived/{self.into}"

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "log"

    @property
    def progress_path(self) -> Path:
        return self.work_dir / "progress.json"


@dataclass(frozen=True, slots=True)
class BackfillReport:
    """What a backfill run did.

    Example:
        >>> report = run_backfill(config)
        >>> report.committed, report.failed
        (40, 0)
    """

    run_id: str
    featurizer: str  # "<name>@<version>"
    target_lake: str
    selected: int  # episodes the selection named (visible ones)
    already_done: int  # of those, already carrying this featurizer: skipped
    committed: int  # new attempts committed by this run
    duplicates: int  # found done at commit time (a concurrent or killed run committed them)
    failed: int  # decode or featurize errors (not committed; a re-run tries again)
    failures: tuple[str, ...]  # "<episode_id>: <error>", the first 100
    raw_bytes: int  # bytes of raw messages read
    elapsed_s: float  # the whole run, planning and Flink startup included
    job_s: float  # from the job's first progress to its end (the throughput's denominator)

    @property
    def processed(self) -> int:
        return self.committed + self.duplicates + self.failed

    @property
    def episodes_per_s(self) -> float:
        return self.processed / self.job_s if self.job_s > 0 else 0.0

    @property
    def raw_mb_per_s(self) -> float:
        return self.raw_bytes / 1e6 / self.job_s if self.job_s > 0 else 0.0

    def __str__(self) -> str:
        return (
            f"{self.featurizer} into {self.target_lake}: {self.selected} selected, "
            f"{self.already_done} already done, {self.committed} committed, {self.duplicates} "
            f"duplicate, {self.failed} failed; {self.episodes_per_s:.2f} episodes/s, "
            f"{self.raw_mb_per_s:.2f} MB/s raw over {self.job_s:.1f} s (run {self.elapsed_s:.1f} s)"
        )


@dataclass(frozen=True, slots=True)
class BackfillSettings:
    """What the worker-side function needs; pickled into the Flink job."""

    source_root: str
    target_root: str
    catalog_path: str | None  # where the new attempts are recorded; None: nowhere
    featurize: FeaturizeConfig
    featurizer_tag: str  # "<name>@<version>"
    writer_prefix: str  # writer ids are f"{writer_prefix}-{subtask}"
    progress_path: str
    group_commit_episodes: int
    group_commit_delay_s: float
