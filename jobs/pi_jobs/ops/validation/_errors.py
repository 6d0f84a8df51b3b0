"""Errors of pi_jobs.ops.validation (under pi_jobs' single root, PiJobsError)."""

from __future__ import annotations

from pi_jobs.errors import PiJobsError


class ValidationSetupError(PiJobsError):
    """Validation could not run: no suite for the table, or the table/version cannot be read.

    A validation that runs and finds bad data is not an error: it is a report with failures.
    """
