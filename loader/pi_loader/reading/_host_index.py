"""What the host-wide file indexes share (`_chunk_index` for video files, `_steps_index` for
steps files): built once per host per file, mapped by every process.

The first process of a host that needs an index of a lake file builds it (from the file's footer
and a few small columns, through the `RowGroupReader` whose counters count those bytes) under a
striped `flock`, so processes that miss the same file at once build it once. It saves the int64
array [row groups, columns] atomically (`os.replace` of a temp file) as `<sha1>.npy` under the
host's index directory (`index_directory`), keyed by the file's URI and size (Delta data files
are immutable), and every process then reads the one row it needs when it needs it
(`IndexRows`: a `pread` from the page cache on a kept descriptor; nothing mapped, so a process
touching thousands of files' indexes holds none of their pages). Each process keeps a bounded
LRU of open indexes. An empty index ([0, columns]) means "not laid out for footer-free reads":
readers then use the row-group path. A read-only or full disk degrades to indexes held in the
process (bounded too).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pi_loader.reading import _file_handles as file_handles
from pi_loader.reading._cache import CacheConfig
from pi_loader.reading._lru import WeightedLRU
from pi_loader.reading._row_groups import RowGroupReader

# Indexes kept open per process: one on disk is its path and shape (IndexRows: a row is read
# when asked, nothing mapped); one held in memory (no index directory) costs its bytes, so the
# bound is in bytes, an IndexRows weighing 1 kB.
_OPEN_INDEXES = 256
_INDEX_MEMORY_BYTES = 32 * 2**20
_ROWS_WEIGHT = 1024
_LOCK_STRIPES = 64


def index_directory(lake_root: str, cache: CacheConfig | None) -> str:
    """Where this host keeps the file indexes of the lake at `lake_root`: under the disk cache's
    directory when there is one (`<cache>/chunk-index/<sha1 of the root>`), else under the temp
    directory (`$TMPDIR/pilake-chunk-index-<uid>/<sha1 of the root>`)."""
    digest = hashlib.sha1(lake_root.rstrip("/").encode()).hexdigest()
    if cache is not None:
        return str(Path(cache.directory) / "chunk-index" / digest)
    return str(Path(tempfile.gettempdir()) / f"pilake-chunk-index-{os.getuid()}" / digest)


def file_key(*parts: str) -> int:
    """A signed 64-bit hash of `parts` (an identity an index stores in one int64 column)."""
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class HostIndex:
    """The indexes of one kind of lake file on this host. Subclasses set COLUMNS (int64 columns
    per row group), KIND (part of the index file's name, so kinds never collide) and `build`.
    Thread-safe, picklable (only the directory travels). `directory=None` keeps each index in
    this process only. Counter (this process): `builds` (files indexed here)."""

    COLUMNS: ClassVar[int]
    KIND: ClassVar[str]

    def __init__(self, directory: str | None) -> None:
        self._directory = directory
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._open: WeightedLRU[str, np.ndarray | IndexRows] = WeightedLRU(
            _INDEX_MEMORY_BYTES, max_items=_OPEN_INDEXES
        )
        self._writable = self._directory is not None
        self.builds = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self._directory}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._directory = state["directory"]
        self._reset()

    @property
    def directory(self) -> str | None:
        return self._directory

    def build(self, reader: RowGroupReader, uri: str, path: str, file_size: int) -> np.ndarray:
        """The index of the file `uri` at local `path`: int64 [row groups, COLUMNS], or
        [0, COLUMNS] when its layout does not allow footer-free reads."""
        raise NotImplementedError

    def entries(self, reader: RowGroupReader, uri: str, path: str) -> np.ndarray | IndexRows:
        """The index of the file `uri` (at local `path`), built (through `reader`, whose counters
        count what the build reads) when no process of this host has built it yet."""
        with self._lock:
            found = self._open.get(uri)
        if found is not None:
            return found
        file_size = reader.file_size(uri, path)
        name = hashlib.sha1(f"{self.KIND}{uri}\n{file_size}".encode()).hexdigest()
        entries = self._load(name)
        if entries is None:
            with self._build_lock(name):
                entries = self._load(name)  # built by another process while this one waited
                if entries is None:
                    entries = self.build(reader, uri, path, file_size)
                    with self._lock:
                        self.builds += 1
                    self._save(name, entries)
                    mapped = self._load(name)  # mapped, not held, once saved
                    entries = entries if mapped is None else mapped
        weight = _ROWS_WEIGHT if isinstance(entries, IndexRows) else max(entries.nbytes, 1)
        with self._lock:
            self._open.put(uri, entries, weight=weight)
        return entries

    def _load(self, name: str) -> np.ndarray | IndexRows | None:
        if self._directory is None:
            return None
        file = os.path.join(self._directory, name + ".npy")
        try:
            rows = IndexRows.open(file)
        except (OSError, ValueError):  # missing, unreadable or not an index: build it (again)
            return None
        if rows.shape[1] != self.COLUMNS:
            return None
        return np.empty((0, self.COLUMNS), np.int64) if rows.shape[0] == 0 else rows

    def _save(self, name: str, entries: np.ndarray) -> None:
        if not self._writable or self._directory is None:
            return
        tmp = os.path.join(self._directory, f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as f:
                np.save(f, entries, allow_pickle=False)
            os.replace(tmp, os.path.join(self._directory, name + ".npy"))
        except OSError:
            # A read-only or full disk: index in this process only (its memory LRU still bounds it).
            self._writable = False
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    @contextlib.contextmanager
    def _build_lock(self, name: str) -> Iterator[None]:
        """Striped fcntl lock: processes that miss the same file at once index it once."""
        fd = -1
        if self._writable and self._directory is not None:
            try:
                locks = os.path.join(self._directory, "locks")
                os.makedirs(locks, exist_ok=True)
                stripe = os.path.join(locks, f"{int(name[:8], 16) % _LOCK_STRIPES:02d}")
                fd = os.open(stripe, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                self._writable = False
                if fd >= 0:
                    os.close(fd)
                fd = -1
        try:
            yield
        finally:
            if fd >= 0:
                os.close(fd)  # releases the lock


class IndexRows:
    """A saved index read a row at a time (`os.pread` of one row of the .npy file): a lookup
    costs one small read from the page cache, and nothing is mapped, so a process that touches
    thousands of files' indexes holds none of their pages (a memory map would count them in its
    resident set). Has what readers use of an index array: `shape` and `rows[i]`.

    Example:
        >>> rows = IndexRows.open("/tmp/pilake-chunk-index-0/ab12/3f9e.npy")
        >>> rows.shape, rows[0]
        ((150, 8), array([...]))
    """

    __slots__ = ("_data_offset", "_handle", "_path", "shape")

    def __init__(self, path: str, shape: tuple[int, int], data_offset: int, inode: int = 0) -> None:
        self._path = path
        self.shape = shape
        self._data_offset = data_offset
        # A rebuilt index replaces the file (a new inode): its kept descriptor is another one.
        self._handle = ("host-index", path, inode)

    @classmethod
    def open(cls, path: str) -> IndexRows:
        """Read the header of the .npy index at `path` (ValueError: not a 2-D int64 C array)."""
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"{path}: .npy version {version} is not one an index is saved in")
            offset = f.tell()
            status = os.fstat(f.fileno())
            size = status.st_size
        if dtype != np.dtype("<i8") or fortran or len(shape) != 2:
            raise ValueError(f"{path}: {dtype} {shape} is not an index (2-D little-endian int64)")
        if size < offset + shape[0] * shape[1] * 8:
            raise ValueError(f"{path}: {size} bytes, too short for {shape} int64 (truncated?)")
        return cls(path, (int(shape[0]), int(shape[1])), offset, status.st_ino)

    def __getitem__(self, key: int | tuple[int, Any]) -> Any:
        if isinstance(key, tuple):  # rows[i, column]: the row, then numpy indexing of it
            row, column = key
            return self._row(int(row))[column]
        return self._row(int(key))

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self) -> Iterator[np.ndarray]:
        for row in range(self.shape[0]):
            yield self._row(row)

    def _row(self, row: int) -> np.ndarray:
        rows, columns = self.shape
        if not 0 <= row < rows:
            raise IndexError(f"row {row} of an index of {rows} rows ({self._path})")
        width = columns * 8
        raw = file_handles.pread(self._path, self._data_offset + row * width, width, key=self._handle)
        if len(raw) != width:
            raise OSError(f"{self._path}: short read of row {row} ({len(raw)} of {width} bytes)")
        return np.frombuffer(raw, dtype="<i8")
