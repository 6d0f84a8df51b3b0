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


class CorruptDataError(PiLoaderError):
    """Stored bytes the loader read do not match their checksum (a Parquet page's CRC, a video
    chunk's `chunk_crc32`): the file changed after it was written. Never a wrong sample: the
    read fails (or, with `Loader(on_corrupt="skip")`, the sample is skipped and counted).
    `where` names the lake table, the file, the row group and page or column, and the episode
    and attempt when known; `pilake verify` finds every such place, `pilake repair` fixes them.

    Example:
        >>> try:
        ...     ds[7]
        ... except CorruptDataError as err:
        ...     print(err.where["file"], err.where["row_group"], err.where.get("episode_id"))
    """

    def __init__(self, detail: str, where: dict[str, object]) -> None:
        self.detail = detail
        self.where = dict(where)
        super().__init__(self._text())

    def _text(self) -> str:
        w = self.where
        parts = [f"{w.get('table', '?')} file {w.get('file', '?')}"]
        for key, name in (("row_group", "row group"), ("column", "column"), ("page", "page")):
            if w.get(key) is not None:
                parts.append(f"{name} {w[key]}")
        if w.get("episode_id") is not None:
            parts.append(f"episode {w['episode_id']} (attempt {w.get('attempt_id')})")
        return (
            f"corrupt data in {', '.join(parts)}: {self.detail}. The stored bytes changed after "
            "they were written: run `pilake verify` and `pilake repair` (or pass "
            "Loader(on_corrupt='skip') to skip such samples)"
        )

    def at_episode(self, episode_id: str, attempt_id: str) -> CorruptDataError:
        """The same error, naming the episode whose sample read it (kept when already named)."""
        if self.where.get("episode_id") is not None:
            return self
        named = {**self.where, "episode_id": episode_id, "attempt_id": attempt_id}
        return CorruptDataError(self.detail, named)

    def __reduce__(self) -> tuple[type[CorruptDataError], tuple[str, dict[str, object]]]:
        # crosses from loader workers to the parent process intact
        return (CorruptDataError, (self.detail, self.where))
