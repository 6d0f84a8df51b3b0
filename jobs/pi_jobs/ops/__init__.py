"""Operator tools over a lake: `audit` (nothing lost, nothing duplicated), `quarantine` (list,
show, release), `validation` (expectation suites and drift), `freshness` (readable - published
per episode), `trace` (one episode's history). They read the lake through
`pi_format.lake` and may start the stream job's pieces (a release re-featurizes); they never
import the CLI.
"""

from pi_jobs.ops.audit import AuditError, AuditReport, audit, format_report
from pi_jobs.ops.freshness import FreshnessError, FreshnessSummary, read_freshness, summarize
from pi_jobs.ops.quarantine import QuarantineError, ReleaseRejected, list_quarantine, release_episode
from pi_jobs.ops.trace import TraceError, TraceEvent, trace_episode

__all__ = [
    "AuditError",
    "AuditReport",
    "FreshnessError",
    "FreshnessSummary",
    "QuarantineError",
    "ReleaseRejected",
    "TraceError",
    "TraceEvent",
    "audit",
    "format_report",
    "list_quarantine",
    "read_freshness",
    "release_episode",
    "summarize",
    "trace_episode",
]
