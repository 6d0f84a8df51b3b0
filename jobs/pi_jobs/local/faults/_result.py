"""What a fault scenario reports: the audit's counts plus what the scenario observed."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("pi_jobs.local.faults")


@dataclass(frozen=True, slots=True)
class FaultResult:
    """The outcome of one scenario: the audit's counts plus what the scenario observed."""

    fault: str
    episodes_in: int
    visible: int
    quarantined: int
    lost: int
    duplicated: int
    elapsed_s: float
    observed: Mapping[str, Any] = field(default_factory=dict)
    audit: Mapping[str, Any] = field(default_factory=dict)

    def row(self) -> str:
        """One line for logs and test output: the counts and the elapsed time."""
        return (
            f"{self.fault:<20} in {self.episodes_in:>3}  visible {self.visible:>3}  quarantined "
            f"{self.quarantined:>3}  lost {self.lost:>2}  duplicated {self.duplicated:>2}  "
            f"({self.elapsed_s:.0f} s)"
        )


def make_result(fault: str, report: Mapping[str, Any], t0: float, observed: Mapping[str, Any]) -> FaultResult:
    """The result of scenario `fault` from `pilake audit --json`'s report, started at `t0`."""
    result = FaultResult(
        fault=fault,
        episodes_in=int(report["episodes_in"]),
        visible=int(report["visible"]),
        quarantined=int(report["quarantined"]),
        lost=int(report["missing"]),
        duplicated=int(report["duplicated"]),
        elapsed_s=time.monotonic() - t0,
        observed=dict(observed),
        audit=dict(report),
    )
    log.info("fault %s", result.row())
    return result
