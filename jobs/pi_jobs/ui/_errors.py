"""Exceptions of the lake browser: one root under PiJobsError."""

from __future__ import annotations

from pi_jobs.errors import PiJobsError


class UiError(PiJobsError):
    """Root of the lake browser's errors."""


class QueryRefused(UiError):
    """A query the Query page does not run: not a single SELECT, or it changes settings.

    Example:
        >>> try:
        ...     check_select("DROP TABLE episodes_index")
        ... except QueryRefused as err:
        ...     print(err)
    """


class PathRefused(UiError):
    """A file route was asked for a path outside its folder (`..`, an absolute path)."""


class NotFound(UiError):
    """The episode, camera or pin asked for does not exist (or is not visible)."""


class QueryBusy(UiError):
    """The Query page runs its most queries at once and its queue is full, or a query waited
    longer than its bound for a turn: retry in a few seconds (HTTP 503 with Retry-After)."""
