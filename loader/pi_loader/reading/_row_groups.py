"""One row group of one Parquet file of the lake: the unit every per-sample read is made of.

The episodes rows carry a locator per episode (SPEC.md §7.2: the steps file and row group, the
video file and each camera's first row group), so a reader never scans a table: it opens the
named file through `Storage.local_path` (the file itself, or the host's cached copy of an s3://
object), parses its footer once per process (kept in an LRU bounded by memory) and reads the one
row group it needs.

Footers are the cost to watch: a video file has a row group per chunk, ~760 serialized bytes of
footer each (11 columns), and pyarrow holds a parsed footer in ~10-12x its serialized size and
parses it at ~45 us per row group (measured here with pyarrow 16: 110 kB, 144 row groups, 6 ms,
~1.1 MB in memory). Readers therefore keep few files' footers hot; see the module constants.

Video chunks and episodes' steps are mostly read without footers (`_chunk_index`,
`_steps_index`: `read_range` of the column chunks, located by a per-host index of the file),
through this reader's counters too; a footer is then parsed once per host per file, to index it.

Bytes are counted as the reader asks for them: the footer once per parse (its serialized size
plus the 8-byte tail), per read the compressed size of the column chunks read, per ranged read
its size. For an s3:// lake that is what is fetched: every read goes through
`S3Storage.read_range` (byte ranges kept in the host's disk cache, `_ranges`), nothing is
downloaded whole; `read_stats["s3_fetched_bytes"]` counts what the store actually sent.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pi_loader._errors import CorruptDataError, PiLoaderError, SnapshotDataMissingError
from pi_loader.reading import _file_handles as file_handles
from pi_loader.reading._damage import as_corrupt, is_damage
from pi_loader.reading._lake import missing_files_message
from pi_loader.reading._lru import WeightedLRU
from pi_loader.reading._storage import S3Storage, Storage

# Memory of parsed footers kept per process. A group commit of 32 episodes x 3 cameras x 18
# chunks makes a video file of ~1,700 row groups: ~1.3 MB of footer, ~15 MB parsed. 128 MB keeps
# ~8 such files (and their steps files) hot.
DEFAULT_FOOTER_CACHE_BYTES = 128 * 2**20
# A parsed pyarrow FileMetaData takes ~10-12x its serialized size (measured, pyarrow 16.1).
PARSED_FOOTER_FACTOR = 12
_FOOTER_TAIL_BYTES = 8  # the footer length (4 bytes) and the "PAR1" magic after the footer


class RowGroupReader:
    """Reads single row groups of lake files; thread-safe, picklable (caches and counters are
    per process: only the storage and the cache bound travel to a worker).

    Counters (this process): `footer_reads` (footers parsed) and `bytes_read` (footer bytes plus
    the compressed column chunks of every row group read, plus every ranged read).
    `footer_cache_bytes` bounds the memory of the parsed footers kept (estimated as
    PARSED_FOOTER_FACTOR x their size on disk).

    Example:
        >>> reader = RowGroupReader(LocalStorage(), footer_cache_bytes=2**26)
        >>> rows = reader.read("/lake/video/part-0.parquet", 12, ["data"], table="video", version=3)
        >>> reader.bytes_read
        41230
    """

    def __init__(self, storage: Storage, *, footer_cache_bytes: int = DEFAULT_FOOTER_CACHE_BYTES) -> None:
        self._storage = storage
        self._footer_cache_bytes = footer_cache_bytes
        self._reset()

    def _reset(self) -> None:
        # an s3:// lake is read by byte ranges (`_ranges`); its "local path" is then its URI
        self._ranged = self._storage if isinstance(self._storage, S3Storage) else None
        self._lock = threading.Lock()
        self._footers: WeightedLRU[str, pq.FileMetaData] = WeightedLRU(self._footer_cache_bytes)
        self.footer_reads = 0
        self.bytes_read = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"storage": self._storage, "footer_cache_bytes": self._footer_cache_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._storage = state["storage"]
        self._footer_cache_bytes = state["footer_cache_bytes"]
        self._reset()

    def read(self, uri: str, group: int, columns: Sequence[str], *, table: str, version: int) -> pa.Table:
        """Row group `group` of the file at `uri`, only `columns`.

        Raises:
            SnapshotDataMissingError: the file is gone (vacuumed after `version` was pinned).
            PiLoaderError: the file has no such row group (a locator that does not fit it).
        """
        try:
            path = self._path(uri)
            metadata = self._footer(uri, path, keep=True)
            if not 0 <= group < metadata.num_row_groups:
                raise PiLoaderError(
                    f"{table} file {uri} has {metadata.num_row_groups} row groups, the episode's locator "
                    f"names row group {group}: the episodes row does not fit the file (was the file "
                    "rewritten without updating the locators?)"
                )
            # every page's CRC checked (architecture decision 10; pages written before have none)
            self._prefetch(uri, metadata, [group], columns)
            rows: pa.Table = pq.ParquetFile(
                self._source(uri, path), metadata=metadata, page_checksum_verification=True
            ).read_row_group(group, columns=list(columns))
        except FileNotFoundError as err:  # RemoteFileNotFoundError too; other StorageErrors pass
            raise SnapshotDataMissingError(missing_files_message(table, version, uri, err)) from err
        except (OSError, pa.ArrowException, EOFError) as err:  # a footer or page that does not read
            raise corrupt_or(err, {"table": table, "file": uri, "row_group": group}) from None
        size = _column_bytes(metadata, [group], columns)
        with self._lock:
            self.bytes_read += size
        return rows

    def check_crcs_present(self, uri: str, group: int, columns: Sequence[str], *, table: str) -> None:
        """Walk the page headers of `columns` in row group `group` (read after pyarrow read them,
        which checks the CRCs pages carry but reads a page without one unverified): every page
        must carry a CRC, as its table records (`pi_format.lake.integrity`).

        Raises:
            CorruptDataError: a page without a CRC, or whose header does not parse.
        """
        from pi_format.lake.integrity import check_page_crcs

        path = self._path(uri)
        metadata = self._footer(uri, path, keep=True)
        chunk = metadata.row_group(group)
        wanted = set(columns)
        for j in range(chunk.num_columns):
            column = chunk.column(j)
            if column.path_in_schema.split(".", 1)[0] not in wanted:
                continue
            start = int(column.data_page_offset)
            if column.has_dictionary_page and column.dictionary_page_offset is not None:
                start = min(start, int(column.dictionary_page_offset))
            raw = self.read_range(uri, path, start, int(column.total_compressed_size))
            _, _, faults = check_page_crcs(raw, start, require_crc=True)
            if faults:
                page, _, detail = faults[0]
                where = {"table": table, "file": uri, "row_group": group, "column": column.path_in_schema}
                raise CorruptDataError(detail, {**where, "page": page})

    # -- what the host indexes (_chunk_index, _steps_index) read through this reader's counters --

    def local_path(self, uri: str, *, table: str, version: int) -> str:
        """The local path of `uri` (`Storage.local_path`).

        Raises:
            SnapshotDataMissingError: the file is gone (vacuumed after `version` was pinned).
        """
        try:
            return self._path(uri)
        except FileNotFoundError as err:
            raise SnapshotDataMissingError(missing_files_message(table, version, uri, err)) from err

    def _path(self, uri: str) -> str:
        """What the other methods take as `path`: the local file, or for a ranged (s3://) lake the
        URI itself (nothing is downloaded: reads fetch byte ranges)."""
        return uri if self._ranged is not None else self._storage.local_path(uri)

    def file_size(self, uri: str, path: str) -> int:
        """The size of the file `uri` (at `path`) in bytes."""
        if self._ranged is not None:
            return self._ranged.object_size(uri)
        return os.stat(path).st_size

    def _source(self, uri: str, path: str) -> Any:
        """What pyarrow opens: the local path, or a file object over `S3Storage.read_range`."""
        if self._ranged is None:
            return path
        return pa.PythonFile(_RangedFile(self._ranged, uri), mode="r")

    def _prefetch(
        self, uri: str, metadata: pq.FileMetaData, groups: Iterable[int], columns: Sequence[str]
    ) -> None:
        """For a ranged lake, fetch the column chunks pyarrow is about to read, coalesced."""
        if self._ranged is None:
            return
        wanted = set(columns)
        spans = []
        for group in groups:
            chunk = metadata.row_group(group)
            for j in range(chunk.num_columns):
                column = chunk.column(j)
                if column.path_in_schema.split(".", 1)[0] in wanted:
                    start = int(column.data_page_offset)
                    if column.has_dictionary_page and column.dictionary_page_offset is not None:
                        start = min(start, int(column.dictionary_page_offset))
                    spans.append((start, int(column.total_compressed_size)))
        self._ranged.prefetch(uri, spans)

    def footer(self, uri: str, path: str, *, keep: bool) -> pq.FileMetaData:
        """The parsed footer of `uri` (at local `path`): the cached one, or parsed and counted;
        kept in the footer cache only if `keep` (a caller that parses a footer once to index the
        file does not want it to take the cache's memory)."""
        return self._footer(uri, path, keep=keep)

    def keep_footer(self, uri: str, metadata: pq.FileMetaData) -> None:
        """Put a footer parsed with `keep=False` into the footer cache after all."""
        size = int(metadata.serialized_size) + _FOOTER_TAIL_BYTES
        with self._lock:
            self._footers.put(uri, metadata, weight=size * PARSED_FOOTER_FACTOR)

    def read_columns(
        self, uri: str, path: str, metadata: pq.FileMetaData, columns: Sequence[str]
    ) -> pa.Table:
        """`columns` of every row group of the file (small columns only: a chunk index build),
        counting their compressed column chunks."""
        try:
            self._prefetch(uri, metadata, range(metadata.num_row_groups), columns)
            parquet = pq.ParquetFile(
                self._source(uri, path), metadata=metadata, page_checksum_verification=True
            )
            rows: pa.Table = parquet.read(columns=list(columns), use_threads=False)
        except (OSError, pa.ArrowException, EOFError) as err:
            where: dict[str, object] = {"table": table_of(uri), "file": uri, "column": ",".join(columns)}
            raise corrupt_or(err, where) from None
        size = _column_bytes(metadata, range(metadata.num_row_groups), columns)
        with self._lock:
            self.bytes_read += size
        return rows

    def read_range(self, uri: str, path: str, offset: int, size: int, *, what: str = "") -> bytes:
        """Bytes [offset, offset + size) of the file at local `path` (one ranged read), counted;
        `what` names them in errors.

        Raises:
            PiLoaderError: the file ends before offset + size.
        """
        if self._ranged is not None:
            data = self._ranged.read_range(uri, offset, size)
        else:
            data = file_handles.pread(path, offset, size)
        with self._lock:
            self.bytes_read += size
        if len(data) != size:
            raise CorruptDataError(
                f"reading bytes {offset}..{offset + size}{f' ({what})' if what else ''} got only "
                f"{len(data)} bytes: the file is shorter than its index says (truncated, or "
                "replaced under the same name)",
                {"table": table_of(uri), "file": uri},
            )
        return data

    def _footer(self, uri: str, path: str, *, keep: bool) -> pq.FileMetaData:
        with self._lock:
            metadata = self._footers.get(uri)
        if metadata is not None:
            return metadata
        try:
            metadata = self._read_footer(uri) if self._ranged is not None else pq.read_metadata(path)
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException, EOFError) as err:  # a damaged or truncated footer
            raise corrupt_or(err, {"table": table_of(uri), "file": uri}) from None
        size = int(metadata.serialized_size) + _FOOTER_TAIL_BYTES
        with self._lock:
            self.footer_reads += 1
            self.bytes_read += size
            if keep:
                self._footers.put(uri, metadata, weight=size * PARSED_FOOTER_FACTOR)
        return metadata

    def _read_footer(self, uri: str) -> pq.FileMetaData:
        """The footer of a ranged (s3://) file: its 8-byte tail, then the footer, two ranged
        reads of exactly those bytes (pyarrow's own open reads 64 kB from the end)."""
        assert self._ranged is not None
        size = self._ranged.object_size(uri)
        if size < 12:
            raise OSError(f"Parquet file size is {size} bytes, smaller than the minimum file footer")
        tail = self._ranged.read_range(uri, size - _FOOTER_TAIL_BYTES, _FOOTER_TAIL_BYTES)
        length = int.from_bytes(tail[:4], "little")
        if len(tail) != _FOOTER_TAIL_BYTES or tail[4:] != b"PAR1" or not 0 < length <= size - 12:
            raise OSError(
                f"Parquet magic bytes not found in footer, or a footer length {length} that does "
                f"not fit the file ({size} bytes): corrupted file"
            )
        footer = self._ranged.read_range(uri, size - _FOOTER_TAIL_BYTES - length, length)
        # parsed from the footer alone: its offsets are absolute, reads go to the real file
        return pq.read_metadata(pa.BufferReader(b"PAR1" + footer + tail))


class _RangedFile(io.RawIOBase):
    """A read-only file object over `S3Storage.read_range`, for pyarrow (`pa.PythonFile`)."""

    def __init__(self, storage: S3Storage, uri: str) -> None:
        super().__init__()
        self._storage, self._uri = storage, uri
        self._size = storage.object_size(uri)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int = -1) -> bytes:
        left = max(0, self._size - self._pos)
        size = left if size is None or size < 0 else min(size, left)
        data = self._storage.read_range(self._uri, self._pos, size) if size else b""
        self._pos += len(data)
        return data


def _column_bytes(metadata: pq.FileMetaData, groups: Iterable[int], columns: Sequence[str]) -> int:
    """Compressed bytes of the column chunks of `columns` in row groups `groups`."""
    wanted = set(columns)
    total = 0
    for group in groups:
        chunk = metadata.row_group(group)
        total += sum(
            chunk.column(j).total_compressed_size
            for j in range(chunk.num_columns)
            if chunk.column(j).path_in_schema.split(".", 1)[0] in wanted
        )
    return total


def corrupt_or(err: BaseException, where: dict[str, object]) -> BaseException:
    """`err` from pyarrow as a CorruptDataError naming `where` when it says the file's bytes are
    damaged (a page CRC mismatch, a footer or page that does not parse, a short file:
    `_damage.is_damage`), else `err` itself (the storage failed: it keeps its own error)."""
    return as_corrupt(err, where) if is_damage(err) else err


def table_of(uri: str) -> str:
    """The lake table a data file's URI is in (its parent directory's name)."""
    parts = uri.rstrip("/").split("/")
    return parts[-2] if len(parts) > 1 else "?"
