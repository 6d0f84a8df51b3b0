"""Operator tools over a lake: `audit` (nothing lost, nothing duplicated), `quarantine` (list,
show, release), `validation` (expectation suites and drift). They read the lake through
`pi_format.lake` and may start the stream job's pieces (a release re-featurizes); they never
import the CLI.
"""

from pi_jobs.ops.audit import AuditError, AuditReport, audit, format_report
from pi_jobs.ops.quarantine import QuarantineError, ReleaseRejected, list_quarantine, release_episode

__all__ = [
    "AuditError",
    "AuditReport",
    "QuarantineError",
    "ReleaseRejected",
    "audit",
    "format_report",
    "list_quarantine",
    "release_episode",
]
