"""What live training runs hold from GC (`pilake gc`): their rows, and the files they may read.

A run that is running, with a heartbeat within `pi_catalog.LIVE_WINDOW_S` (600 s; `pilake
train` beats every 30 s), holds:

* the (episode_id, attempt_id) rows it reads, as a dataset pin would, even when its pin has
  been deleted since it started or the episodes were deleted or superseded: GC keeps their
  episodes rows (and so their steps and video rows);
* every data file a commit removed after the run started, whatever the retention: its loader
  resolved its rows' files when it opened, and a compaction or a GC rewrite since then removed
  them from the tables, but not from under the running loader.

Once the run ends (finished, failed, preempted) or its heartbeat is older than the window (its
host died), the next GC removes what only it held. The runs come from the catalog's
`training_runs` (pi_jobs.ops.runs records them); a catalog that cannot be read stops `pilake gc`
before it deletes anything (`--no-run-check` runs it without, knowingly).

Example:
    >>> holds = live_run_holds("/data/catalog")
    >>> gc(LakeLayout("/data/lake"), GcConfig(), live_runs=holds)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from pi_jobs.errors import PiJobsError


class RunCheckError(PiJobsError):
    """`pilake gc` could not read the live runs from the catalog, so it removed nothing."""


@dataclass(frozen=True, slots=True)
class RunHold:
    """One live run, as GC sees it.

    Example:
        >>> RunHold(run_id="r1", since_ns=t0, episode_ids=("ep-1",), attempt_ids=("a1",))
    """

    run_id: str
    since_ns: int  # when it started: files removed from then on may be under its loader
    episode_ids: tuple[str, ...] = ()
    attempt_ids: tuple[str, ...] = ()
    pin_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.episode_ids) != len(self.attempt_ids):
            raise ValueError(
                f"run {self.run_id!r}: {len(self.episode_ids)} episode ids, {len(self.attempt_ids)} attempts"
            )


def keep_removed_since_ms(runs: Sequence[RunHold]) -> float | None:
    """Files removed at or after this time (ms) are kept: the earliest live run's start."""
    return min(r.since_ns for r in runs) / 1e6 if runs else None


def live_run_holds(
    catalog: str, *, now_ns: int | None = None, window_s: float | None = None
) -> list[RunHold]:
    """The live runs the catalog at `catalog` records, with the rows each reads.

    Raises:
        RunCheckError: the catalog cannot be read (the message says what to do).

    Example:
        >>> [h.run_id for h in live_run_holds("/data/catalog")]
        ['train-torch-20261127T130501Z-1a2b3c4d']
    """
    from pi_catalog import LIVE_WINDOW_S, Catalog, live_run_reads

    now = time.time_ns() if now_ns is None else now_ns
    try:
        reads = live_run_reads(Catalog(catalog), now, LIVE_WINDOW_S if window_s is None else window_s)
    except Exception as err:
        raise RunCheckError(
            f"gc cannot tell which training runs are live: the catalog {catalog} did not answer "
            f"({type(err).__name__}: {str(err)[:300]}); nothing was removed. Retry when it is up, or "
            "pass --no-run-check if no run reads this lake"
        ) from err
    return [
        RunHold(
            run_id=r.run_id,
            since_ns=r.started_at_ns,
            episode_ids=r.episode_ids,
            attempt_ids=r.attempt_ids,
            pin_names=r.pin_names,
        )
        for r in reads
    ]
