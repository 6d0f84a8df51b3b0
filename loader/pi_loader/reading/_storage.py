"""Where the loader's readers get a local file for each Delta data file of the lake.

The main process resolves a pinned table's file URIs with deltalake; readers (in worker
processes too) turn each URI into a path that pyarrow and PyAV can open with `Storage.local_path`.
A local lake needs no copy; an s3:// lake is read through `pyarrow.fs.S3FileSystem` into the
host's `DiskCache` (downloaded once per host, LRU-evicted under a size limit).

Options follow deltalake's `storage_options` names (so one mapping serves both), and the
environment fills what they leave out, as it does for deltalake. Credentials are kept out of
every repr, log line and error message; they do travel inside a pickled storage, because worker
processes need them. Every request to the store is retried on transient errors with jittered
backoff under one deadline (`_retry.RetryConfig`); `S3Options` lives in `_s3_options`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol, runtime_checkable
from urllib.parse import urlsplit

from pi_loader.reading._cache import CacheConfig, DiskCache, StorageError
from pi_loader.reading._ranges import RangeCache
from pi_loader.reading._retry import (
    PermanentStorageError,
    RetryConfig,
    StoreUnreachableError,
    classify,
    clean,
    retrying,
)
from pi_loader.reading._s3_fetch import ObjectHandles, ShortBody, fetch_range
from pi_loader.reading._s3_options import _S3_KEYS, _S3_WRITER_KEYS, S3Options  # noqa: F401 (re-exported)

__all__ = [
    "LocalStorage",
    "PermanentStorageError",
    "RemoteFileNotFoundError",
    "RetryConfig",
    "S3Options",
    "S3Storage",
    "Storage",
    "StorageError",
    "StoreUnreachableError",
    "storage_for",
]

_S3_SCHEMES = ("s3", "s3a")
# Download in pieces of this size: large enough for S3 throughput, small enough for memory.
_DOWNLOAD_PIECE_BYTES = 8 * 2**20
# A body shorter than the object's size is fetched again this many times, then refused: a cut
# connection heals on a retry, a store that keeps serving the wrong length does not.
_SHORT_BODY_TRIES = 3


class RemoteFileNotFoundError(StorageError, FileNotFoundError):
    """A data file of a remote lake does not exist (e.g. vacuumed after a snapshot pinned it).

    Also a FileNotFoundError, so one `except FileNotFoundError` covers local and remote lakes;
    other StorageErrors (unreachable endpoint, file larger than the cache) are not.
    """


@runtime_checkable
class Storage(Protocol):
    """Turns a data file URI of the lake into a local path pyarrow and PyAV can open.

    Contract: picklable (workers are forked or spawned processes) and thread-safe. For a local
    table `local_path` returns the file itself; for a remote one, a cached local copy, downloaded
    once per host, atomically, and evicted least-recently-used to keep the cache under its limit.

    Example:
        >>> storage = storage_for("s3://bucket/lake", storage_options=opts, cache=config)
        >>> pyarrow.parquet.ParquetFile(storage.local_path(uri))
    """

    def local_path(self, uri: str) -> str:
        """A local file path holding the bytes of `uri`."""
        ...


@dataclass(frozen=True, slots=True)
class LocalStorage:
    """Files of a lake on a local (or mounted) file system: paths pass through, nothing is copied.

    Example:
        >>> LocalStorage().local_path("file:///data/lake/steps/part-0.parquet")
        '/data/lake/steps/part-0.parquet'
    """

    def local_path(self, uri: str) -> str:
        if uri.startswith("file://"):
            return urlsplit(uri).path
        if "://" in uri:
            raise ValueError(
                f"LocalStorage reads local paths only, got the URI {uri!r}; use storage_for(uri)"
            )
        return os.path.abspath(uri)


class S3Storage:
    """Files of an s3:// lake, read through pyarrow's S3 client into a host-wide disk cache.

    Picklable: the options and the cache config travel, the S3 client and the cache's file
    handles are made again in each process (pyarrow's S3 client must not cross a fork).

    Example:
        >>> storage = S3Storage(S3Options.from_storage_options(opts), CacheConfig(Path("/nvme/c"), 2**36))
        >>> storage.local_path("s3://bucket/lake/steps/part-0.parquet")
        '/nvme/c/objects/3f/3f2a...parquet'
    """

    def __init__(self, options: S3Options, cache: CacheConfig, retry: RetryConfig | None = None) -> None:
        if not isinstance(options, S3Options):
            raise TypeError(f"options must be S3Options, got {type(options).__name__}")
        if not isinstance(cache, CacheConfig):
            raise TypeError(f"cache must be a CacheConfig, got {type(cache).__name__}")
        if retry is not None and not isinstance(retry, RetryConfig):
            raise TypeError(f"retry must be a RetryConfig, got {type(retry).__name__}")
        self._options = options
        self._cache = DiskCache(cache)
        self._retry = retry or RetryConfig()
        self._reset()

    def _reset(self) -> None:
        self._fs: Any = None
        self._fs_pid = -1
        self._fs_lock = threading.Lock()
        self._ranges = RangeCache(self._cache)
        self._handles = ObjectHandles()  # open pyarrow files of objects, this process

    def __getstate__(self) -> dict[str, object]:
        return {"options": self._options, "cache": self._cache, "retry": self._retry}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._options = state["options"]
        self._cache = state["cache"]
        self._retry = state.get("retry") or RetryConfig()
        self._reset()

    def __repr__(self) -> str:
        return f"S3Storage({self._options!r}, cache={self._cache.config!r})"

    @property
    def cache(self) -> DiskCache:
        return self._cache

    @property
    def retry(self) -> RetryConfig:
        return self._retry

    @property
    def options(self) -> S3Options:
        return self._options

    def _filesystem(self) -> Any:
        pid = os.getpid()
        if self._fs_pid != pid:
            with self._fs_lock:
                if self._fs_pid != pid:
                    self._fs = self._options.filesystem(self._retry)
                    self._fs_pid = pid
        return self._fs

    def _scrub(self, message: str) -> str:
        for secret in self._options.secrets():
            message = message.replace(secret, "***")
        return message

    def local_path(self, uri: str) -> str:
        """A cached local copy of `uri` (an s3:// file of the lake), downloading it on a miss.

        Raises:
            ValueError: `uri` is not an s3:// URI.
            StorageError: the object is missing or unreadable, or larger than the cache.
        """
        path = self._object_path(uri)
        # The endpoint is part of the key: the same bucket/key on two stores are two objects.
        key = f"{self._options.endpoint_url or 'aws'}\n{uri}"
        suffix = os.path.splitext(path.rsplit("/", 1)[-1])[1]
        sized: list[int] = []

        def size_bytes() -> int:  # a request to S3 on a miss only
            sized.append(self._size_bytes(uri, path))
            return sized[-1]

        return self._cache.get(
            key,
            size_bytes=size_bytes,
            fetch=lambda out: self._download(uri, path, out, sized[-1]),
            suffix=suffix,
        )

    def _key(self, uri: str) -> tuple[str, str, str]:
        """(object path, cache key, suffix) of `uri`; the key is `_ranges`' (and the whole
        file's): the endpoint is part of it, the same bucket/key on two stores are two objects."""
        path = self._object_path(uri)
        suffix = os.path.splitext(path.rsplit("/", 1)[-1])[1]
        return path, f"{self._options.endpoint_url or 'aws'}\n{uri}", suffix

    def read_range(self, uri: str, offset: int, size: int) -> bytes:
        """Bytes [offset, offset + size) of `uri` (fewer past the object's end, as `os.pread`),
        from this host's cache or one ranged GET (kept in the cache: `_ranges`).

        Raises:
            ValueError: a negative offset or size, or not an s3:// URI.
            StorageError: the store refused or failed past the retry deadline, or the range is
                larger than the whole cache.
        """
        if isinstance(offset, bool) or isinstance(size, bool) or offset < 0 or size < 0:
            raise ValueError(f"a byte range needs offset >= 0 and size >= 0, got {offset}, {size}")
        if size > self._cache.config.max_size_bytes:
            raise StorageError(
                f"reading {size} bytes of {uri} at {offset}: larger than the whole cache (max_size_bytes="
                f"{self._cache.config.max_size_bytes}); the file's footer or index asks for a range no "
                "lake file holds (damaged?), or the cache is too small"
            )
        path, key, suffix = self._key(uri)
        return self._ranges.read(key, suffix, offset, size, lambda o, n: self._fetch_range(uri, path, o, n))

    def prefetch(self, uri: str, spans: list[tuple[int, int]]) -> None:
        """Fetch the (offset, size) `spans` of `uri` that are not cached, nearby ones in one
        request (`_ranges.coalesce`), so the reads of them that follow are hits."""
        path, key, suffix = self._key(uri)
        self._ranges.prefetch(key, suffix, spans, lambda o, n: self._fetch_range(uri, path, o, n))

    def object_size(self, uri: str) -> int:
        """The size of `uri` in bytes (a HEAD request the first time this host asks)."""
        path, key, _ = self._key(uri)
        return self._ranges.object_size(key, lambda: self._size_bytes(uri, path))

    def _fetch_range(self, uri: str, path: str, offset: int, size: int) -> bytes:
        """One ranged GET of `uri` with retries (`_s3_fetch.fetch_range`)."""
        try:
            return fetch_range(self, uri, path, offset, size)
        except FileNotFoundError as err:
            raise RemoteFileNotFoundError(
                f"{uri} is not a file on {self._options.endpoint} ({self._scrub(clean(str(err)))}); "
                "was it vacuumed after the dataset's Delta version was pinned?"
            ) from None
        except PermanentStorageError:
            raise
        except OSError as err:
            raise self._refused(f"reading {uri}", err) from None

    def stats(self) -> Any:
        """The cache's `CacheStats` for this process."""
        return self._cache.stats()

    def _object_path(self, uri: str) -> str:
        parts = urlsplit(uri)
        if parts.scheme not in _S3_SCHEMES or not parts.netloc or not parts.path.strip("/"):
            raise ValueError(f"expected an s3://bucket/key URI of a lake file, got {uri!r}")
        return parts.netloc + parts.path

    def list_files(self, path: str, *, what: str) -> list[Any]:
        """pyarrow FileInfos of the objects under `path` (bucket/prefix), with retries."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(path, allow_not_found=True)
        try:
            infos = self._retrying(lambda: self._filesystem().get_file_info(selector), what)
        except OSError as err:
            raise self._refused(what, err) from None
        return list(infos)

    def _transient(self, err: BaseException) -> bool:
        return isinstance(err, OSError) and classify(str(err)) == "transient"

    def _retrying(self, op: Any, what: str) -> Any:
        return retrying(
            op,
            what=what,
            endpoint=self._options.endpoint,
            config=self._retry,
            is_transient=self._transient,
            message=lambda err: self._scrub(clean(str(err))),
        )

    def _refused(self, what: str, err: OSError) -> StorageError:
        text = self._scrub(clean(str(err)))
        if classify(text) == "permanent":
            return PermanentStorageError(
                f"{what} on {self._options.endpoint} was refused: {text}; not retried (it would fail "
                "again): check the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), the bucket "
                "name and that this identity may read the lake"
            )
        return StorageError(
            f"{what} on {self._options.endpoint} failed: {text}; check storage_options (endpoint, "
            "region, credentials) and that the object exists"
        )

    def _size_bytes(self, uri: str, path: str) -> int:
        import pyarrow.fs as pafs

        try:
            info = self._retrying(lambda: self._filesystem().get_file_info(path), f"stat {uri}")
        except OSError as err:
            raise self._refused(f"cannot stat {uri}", err) from None  # the chained text may hold a secret
        if info.type != pafs.FileType.File:
            raise RemoteFileNotFoundError(
                f"{uri} is not a file on {self._options.endpoint} (found {info.type.name}); "
                "was it vacuumed after the dataset's Delta version was pinned?"
            )
        return int(info.size)

    def _download(self, uri: str, path: str, out: BinaryIO, size: int) -> None:
        """Stream the object into `out`, again from the start after a transient error. Never
        writes more than `size` bytes; a body of another length is refused (bounded retries)."""
        short: list[int] = []

        def attempt() -> None:
            out.seek(0)
            out.truncate()
            written = 0
            with self._filesystem().open_input_stream(path) as stream:
                while piece := stream.read(min(_DOWNLOAD_PIECE_BYTES, size - written + 1)):
                    written += len(piece)
                    if written > size:
                        raise PermanentStorageError(
                            f"downloading {uri} from {self._options.endpoint}: the store sent more than "
                            f"the object's {size} bytes; refused (a proxy or the store serves the wrong "
                            "body: check the endpoint)"
                        )
                    out.write(piece)
            if written != size:
                short.append(written)
                raise ShortBody(written)

        def transient(err: BaseException) -> bool:
            if isinstance(err, ShortBody):
                return len(short) < _SHORT_BODY_TRIES
            return self._transient(err)

        try:
            retrying(
                attempt,
                what=f"download {uri}",
                endpoint=self._options.endpoint,
                config=self._retry,
                is_transient=transient,
                message=lambda err: self._scrub(clean(str(err))),
            )
        except ShortBody as err:
            raise PermanentStorageError(
                f"downloading {uri} from {self._options.endpoint}: got {err.args[0]} bytes of "
                f"{size}, {len(short)} times; refused (the store cuts the body short or the object "
                "changed, and Delta data files never change: check the store's health)"
            ) from None
        except OSError as err:
            raise self._refused(f"downloading {uri}", err) from None


def storage_for(
    lake_root: str,
    *,
    storage_options: Mapping[str, str] | None = None,
    cache: CacheConfig | None = None,
    retry: RetryConfig | None = None,
) -> Storage:
    """The Storage that reads the data files of the lake at `lake_root`.

    Args:
        lake_root: a local path, a file:// URI, or an s3:// (s3a://) URI.
        storage_options: deltalake-style options for s3:// (AWS_ENDPOINT_URL, AWS_REGION,
            AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_ALLOW_HTTP...);
            missing ones come from the environment.
        cache: the host's disk cache; required for s3://, ignored for a local lake (nothing is
            copied).
        retry: how reads of an s3:// lake are retried (default `RetryConfig()`: 60 s deadline).

    Raises:
        ValueError: bad options, or a remote lake without `cache`.
        NotImplementedError: a remote scheme other than s3:// (gs://, az://, ...).

    Example:
        >>> storage = storage_for("s3://bucket/lake", storage_options={"AWS_REGION": "eu-west-1"},
        ...                       cache=CacheConfig(Path("/nvme/pi_cache"), max_size_bytes=2**38))
    """
    if not isinstance(lake_root, str) or not lake_root:
        raise ValueError(f"lake_root must be a non-empty path or URI, got {lake_root!r}")
    if "://" not in lake_root or lake_root.startswith("file://"):
        return LocalStorage()
    scheme = urlsplit(lake_root).scheme
    if scheme not in _S3_SCHEMES:
        raise NotImplementedError(
            f"pi_loader reads local and s3:// lakes; {scheme}:// is not supported yet ({lake_root!r}). "
            "Mount the store locally, or copy the lake to s3://"
        )
    if cache is None:
        raise ValueError(
            f"reading the remote lake {lake_root!r} needs a local disk cache: pass "
            "cache=CacheConfig(directory=Path('/local/disk/pi_cache'), max_size_bytes=...)"
        )
    return S3Storage(S3Options.from_storage_options(storage_options), cache, retry)
