"""Exceptions of pi_jobs: one root for the stream job, the local stack and the CLI."""

from __future__ import annotations


class PiJobsError(Exception):
    """Root of every error pi_jobs raises."""


class StackError(PiJobsError):
    """The local stack (broker, Java, connector jars) cannot start or is unhealthy."""


class StreamJobError(PiJobsError):
    """The stream job failed; the message says where its logs are."""
