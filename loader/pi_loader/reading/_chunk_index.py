"""A host-wide index of the chunks of each video file, so a cold sample reads its chunk without
parsing the file's Parquet footer.

A video file of a group commit holds one row group per chunk (SPEC.md §7.8): ~5,000 one-row row
groups for 50 episodes, a footer of ~400 kB that pyarrow parses into ~5 MB. Under a global
shuffle of a large lake the per-process footer cache rarely hits, so every cold sample used to
read and parse a whole footer to fetch a ~12 kB chunk. Instead, the first process of a host
that needs a video file indexes it once: from the footer, the (offset, size) of the `data`
column chunk of every row group, and from the file's small columns the row each chunk belongs
to (a hash of episode_id/attempt_id/camera, chunk_index, first_frame, frame_count, width,
height). It writes that int64 array [row groups, 8] atomically as `<sha1>.npy` under the host's
index directory (`index_directory`), and every process then maps it (`np.load(mmap_mode="r")`:
address space and shared page cache, not per-process memory). That machinery is `_host_index`,
shared with the steps files' index (`_steps_index`).

A chunk is then one ranged read of its column chunk: a Parquet v1 data page,
[PageHeader (Thrift compact)][4-byte little-endian length L][L bytes]. `page_value` reads the
header's first three fields (type, uncompressed and compressed size), checks them against the
index's size and returns the last L bytes.

Checks: the footer-free path keeps every check of the row-group path. The locator says which
row group holds (episode, attempt, camera, chunk); the index says what that row group holds,
as read from the file itself when it was indexed, so `_video` compares the two as before (the
identity through its 64-bit hash). What the footer-free path trusts is that the file did not
change since it was indexed (Delta data files are immutable and the index is keyed by the
file's URI and size), and the page header check catches a file that did. The page's CRC (every
page the lake writes since 2026-11-26) is checked before the chunk is decoded: it covers exactly
the chunk's bytes, as the row's `chunk_crc32` does (architecture decision 10); a mismatch is a
`CorruptDataError`. The index itself is built from columns read with their page CRCs checked.

Files the writer did not lay out this way (compressed or dictionary-encoded `data`, a nullable
`data` column, row groups of several rows, page v2, another codec) get an empty index, and
`_video` reads them through pyarrow as before.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pyarrow.parquet as pq
from pi_format.checksum import crc32

from pi_loader._errors import CorruptDataError
from pi_loader.reading._host_index import HostIndex, file_key, index_directory
from pi_loader.reading._row_groups import RowGroupReader

__all__ = ["ChunkIndex", "index_directory", "page_value", "row_key"]

# Columns of an index row (one per row group of the video file).
OFFSET, SIZE, ROW_KEY, CHUNK_INDEX, FIRST_FRAME, FRAME_COUNT, WIDTH, HEIGHT = range(8)
_INDEX_COLUMNS = 8
# The small columns read once to index a file (besides the footer).
_ROW_COLUMNS = (
    "episode_id", "attempt_id", "camera", "chunk_index", "first_frame", "frame_count", "codec",
    "width", "height",
)  # fmt: skip
_DATA = "data"
_LEVEL_ENCODINGS = frozenset({"RLE", "BIT_PACKED"})  # listed for levels; `data` has none
_PAGE_HEADER_PROBE = 64  # bytes read of a chunk to check its page header when indexing
_I32_FIELD = 0x15  # thrift compact: field id delta 1, type i32
_DATA_PAGE = 0


def row_key(episode_id: str, attempt_id: str, camera: str) -> int:
    """The 64-bit identity of a video row's (episode, attempt, camera), as the index stores it."""
    return file_key(episode_id, attempt_id, camera)


class ChunkIndex(HostIndex):
    """The chunk indexes of a lake's video files on this host: built once per host, mapped by
    every process (`_host_index.HostIndex`). Thread-safe, picklable (only the directory
    travels). `directory=None` keeps each index in this process only. Counter (this process):
    `builds` (files indexed here).

    `entries(reader, uri, path)`: int64 [row groups, 8], columns OFFSET, SIZE, ROW_KEY,
    CHUNK_INDEX, FIRST_FRAME, FRAME_COUNT, WIDTH, HEIGHT; empty when the file is not laid out
    for footer-free reads.

    Example:
        >>> index = ChunkIndex(index_directory("/data/lake", None))
        >>> entries = index.entries(reader, uri, reader.local_path(uri, table="video", version=3))
        >>> offset, size = entries[group, OFFSET], entries[group, SIZE]   # entries.size == 0: no index
    """

    COLUMNS: ClassVar[int] = _INDEX_COLUMNS
    KIND: ClassVar[str] = ""  # the names of indexes built before steps files had one

    def build(self, reader: RowGroupReader, uri: str, path: str, file_size: int) -> np.ndarray:
        return build_entries(reader, uri, path, file_size)


def build_entries(reader: RowGroupReader, uri: str, path: str, file_size: int) -> np.ndarray:
    """Index the video file `uri` at local `path` (see the module docstring); an empty array
    [0, 8] when its layout does not allow footer-free reads (its footer then stays in the
    reader's footer cache, for the row-group reads that follow)."""
    metadata = reader.footer(uri, path, keep=False)
    located = _data_chunks(metadata, file_size)
    if located is not None:
        rows = reader.read_columns(uri, path, metadata, _ROW_COLUMNS)
        if set(rows.column("codec").unique().to_pylist()) == {"h264"} and all(
            _page_header_fits(reader, uri, path, int(located[g, 0]), int(located[g, 1]))
            for g in {0, len(located) - 1}
        ):
            keys = [
                row_key(e, a, c)
                for e, a, c in zip(
                    rows.column("episode_id").to_pylist(),
                    rows.column("attempt_id").to_pylist(),
                    rows.column("camera").to_pylist(),
                    strict=True,
                )
            ]
            entries = np.empty((len(located), _INDEX_COLUMNS), np.int64)
            entries[:, OFFSET : SIZE + 1] = located
            entries[:, ROW_KEY] = keys
            for column, name in (
                (CHUNK_INDEX, "chunk_index"), (FIRST_FRAME, "first_frame"), (FRAME_COUNT, "frame_count"),
                (WIDTH, "width"), (HEIGHT, "height"),
            ):  # fmt: skip
                entries[:, column] = rows.column(name).to_numpy()
            return entries
    reader.keep_footer(uri, metadata)
    return np.zeros((0, _INDEX_COLUMNS), np.int64)


def _data_chunks(metadata: pq.FileMetaData, file_size: int) -> np.ndarray | None:
    """(offset, size) [row groups, 2] of the `data` column chunks, or None unless every row group
    is one row whose `data` chunk is a single plain, uncompressed, dictionary-free page of a
    required, flat BYTE_ARRAY column inside the file."""
    schema = metadata.schema
    j = next((j for j in range(len(schema)) if schema.column(j).path == _DATA), None)
    if j is None or metadata.num_row_groups == 0:
        return None
    column = schema.column(j)
    if column.physical_type != "BYTE_ARRAY" or column.max_definition_level or column.max_repetition_level:
        return None
    out = np.empty((metadata.num_row_groups, 2), np.int64)
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        chunk = group.column(j)
        if (
            group.num_rows != 1
            or chunk.num_values != 1
            or chunk.compression != "UNCOMPRESSED"
            or chunk.dictionary_page_offset is not None
            or "PLAIN" not in chunk.encodings
            or not set(chunk.encodings) <= _LEVEL_ENCODINGS | {"PLAIN"}
            or chunk.total_compressed_size != chunk.total_uncompressed_size
            or not 0 <= chunk.data_page_offset <= file_size - chunk.total_compressed_size
        ):
            return None
        out[g] = chunk.data_page_offset, chunk.total_compressed_size
    return out


def _page_header_fits(reader: RowGroupReader, uri: str, path: str, offset: int, size: int) -> bool:
    """Whether the chunk at [offset, offset + size) starts with a v1 data page header of its size
    (reads the header only: a file of data page v2 is left to the row-group path)."""
    probe = reader.read_range(uri, path, offset, min(size, _PAGE_HEADER_PROBE))
    try:
        _page_sizes(probe, size)
    except _PageError:
        return False
    return True


class _PageError(Exception):
    pass


def page_value(raw: bytes, uri: str, group: int) -> bytes:
    """The PLAIN BYTE_ARRAY value of the one-value v1 data page that is the column chunk `raw`
    (row group `group` of the video file `uri`).

    Raises:
        PiLoaderError: `raw` is not such a page (names the file and row group).
        CorruptDataError: the page's bytes do not match its CRC.
    """
    try:
        header_bytes, compressed, crc = _page_header_fields(raw, len(raw))
        length = int.from_bytes(raw[header_bytes : header_bytes + 4], "little")
        if compressed < 4 or length != compressed - 4:
            raise _PageError(
                f"its PLAIN value says {length} bytes, the page holds {compressed - 4} after the length"
            )
    except _PageError as err:  # lake files are immutable: bytes that do not parse are damage
        raise CorruptDataError(
            f"the `data` column chunk read from the file's chunk index ({len(raw)} bytes) is not a "
            f"one-value plain uncompressed v1 data page: {err}. The file changed since it was indexed, "
            "or is corrupt",
            {"table": "video", "file": uri, "row_group": group, "column": _DATA},
        ) from None
    # The CRC read with the sizes (one header parse on the per-sample path); pages written
    # before page CRCs have none and are unverifiable, as pi_format.lake.integrity counts them.
    if crc is not None:
        actual = crc32(memoryview(raw)[header_bytes:]) & 0xFFFFFFFF
        if actual != crc & 0xFFFFFFFF:
            where: dict[str, object] = {"table": "video", "file": uri, "row_group": group, "column": _DATA}
            detail = f"page CRC {crc & 0xFFFFFFFF:08x} != {actual:08x} of its {compressed} stored bytes"
            raise CorruptDataError(detail, {**where, "page": 0})
    return raw[header_bytes + 4 :]


def _page_sizes(raw: bytes, size: int) -> tuple[int, int]:
    """(header bytes, page bytes) of the data page that starts `raw` (see `_page_header_fields`)."""
    header_bytes, compressed, _ = _page_header_fields(raw, size)
    return header_bytes, compressed


def _page_header_fields(raw: bytes, size: int) -> tuple[int, int, int | None]:
    """(header bytes, page bytes, CRC or None) of the data page that starts `raw`, a column chunk
    of `size` bytes: fields 1-4 of the Thrift compact PageHeader (type, uncompressed_page_size,
    compressed_page_size, crc), i32 zigzag varints; the page must fill the chunk after its
    header. The CRC (field 4) is absent from pages written without one."""
    fields: list[int] = []
    pos = 0
    for field_id in (1, 2, 3, 4):
        if field_id == 4 and (pos >= len(raw) or raw[pos] != _I32_FIELD):
            break  # no CRC: the next field is another one (or the header's end)
        if pos >= len(raw) or raw[pos] != _I32_FIELD:
            found = f"byte {raw[pos]:#04x}" if pos < len(raw) else "the end of the bytes"
            raise _PageError(f"PageHeader field {field_id} should be an i32 (0x15), found {found}")
        value, shift, pos = 0, 0, pos + 1
        while True:
            if pos >= len(raw) or shift > 28:
                raise _PageError(f"PageHeader field {field_id} is not a valid varint")
            byte = raw[pos]
            value |= (byte & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if not byte & 0x80:
                break
        fields.append((value >> 1) ^ -(value & 1))
    page_type, uncompressed, compressed = fields[:3]
    crc = fields[3] if len(fields) > 3 else None
    if page_type != _DATA_PAGE:
        raise _PageError(f"page type {page_type}, not DATA_PAGE (0)")
    if uncompressed != compressed:
        raise _PageError(f"page sizes {uncompressed} (uncompressed) != {compressed} (compressed)")
    header_bytes = size - compressed
    if compressed < 0 or header_bytes <= pos:
        raise _PageError(f"a page of {compressed} bytes does not fit a {size}-byte chunk after its header")
    return header_bytes, compressed, crc
