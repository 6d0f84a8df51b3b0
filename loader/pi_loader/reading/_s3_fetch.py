"""Ranged GETs of s3:// objects for `S3Storage.read_range` (`_ranges` keeps what they fetch).

An object is opened once per process (`ObjectHandles`: the open is a HEAD request, which also
gives its size) and each range is one `read_at`, a GET with a Range header. Every GET is retried
on transient errors under the storage's `RetryConfig` deadline; a body shorter than asked (and
than the object holds) is fetched again a few times, then refused; a range past the object's
end comes back short, as `os.pread` does, and the reader says the file is shorter than its
footer or index (a `CorruptDataError` naming it).

Example:
    >>> fetch_range(storage, "s3://b/lake/video/p.parquet", "b/lake/video/p.parquet", 4096, 512)
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from pi_loader.reading._retry import PermanentStorageError, clean, retrying

if TYPE_CHECKING:
    from pi_loader.reading._storage import S3Storage

__all__ = ["ObjectHandles", "ShortBody", "fetch_range"]

# Objects a process keeps open for ranged GETs (an open costs a HEAD request; a handle holds
# no connection between reads).
OPEN_OBJECTS = 64
# A body shorter than asked is fetched again this many times, then refused: a cut connection
# heals on a retry, a store that keeps serving the wrong length does not.
SHORT_BODY_TRIES = 3


class ShortBody(Exception):
    """A body ended before the bytes asked for (retried a few times, then refused)."""


class ObjectHandles:
    """Open pyarrow input files of objects, least recently used closed first; per process (a
    forked child opens its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[str, Any] = OrderedDict()
        self._pid = os.getpid()

    def get(self, storage: S3Storage, path: str) -> Any:
        if self._pid != os.getpid():  # forked: the parent's lock may have been held at the fork
            self._lock, self._open, self._pid = threading.Lock(), OrderedDict(), os.getpid()
        with self._lock:
            handle = self._open.get(path)
            if handle is not None:
                self._open.move_to_end(path)
                return handle
        handle = storage._filesystem().open_input_file(path)
        with self._lock:
            self._open[path] = handle
            while len(self._open) > OPEN_OBJECTS:
                self._open.popitem(last=False)
        return handle

    def drop(self, path: str) -> None:
        """Forget `path`'s handle (after a failed read: a failed connection is not reused)."""
        with self._lock:
            self._open.pop(path, None)


def fetch_range(storage: S3Storage, uri: str, path: str, offset: int, size: int) -> bytes:
    """Bytes [offset, offset + size) of the object at `path` (fewer past its end), one GET.

    Raises:
        FileNotFoundError: no such object.
        PermanentStorageError: bodies shorter than asked, SHORT_BODY_TRIES times.
        OSError: what the store answered, after retries (the caller words it).
    """
    short: list[int] = []
    handles: ObjectHandles = storage._handles

    def attempt() -> bytes:
        try:
            handle = handles.get(storage, path)
            want = max(0, min(size, int(handle.size()) - offset))
            data = bytes(handle.read_at(want, offset)) if want else b""
        except FileNotFoundError:
            raise
        except OSError:
            handles.drop(path)
            raise
        if len(data) != want:
            handles.drop(path)
            short.append(len(data))
            raise ShortBody(len(data))
        return data

    def transient(err: BaseException) -> bool:
        if isinstance(err, ShortBody):
            return len(short) < SHORT_BODY_TRIES
        return storage._transient(err)

    try:
        data: bytes = retrying(
            attempt,
            what=f"read bytes {offset}..{offset + size} of {uri}",
            endpoint=storage.options.endpoint,
            config=storage.retry,
            is_transient=transient,
            message=lambda err: storage._scrub(clean(str(err))),
        )
    except ShortBody as err:
        raise PermanentStorageError(
            f"reading bytes {offset}..{offset + size} of {uri} from {storage.options.endpoint}: got "
            f"{err.args[0]} bytes, {len(short)} times; refused (the store cuts the body short or the "
            "object changed, and Delta data files never change: check the store's health)"
        ) from None
    return data
