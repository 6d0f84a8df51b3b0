"""Exceptions of pi_loader: one root, `PiLoaderError`, and a subclass per kind of mistake.

Subclasses that describe a bad argument also derive from ValueError, so callers that catch
ValueError for argument mistakes keep working.
"""

from __future__ import annotations


class PiLoaderError(Exception):
    """Root of every error pi_loader raises about the data it reads or the options it is given.

    Example:
        >>> try:
        ...     Dataset("/data/lake", episode_ids=["no-such-episode"])
        ... except PiLoaderError as err:
        ...     print(err)
    """


class UnknownCameraError(PiLoaderError, ValueError):
    """A camera was asked for that not every selected episode has."""


class HorizonTooLongError(PiLoaderError, ValueError):
    """The action horizon is longer than a selected episode (every sample would be mostly padding)."""


class SnapshotError(PiLoaderError):
    """A snapshot cannot be read, or does not match the lake it is opened on."""


class SnapshotDataMissingError(SnapshotError):
    """Data files or Delta versions a snapshot pins are gone (e.g. vacuumed or the log cleaned up)."""


class ShardError(PiLoaderError, ValueError):
    """Bad shard index/count, or a shard that would get no samples."""


class LoaderStateError(PiLoaderError, ValueError):
    """An iterator state that does not belong to this loader (other data, seed or sharding)."""


class WorkerError(PiLoaderError):
    """A loader worker process failed or died."""
