"""Checksums of the lake's stored bytes (architecture decision 10, SPEC.md §7.14): the writing
side (every Parquet page with its CRC, every video chunk with `chunk_crc32`) and the checks every
reader of raw bytes shares (pi_loader, `pilake verify`, rewrites, repair).

* Parquet pages: every lake file is written with `write_page_checksum=True` (`write_file`): the
  page header's `crc` is the CRC-32 of the page's stored (compressed) bytes. `check_parquet_file`
  walks a file's pages itself (the footer's column chunk offsets, then each page header) and
  compares, page by page, so a mismatch names its row group, column and page; a page without a
  CRC (files written before 2026-11-26) is *unverifiable*, not ok.
* Video chunks: `chunk_crc32` is the CRC-32 (zlib's polynomial) of the row's `data`, computed
  where the chunk is encoded and checked before it is decoded; null in rows written before it
  existed (unverifiable). CRC-32 because it is the checksum Parquet pages and the wire protocol
  already use, and zlib-ng computes it at ~30 GB/s (`pi_format.checksum`).
* Which files must carry page CRCs is recorded where a flipped data byte cannot erase it: the
  token `pilake.pageChecksums=crc32` (`PAGE_CHECKSUMS_PROPERTY`) in the table's description, in
  the Delta log's metadata action, written when the lake creates the table
  (`ensure_lake_tables`) and carried by every checkpoint and metadata update. Every file of such
  a table is written by `write_file`, with CRCs, so a page of it without a CRC (its header's CRC
  field marker flipped, say) is damage (`require_crc`), not "unverifiable". Tables created
  before it (lakes older than 2026-11-27) lack it and keep the old reading. Why there: a file's
  own footer metadata is lost with a truncation and can be flipped like any byte; deltalake
  1.6's add actions carry no tags; a sidecar manifest is one more file to keep consistent;
  delta-rs 1.6 refuses table properties it does not know ("Error parsing property"), so the
  description (free text, kept by checkpoints and by `alter`) holds it. One fact per table, in
  the log every reader already reads; a damaged log is itself found (`pilake verify`).
* Beyond the CRCs, each page is decoded as far as its header promises (`check_page_crcs` with
  the footer's `codec`, value count and encodings): it must decompress to its stated size, use
  an encoding the footer lists for the column chunk, and the data pages' value counts must add
  up to the footer's. A flipped header field (sizes, counts, encodings) is covered by no CRC
  (the CRC covers the page's bytes only) but makes the loader fail: the scrub finds it too.
* The footer itself carries no checksum in Parquet: a flip there is found only when it makes the
  footer unreadable or points a page at bytes whose CRC does not match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from pi_format.checksum import crc32
from pi_format.errors import ChecksumError
from pi_format.lake._page_header import PageError, page_header

CHUNK_CRC_COLUMN = "chunk_crc32"
"""The video table's column holding the CRC-32 of each row's `data` (null: written before it)."""

PAGE_CHECKSUMS_PROPERTY = "pilake.pageChecksums=crc32"
"""In a table's Delta description: every data file of the table carries page CRCs."""
TABLE_DESCRIPTION = f"pi-lake table; every data file carries Parquet page CRCs ({PAGE_CHECKSUMS_PROPERTY})"
"""The description `ensure_lake_tables` gives the tables it creates."""

STATUS_OK = "ok"
STATUS_CORRUPT = "corrupt"
STATUS_UNVERIFIABLE = "unverifiable"


def chunk_crc32(data: bytes | memoryview) -> int:
    """The checksum `chunk_crc32` holds for a video chunk's bytes (CRC-32 as zlib's, unsigned).

    Example:
        >>> chunk_crc32(b"abc")
        891568578
    """
    return crc32(data) & 0xFFFFFFFF


def with_chunk_crcs(video: pa.Table) -> pa.Table:
    """`video` rows (pi_format.VIDEO_SCHEMA) with `chunk_crc32` set where it is null or absent,
    and checked where it is set (a writer never stores a chunk whose bytes changed since they
    were encoded).

    Raises:
        ChecksumError: a row's `chunk_crc32` does not match its `data`.

    Example:
        >>> with_chunk_crcs(rows).column("chunk_crc32")[0].as_py() == chunk_crc32(rows["data"][0].as_py())
        True
    """
    data = video.column("data").to_pylist()
    computed = [chunk_crc32(d) for d in data]
    if CHUNK_CRC_COLUMN in video.column_names:
        stored = video.column(CHUNK_CRC_COLUMN).to_pylist()
        check_chunk_crcs(video, rows=range(video.num_rows))
        values = [c if s is None else s for s, c in zip(stored, computed, strict=True)]
        index = video.schema.get_field_index(CHUNK_CRC_COLUMN)
        return video.set_column(index, video.schema.field(index), pa.array(values, pa.int64()))
    return video.append_column(pa.field(CHUNK_CRC_COLUMN, pa.int64()), pa.array(computed, pa.int64()))


def check_chunk_crcs(
    video: pa.Table, *, rows: Sequence[int] | range | None = None, where: dict[str, object] | None = None
) -> int:
    """Check `chunk_crc32` of `video`'s rows (all, or `rows`); returns how many rows had no
    checksum (unverifiable: written before it existed).

    Raises:
        ChecksumError: a row's bytes do not match its checksum; `where` (table, file, ...) and
            the row's episode, attempt, camera and chunk are in the message and `err.where`.

    Example:
        >>> check_chunk_crcs(rows_read_back)
        0
    """
    if CHUNK_CRC_COLUMN not in video.column_names:
        return video.num_rows if rows is None else len(rows)
    data = video.column("data")
    stored = video.column(CHUNK_CRC_COLUMN)
    unverifiable = 0
    for i in range(video.num_rows) if rows is None else rows:
        expected = stored[i].as_py()
        if expected is None:
            unverifiable += 1
            continue
        value = data[i].as_buffer()
        actual = chunk_crc32(memoryview(value) if value is not None else b"")
        if actual != expected:
            place = {**(where or {}), "row": i}
            for name in ("episode_id", "attempt_id", "camera", "chunk_index"):
                if name in video.column_names:
                    place[name] = video.column(name)[i].as_py()
            raise ChecksumError(
                f"video chunk {place.get('chunk_index')} of camera {place.get('camera')!r} of episode "
                f"{place.get('episode_id')} (attempt {place.get('attempt_id')}) in {_where_text(where)}: "
                f"chunk_crc32 {expected:08x} != {actual:08x} of its {len(value or b'')} bytes; the stored "
                "bytes changed after they were written (run `pilake verify`, then `pilake repair`)",
                place,
            )
    return unverifiable


@dataclass(frozen=True, slots=True)
class PageFault:
    """One page (or column chunk) of a Parquet file whose bytes do not match their checksum or
    do not parse."""

    row_group: int
    column: str
    page: int  # index of the page within its column chunk (-1: the chunk's pages do not parse)
    offset: int  # byte offset of the page header in the file
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "row_group": self.row_group,
            "column": self.column,
            "page": self.page,
            "offset": self.offset,
            "detail": self.detail,
        }


@dataclass(slots=True)
class FileCheck:
    """What `check_parquet_file` found in one file: pages checked, pages without a CRC, faults."""

    pages: int = 0
    pages_without_crc: int = 0
    bytes_checked: int = 0
    faults: list[PageFault] = field(default_factory=list)

    @property
    def status(self) -> str:
        """'corrupt' (any fault), 'unverifiable' (a page without a CRC), else 'ok'."""
        if self.faults:
            return STATUS_CORRUPT
        return STATUS_UNVERIFIABLE if self.pages_without_crc else STATUS_OK

    def corrupt_row_groups(self) -> list[int]:
        return sorted({f.row_group for f in self.faults})


def checksums_required(description: str | None) -> bool:
    """Whether a table whose Delta metadata description is `description` has page CRCs in every
    data file (`PAGE_CHECKSUMS_PROPERTY`; see the module docstring).

    Example:
        >>> checksums_required(DeltaTable(layout.steps).metadata().description)
        True
    """
    return PAGE_CHECKSUMS_PROPERTY in (description or "")


# parquet.thrift Encoding, by the names pyarrow's footer uses; the two dictionary index
# encodings are one for this check (v1 pages say PLAIN_DICTIONARY where the footer says RLE_DICTIONARY)
_ENCODINGS = {
    "PLAIN": 0, "PLAIN_DICTIONARY": 2, "RLE": 3, "BIT_PACKED": 4, "DELTA_BINARY_PACKED": 5,
    "DELTA_LENGTH_BYTE_ARRAY": 6, "DELTA_BYTE_ARRAY": 7, "RLE_DICTIONARY": 8, "BYTE_STREAM_SPLIT": 9,
}  # fmt: skip
_DICTIONARY_INDEX = {2, 8}
_DATA_PAGE, _DICTIONARY_PAGE = 0, 2


@dataclass(frozen=True, slots=True)
class ChunkShape:
    """What a column chunk's footer says of its pages (`check_page_crcs` holds them to it)."""

    codec: str  # the footer's compression name (UNCOMPRESSED, ZSTD, SNAPPY, ...)
    num_values: int
    encodings: tuple[str, ...]


def check_page_crcs(
    chunk: bytes | memoryview,
    start_offset: int = 0,
    *,
    shape: ChunkShape | None = None,
    require_crc: bool = False,
) -> tuple[int, int, list[tuple[int, int, str]]]:
    """Walk the pages of one column chunk's bytes and check each page's CRC; with `shape` (from
    the footer), also that each page decompresses to its stated size, uses encodings the footer
    lists, and that the data pages hold the footer's value count; with `require_crc`, a page
    without a CRC is a fault (its table records that every file has them).

    Returns:
        (pages, pages without a CRC, [(page index, offset of its header, what is wrong)]).

    Example:
        >>> check_page_crcs(column_chunk_bytes)
        (3, 0, [])
    """
    view = memoryview(chunk)
    pos, pages, without, faults = 0, 0, 0, []
    values = 0
    counted = True
    while pos < len(view):
        try:
            header = page_header(view, pos)
        except PageError as err:
            faults.append((pages, start_offset + pos, f"page header does not parse: {err}"))
            break
        body_start = pos + header.header_bytes
        body_end = body_start + header.compressed_size
        if header.compressed_size < 0 or body_end > len(view):
            detail = f"page of {header.compressed_size} bytes runs past its column chunk"
            faults.append((pages, start_offset + pos, detail))
            break
        if header.crc is None:
            without += 1
            if require_crc:
                detail = (
                    "page has no CRC, but every file of this table is written with page CRCs (table "
                    f"property {PAGE_CHECKSUMS_PROPERTY}): its header was damaged"
                )
                faults.append((pages, start_offset + pos, detail))
        else:
            actual = crc32(view[body_start:body_end]) & 0xFFFFFFFF
            if actual != header.crc & 0xFFFFFFFF:
                faults.append(
                    (
                        pages,
                        start_offset + pos,
                        f"page CRC {header.crc & 0xFFFFFFFF:08x} != {actual:08x} of its "
                        f"{header.compressed_size} stored bytes",
                    )
                )
        page_ok = not faults or faults[-1][0] != pages  # one fault per page: the CRC's first
        if shape is not None and page_ok:
            problem = _page_problem(header, view[body_start:body_end], shape)
            if problem:
                faults.append((pages, start_offset + pos, problem))
            if header.page_type == _DATA_PAGE and header.num_values is not None:
                values += header.num_values
            elif header.page_type != _DICTIONARY_PAGE:
                counted = False  # v2 or index pages: their counts are not parsed here
        pages += 1
        pos = body_end
    if shape is not None and counted and not faults and values != shape.num_values:
        detail = f"the data pages hold {values} values, the footer says {shape.num_values}"
        faults.append((pages - 1, start_offset, detail))
    return pages, without, faults


def _page_problem(header: Any, body: memoryview, shape: ChunkShape) -> str:
    """What is wrong with one page against its header and footer ('' when nothing)."""
    if header.page_type == _DATA_PAGE:
        if header.num_values is None or header.num_values < 0:
            return "a data page without a valid data_page_header"
        allowed = {_ENCODINGS[e] for e in shape.encodings if e in _ENCODINGS}
        if allowed & _DICTIONARY_INDEX:
            allowed |= _DICTIONARY_INDEX
        used = (header.encoding, header.definition_level_encoding, header.repetition_level_encoding)
        if allowed and any(e not in allowed for e in used):
            return f"page encodings {list(used)} are not among the column chunk's {list(shape.encodings)}"
    if header.uncompressed_size < 0:
        return f"page says it holds {header.uncompressed_size} bytes uncompressed"
    if shape.codec.upper() == "UNCOMPRESSED":
        if len(body) != header.uncompressed_size:
            return f"an uncompressed page of {len(body)} bytes says it holds {header.uncompressed_size}"
        return ""
    try:
        codec = pa.Codec(shape.codec.lower())
        out = codec.decompress(body, decompressed_size=header.uncompressed_size, asbytes=True)
    except (pa.ArrowException, OSError, ValueError) as err:
        return f"the page does not decompress ({shape.codec}): {err}"
    if len(out) != header.uncompressed_size:
        return f"the page decompresses to {len(out)} bytes, its header says {header.uncompressed_size}"
    return ""


def column_chunk_ranges(metadata: Any) -> list[tuple[int, str, int, int]]:
    """(row group, column path, first byte, length) of every column chunk of a file, from its
    footer (a `pyarrow.parquet.FileMetaData`)."""
    return [(rg, column, start, length) for rg, column, start, length, _ in _column_chunks(metadata)]


def _column_chunks(metadata: Any) -> list[tuple[int, str, int, int, ChunkShape]]:
    chunks = []
    for rg in range(metadata.num_row_groups):
        group = metadata.row_group(rg)
        for c in range(group.num_columns):
            column = group.column(c)
            start = column.data_page_offset
            if column.has_dictionary_page and column.dictionary_page_offset is not None:
                start = min(start, column.dictionary_page_offset)
            shape = ChunkShape(str(column.compression), int(column.num_values), tuple(column.encodings))
            chunks.append((rg, column.path_in_schema, int(start), int(column.total_compressed_size), shape))
    return chunks


def check_parquet_file(source: Any, *, require_crc: bool = False, decode: bool = True) -> FileCheck:
    """Check every page of one Parquet file (`source`: a path or a pyarrow NativeFile opened for
    random access): its CRC (a page without one is a fault when `require_crc`: its table
    records page CRCs in every file), and that it decodes as its header and the footer say
    (`check_page_crcs`; `decode=False`: headers and CRCs only, what a reader that decoded the
    file itself still needs: ~10x cheaper); reads the file once, column chunk by column chunk.

    Example:
        >>> check = check_parquet_file("/lake/steps/part-sink-0-3f6c.parquet")
        >>> check.status, check.pages
        ('ok', 412)
    """
    import pyarrow.parquet as pq

    result = FileCheck()
    own = isinstance(source, str)
    handle = pa.OSFile(source, "rb") if own else source
    try:
        try:
            metadata = pq.ParquetFile(source if own else handle).metadata
        except (pa.ArrowException, OSError) as err:
            result.faults.append(PageFault(-1, "", -1, -1, f"footer does not parse: {err}"))
            return result
        size = handle.size()
        for rg, column, start, length, shape in _column_chunks(metadata):
            if start < 0 or length < 0 or start + length > size:
                detail = f"column chunk {start}+{length} lies outside the {size}-byte file"
                result.faults.append(PageFault(rg, column, -1, start, detail))
                continue
            handle.seek(start)
            chunk = handle.read(length)
            pages, without, faults = check_page_crcs(
                chunk, start, shape=shape if decode else None, require_crc=require_crc
            )
            result.pages += pages
            result.pages_without_crc += without
            result.bytes_checked += length
            result.faults += [PageFault(rg, column, page, offset, detail) for page, offset, detail in faults]
    finally:
        if own:
            handle.close()
    return result


def row_group_rows(metadata: Any) -> np.ndarray:
    """The first row of each row group of a file, and its row count at the end."""
    counts = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])


def _where_text(where: dict[str, object] | None) -> str:
    if not where:
        return "the rows given"
    parts = [f"{k} {v}" for k, v in where.items() if v is not None]
    return ", ".join(parts)
