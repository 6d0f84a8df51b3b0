"""The page-CRC check of a whole Parquet file, fast enough to keep up with the wire.

`check_parquet_file(decode=False)` (`integrity`) walks each column chunk's pages with a Thrift
parser written in Python: ~20 us a page, 0.26 s for a 17 MB video file of 1,080 one-row row
groups (12,960 pages), holding the GIL. Here (`walk`) every column chunk the footer lists is
walked at once: the header shapes pyarrow writes for the lake's pages (a v1 data page without
statistics, a dictionary page, with their CRCs) parsed by numpy for all chunks together
(`_page_scan`; a file of under 1,024 chunks page by page by regular expressions), any other
header alone by the Thrift reader, and each page's CRC taken by zlib-ng (`pi_format.checksum`):
a 17 MB video file in ~25 ms (was ~42), half of it reading the footer and its chunk list.
One walk serves `pilake dataset copy` (every copied file), pi_loader (the episodes files an open
reads) and, with `strict`, `pilake verify`'s fast path (`pi_jobs.integrity._fastscan`).

Anything else (another header shape, a page that runs past its column chunk, a CRC mismatch,
a page without a CRC) is handed to `check_parquet_file`, which is
authoritative: it names the fault, or finds the file intact. The footer is parsed either way
(pyarrow), so a file whose footer does not read fails too.

Example:
    >>> check_pages(data, require_crc=True)
    ''
"""

from __future__ import annotations

import re
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa

from pi_format.checksum import crc32

_V = rb"([\x80-\xff]{0,4}[\x00-\x7f])"  # one zigzag varint (an i32), captured


def _field(type_id: int) -> bytes:
    """A character class of the one-byte Thrift compact field headers of a type (deltas 1-15)."""
    return b"[" + b"".join(re.escape(bytes([delta << 4 | type_id])) for delta in range(1, 16)) + b"]"


# page statistics (the id and index columns' pages carry them): a struct of short-form fields,
# binaries (min, max: a one-byte length up to 64, then the bytes), i64s (null and distinct
# counts) and bools (exactness), then STOP; a longer value leaves the header to the Thrift reader
_BINARY = b"(?:" + b"|".join(re.escape(bytes([n])) + b".{%d}" % n for n in range(65)) + b")"
_STATISTICS = (
    rb"\x1c(?:"
    + _field(8) + _BINARY
    + b"|" + _field(6) + rb"[\x80-\xff]{0,9}[\x00-\x7f]"
    + b"|" + _field(1) + b"|" + _field(2)
    + rb")*\x00"
)  # fmt: skip
# page header fields 1-4 (type, uncompressed size, compressed size, crc), then 5
# (data_page_header: num_values, encoding, definition and repetition level encodings), a
# statistics struct or none, STOP of the data page header, STOP of the page header
_DATA_PAGE = re.compile(
    rb"\x15" + _V + rb"\x15" + _V + rb"\x15" + _V + rb"\x15" + _V + rb"\x1c"
    rb"\x15" + _V + rb"\x15" + _V + rb"\x15" + _V + rb"\x15" + _V
    + b"(?:" + _STATISTICS + rb")?\x00\x00",
    re.DOTALL,
)  # fmt: skip
# fields 1-4 as above, then 7 (dictionary_page_header: num_values, encoding, is_sorted
# optional), STOP, STOP
_DICTIONARY_PAGE = re.compile(
    rb"\x15" + _V + rb"\x15" + _V + rb"\x15" + _V + rb"\x15" + _V + rb"\x3c"
    rb"\x15" + _V + rb"\x15" + _V + rb"(?:\x11|\x12)?\x00\x00",
    re.DOTALL,
)
# parquet.thrift Encoding by the footer's names (as pi_format.lake.integrity holds them); the
# two dictionary index encodings are one (v1 pages say PLAIN_DICTIONARY, the footer RLE_DICTIONARY)
_ENCODINGS = {
    "PLAIN": 0, "PLAIN_DICTIONARY": 2, "RLE": 3, "BIT_PACKED": 4, "DELTA_BINARY_PACKED": 5,
    "DELTA_LENGTH_BYTE_ARRAY": 6, "DELTA_BYTE_ARRAY": 7, "RLE_DICTIONARY": 8, "BYTE_STREAM_SPLIT": 9,
}  # fmt: skip
_DICTIONARY_INDEX = frozenset({2, 8})
_DATA, _DICTIONARY = 0, 2
# below this many column chunks a file is walked page by page: numpy's fixed cost per operation
# is more than it saves (an episodes file of 40 chunks: 0.2 ms page by page, 0.8 ms in numpy; a
# steps file of 420: 5.1 vs 6.7 ms; a video file of 12,960: 27 vs 17 ms after the footer)
_VECTOR_CHUNKS = 1024

# (first byte, length, uncompressed, data-page value count, allowed encodings as a bit mask) of a
# column chunk; the last three are (False, -1, 0) when not checked
Chunk = tuple[int, int, bool, int, int]


def _zigzag(raw: bytes) -> int:
    if len(raw) == 1:  # most fields: one byte
        return (raw[0] >> 1) ^ -(raw[0] & 1)
    value, shift = 0, 0
    for b in raw:
        value |= (b & 0x7F) << shift
        shift += 7
    return (value >> 1) ^ -(value & 1)


def _raw(encoding: int | None) -> bytes:
    """An encoding's i32 as the one-byte zigzag varint a header holds (b"" when it has none)."""
    return bytes([encoding << 1]) if encoding is not None and 0 <= encoding < 64 else b""


def _allowed(names: tuple[str, ...]) -> int:
    """The encodings a column chunk's footer lists, as a bit mask by encoding number (0: none)."""
    allowed = {_ENCODINGS[e] for e in names if e in _ENCODINGS}
    if allowed & _DICTIONARY_INDEX:
        allowed |= _DICTIONARY_INDEX
    return sum(1 << e for e in allowed)


def chunks(metadata: Any, *, strict: bool) -> list[Chunk] | None:
    """Every column chunk the footer lists: its first byte (the lower of its dictionary and data
    page offsets) and length, and with `strict` whether it is uncompressed, its value count and
    the encodings it may use; None when a chunk's column path is not the schema's (a damaged
    footer: the page CRCs do not cover it, the slow check reads it as it is; without `strict`
    the paths of the first and last row group are compared, see `_spans`).

    Raises:
        ValueError: a column name that is not UTF-8.
    """
    paths = _schema_paths(metadata)
    if not strict:
        return _spans(metadata, paths)
    out: list[Chunk] = []
    seen: dict[tuple[str, ...], int] = {}  # the footer's encodings lists repeat
    for i in range(metadata.num_row_groups):
        group = metadata.row_group(i)
        if group.num_columns != len(paths):
            return None
        for c in range(group.num_columns):
            column = group.column(c)
            if column.path_in_schema != paths[c]:
                return None
            start = column.data_page_offset
            if column.has_dictionary_page and column.dictionary_page_offset is not None:
                start = min(start, column.dictionary_page_offset)
            names = column.encodings
            mask = seen.get(names)
            if mask is None:
                mask = seen[names] = _allowed(names)
            plain = str(column.compression).upper() == "UNCOMPRESSED"
            out.append((int(start), int(column.total_compressed_size), plain, int(column.num_values), mask))
    return out


def _schema_paths(metadata: Any) -> list[str]:
    return [metadata.schema.column(c).path for c in range(metadata.num_columns)]


def _spans(metadata: Any, paths: list[str]) -> list[Chunk] | None:
    """`chunks` without `strict`: each chunk's first byte and length only (`_span_table`)."""
    table = _span_table(metadata, paths)
    if table is None:
        return None
    return [(start, length, False, -1, 0) for start, length in table.tolist()]


def _span_table(metadata: Any, paths: list[str]) -> np.ndarray | None:
    """Every chunk's (first byte, length) as an [n, 2] int64 array, the column paths compared on
    the first and the last row group; None when a path or a row group's column count is not the
    schema's. Reading a chunk's path from the footer builds a string (~60% of the footer's cost:
    a video file of 12,960 chunks 20 -> 8 ms); the path a chunk repeats is not what a reader goes
    by (columns are read by position), and every chunk's offsets are tied to its pages by the
    walk, which also refuses chunks that overlap. Flat ints into one list, one property fewer a
    chunk (`dictionary_page_offset` is None without a dictionary page), no tuples: 9.3 -> 7.0 ms
    for a video file's 12,960 chunks."""
    out: list[int] = []
    extend = out.extend
    columns = range(len(paths))
    last = metadata.num_row_groups - 1
    for i in range(metadata.num_row_groups):
        group = metadata.row_group(i)
        if group.num_columns != len(paths):
            return None
        column_at = group.column
        if i == 0 or i == last:
            for c in columns:
                if column_at(c).path_in_schema != paths[c]:
                    return None
        for c in columns:
            column = column_at(c)
            start = column.data_page_offset
            dictionary = column.dictionary_page_offset
            extend(
                (
                    dictionary if dictionary is not None and dictionary < start else start,
                    column.total_compressed_size,
                )
            )
    return np.array(out, dtype=np.int64).reshape(-1, 2)


def _to_walk(metadata: Any, *, strict: bool) -> tuple[list[Chunk], np.ndarray | None] | None:
    """The chunks `walk` goes over: as tuples for a file of few chunks (table None), as an [n, 5]
    table (`Chunk`'s fields) for a file of many, where the tuples are only built with `strict`
    (the non-strict table comes straight from the footer). None as `chunks`."""
    if strict:
        listed = chunks(metadata, strict=True)
        if listed is None or len(listed) < _VECTOR_CHUNKS:
            return None if listed is None else (listed, None)
        # one flat pass (np.array of 12,960 tuples: 5.5 ms, this: 2.8)
        flat = np.fromiter(chain.from_iterable(listed), dtype=np.int64, count=5 * len(listed))
        return listed, flat.reshape(-1, 5)
    spans = _span_table(metadata, _schema_paths(metadata))
    if spans is None:
        return None
    if len(spans) < _VECTOR_CHUNKS:
        return [(start, length, False, -1, 0) for start, length in spans.tolist()], None
    zeros = np.zeros(len(spans), dtype=np.int64)
    return [], np.column_stack((spans, zeros, np.full(len(spans), -1, dtype=np.int64), zeros))


_Page = tuple[int, int, int, int, int, tuple[bytes, ...], int]


def _page(data: bytes | memoryview, view: memoryview, pos: int, end: int) -> _Page | None:
    """(type, uncompressed size, stored size, crc, value count, encodings, first body byte) of
    the page at `pos` (count -1 and no encodings for a dictionary page); None for a header that
    does not parse or has no CRC. The lake's common shapes are matched in C; any other (a data
    page with statistics: the id columns') is parsed alone by the Thrift reader in Python."""
    found = _DATA_PAGE.match(data, pos, end)
    if found is not None:
        g = found.groups()
        head = (_zigzag(g[0]), _zigzag(g[1]), _zigzag(g[2]), _zigzag(g[3]), _zigzag(g[4]))
        return (*head, (g[5], g[6], g[7]), found.end())
    found = _DICTIONARY_PAGE.match(data, pos, end)
    if found is not None:
        g = found.groups()
        return _zigzag(g[0]), _zigzag(g[1]), _zigzag(g[2]), _zigzag(g[3]), -1, (), found.end()
    from pi_format.lake._page_header import PageError, page_header

    try:
        header = page_header(view[:end], pos)
    except PageError:
        return None
    if header.crc is None:
        return None
    body = pos + header.header_bytes
    if header.page_type != _DATA:
        return header.page_type, header.uncompressed_size, header.compressed_size, header.crc, -1, (), body
    if header.num_values is None:
        return None
    encodings = (header.encoding, header.definition_level_encoding, header.repetition_level_encoding)
    return (
        header.page_type,
        header.uncompressed_size,
        header.compressed_size,
        header.crc,
        header.num_values,
        tuple(_raw(e) for e in encodings),
        body,
    )


_ALLOWED: dict[int, frozenset[bytes]] = {}  # the header bytes of an encodings mask


def _walk_from(data: bytes | memoryview, view: memoryview, pos: int, chunk: Chunk) -> tuple[int, int] | None:
    """(pages, data-page values) of the rest of `chunk` from `pos`, page by page; None when a page
    breaks a rule of `walk`."""
    _, _, plain, _, mask = chunk
    end = chunk[0] + chunk[1]
    allowed = _ALLOWED.get(mask)
    if allowed is None:
        allowed = _ALLOWED[mask] = frozenset(bytes([e << 1]) for e in range(10) if mask >> e & 1)
    pages = values = 0
    while pos < end:
        page = _page(data, view, pos, end)
        if page is None:
            return None
        page_type, unpacked, stored, crc, count, used, body = page
        if page_type == _DATA:
            if count < 0 or (allowed and any(e not in allowed for e in used)):
                return None
            values += count
        elif page_type != _DICTIONARY:  # v2 or index pages: the slow check decides
            return None
        if unpacked < 0 or stored < 0 or (plain and stored != unpacked):
            return None
        stop = body + stored
        if stop > end or crc32(view[body:stop]) != crc & 0xFFFFFFFF:
            return None
        pages += 1
        pos = stop
    return pages, values


def walk(data: bytes | memoryview, metadata: Any, *, strict: bool) -> int | None:
    """The number of pages of the Parquet file `data` (its footer parsed as `metadata`) when every
    column chunk the footer lists is a run of pages that each pass, else None (the slow check
    then decides: it is authoritative). A page passes when its header parses with a CRC, its type
    is data or dictionary, its sizes and value count are not negative, it stays inside its chunk
    and its CRC matches; with `strict` (`pilake verify`), also when an uncompressed page is as
    long as it says, its encodings are among the footer's and the chunk's data-page value counts
    add up to the footer's. A file of many chunks has every chunk walked at once by numpy
    (`_page_scan`; a page of another header shape from there on page by page), a file of few
    page by page.

    Example:
        >>> walk(data, pq.ParquetFile(pa.BufferReader(data)).metadata, strict=True)
        12960
    """
    from pi_format.lake._page_scan import scan

    try:
        found = _to_walk(metadata, strict=strict)
    except ValueError:  # a column name that is not UTF-8
        return None
    if found is None:
        return None
    listed, table = found
    if table is None and not listed:
        return 0
    view = memoryview(data)
    if table is None:
        pages = previous_end = 0
        for chunk in listed:
            first, length, _, num_values, _ = chunk
            if first < max(4, previous_end) or length <= 0 or first + length > len(data):
                return None  # outside the file, or over the chunk before it
            previous_end = first + length
            walked = _walk_from(data, view, first, chunk)
            if walked is None or (strict and walked[1] != num_values):
                return None
            pages += walked[0]
        return pages
    starts, lengths = table[:, 0], table[:, 1]
    ends = starts + lengths
    if np.any(starts < 4) or np.any(lengths <= 0) or np.any(ends > len(data)):
        return None
    if np.any(starts[1:] < ends[:-1]):  # chunks that overlap, or out of the file's order
        return None
    scanned = scan(data, starts, ends, table[:, 2].astype(bool), table[:, 4])
    if scanned is None:
        return None
    pages, left, counted = scanned
    for index, pos in left:
        chunk = listed[index] if listed else (int(starts[index]), int(lengths[index]), False, -1, 0)
        rest = _walk_from(data, view, pos, chunk)
        if rest is None:
            return None
        pages += rest[0]
        counted[index] += rest[1]
    if strict and np.any(counted != table[:, 3]):
        return None
    return pages


def pages_intact(path: str) -> bool:
    """True when the Parquet file at `path` has a footer that parses and every page of every
    column chunk a CRC that matches, checked by the C-backed walk alone; False for anything
    else, which the caller hands to the authoritative `check_parquet_file` for its fault (a
    False is not a verdict: a page shape this walk does not know is False too).

    Example:
        >>> pages_intact("/lake/episodes/part-0.parquet")
        True
    """
    import pyarrow.parquet as pq

    try:
        with open(path, "rb") as f:
            data = f.read()
        with pq.ParquetFile(path) as parquet:  # the footer (Delta data files are immutable)
            metadata = parquet.metadata
    except (ValueError, pa.ArrowException, OSError):
        return False
    return walk(data, metadata, strict=False) is not None


def check_pages(data: bytes | memoryview, *, require_crc: bool) -> str:
    """'' when the Parquet file `data` has an intact footer and every page a matching CRC, else
    what is wrong (a page without a CRC is a fault when `require_crc`).

    Example:
        >>> check_pages(b"PAR1 not a parquet file", require_crc=True)
        'footer does not parse: ...'
    """
    import pyarrow.parquet as pq

    try:
        metadata = pq.ParquetFile(pa.BufferReader(data)).metadata  # the footer parses
    except (ValueError, pa.ArrowException, OSError) as err:  # ValueError: a name not UTF-8
        return f"footer does not parse: {err}"
    if walk(data, metadata, strict=False) is not None:
        return ""
    from pi_format.lake.integrity import check_parquet_file

    try:
        check = check_parquet_file(pa.BufferReader(data), require_crc=require_crc, decode=False)
    except (ValueError, pa.ArrowException, OSError) as err:  # e.g. a column path that is not UTF-8
        return f"footer does not read: {type(err).__name__}: {err}"
    if not check.faults:
        return ""
    return f"{len(check.faults)} page fault(s), first: {check.faults[0].as_dict()}"
