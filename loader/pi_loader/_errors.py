"""Exceptions of pi_loader: one root."""

from __future__ import annotations


class PiLoaderError(Exception):
    """Root of every error pi_loader raises about the data it reads (missing, inconsistent).

    Argument mistakes raise ValueError/TypeError as usual.

    Example:
        >>> try:
        ...     Dataset("/data/lake", episode_ids=["no-such-episode"])
        ... except PiLoaderError as err:
        ...     print(err)
    """
