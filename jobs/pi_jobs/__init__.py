"""pi_jobs: the PyFlink stream job, the lake sink, the local stack and the `pilake` CLI."""

from pi_jobs.errors import PiJobsError, StackError, StreamJobError
from pi_jobs.settings import Settings

__all__ = ["PiJobsError", "Settings", "StackError", "StreamJobError"]
