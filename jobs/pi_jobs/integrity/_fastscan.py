"""The fast path of `pilake verify`'s check of one Parquet file: it can only say "intact".

`check_file` used to walk every page with the Thrift parser written in Python
(`check_parquet_file`, ~20 us a page, with each page decompressed again) and then decode the
file one row group at a time (a video file has ~1,200): 3.5 MB/s on the million-episode lake.
Here each column chunk the footer lists is walked page by page with the header shapes pyarrow
writes for the lake's pages matched by compiled regular expressions (in C, as
`pi_format.lake.page_walk` does for `dataset copy` and Dataset's open), each page's CRC taken by
zlib, and held to everything the slow walk holds it to: a CRC on every page, the page type its
header shape says, sizes that are not negative and stay inside the column chunk, an uncompressed
page as long as it says, data-page encodings among the footer's and data-page value counts that
add up to the footer's. Then the whole file is decoded in one pyarrow read with its page CRCs
checked (pyarrow also refuses a page that does not decompress to its stated size).

Anything else (another header shape, a page without a CRC, any mismatch, a read that raises)
makes `intact` False, and the caller runs the authoritative slow check, which names the fault:
the fast path never reports damage itself, so a damaged file's report is the slow path's, word
for word.

Example:
    >>> parquet, rows, pages = intact(data)
    >>> pages  # 0 when the slow check must decide
    412
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import pyarrow as pa

_V = rb"([\x80-\xff]{0,4}[\x00-\x7f])"  # one zigzag varint (an i32), captured
# page header fields 1-4 (type, uncompressed size, compressed size, crc), then 5
# (data_page_header: num_values, encoding, definition and repetition level encodings), an
# empty statistics struct or none, STOP of the data page header, STOP of the page header
_DATA_PAGE = re.compile(
    rb"\x15" + _V + rb"\x15" + _V + rb"\x15" + _V + rb"\x15" + _V + rb"\x1c"
    rb"\x15" + _V + rb"\x15" + _V + rb"\x15" + _V + rb"\x15" + _V + rb"(?:\x1c\x00)?\x00\x00",
    re.DOTALL,
)
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


def _allowed(names: tuple[str, ...]) -> frozenset[bytes]:
    """The encodings a column chunk's footer lists, as the bytes a page header holds them."""
    allowed = {_ENCODINGS[e] for e in names if e in _ENCODINGS}
    if allowed & _DICTIONARY_INDEX:
        allowed |= _DICTIONARY_INDEX
    return frozenset(_raw(e) for e in allowed)


def _chunks(metadata: Any) -> list[tuple[int, int, bool, int, frozenset[bytes]]] | None:
    """(first byte, length, uncompressed, value count, allowed encodings as header bytes) of
    every column chunk; None when a chunk's column path is not the schema's (a damaged footer:
    the slow check reads it as it is)."""
    paths = [metadata.schema.column(c).path for c in range(metadata.num_columns)]
    out = []
    seen: dict[tuple[str, ...], frozenset[bytes]] = {}  # the footer's encodings lists repeat
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
            raw = seen.get(names)
            if raw is None:
                raw = seen[names] = _allowed(names)
            plain = str(column.compression).upper() == "UNCOMPRESSED"
            out.append(
                (
                    int(start),
                    int(column.total_compressed_size),
                    plain,
                    int(column.num_values),
                    raw,
                )
            )
    return out


def _page(
    data: bytes, view: memoryview, pos: int, end: int
) -> tuple[int, int, int, int, int, tuple[bytes, ...], int] | None:
    """(type, uncompressed size, stored size, crc, value count, encodings, first body byte) of
    the page at `pos` (count -1 and no encodings for a dictionary page); None for a header that
    does not parse or has no CRC. The lake's common shapes are matched in C; any other (a data
    page with statistics: the id columns') is parsed alone by the Thrift reader in Python."""
    from pi_format.lake._page_header import PageError, page_header

    found = _DATA_PAGE.match(data, pos, end)
    if found is not None:
        g = found.groups()
        head = (_zigzag(g[0]), _zigzag(g[1]), _zigzag(g[2]), _zigzag(g[3]), _zigzag(g[4]))
        return (*head, (g[5], g[6], g[7]), found.end())
    found = _DICTIONARY_PAGE.match(data, pos, end)
    if found is not None:
        g = found.groups()
        return _zigzag(g[0]), _zigzag(g[1]), _zigzag(g[2]), _zigzag(g[3]), -1, (), found.end()
    try:
        header = page_header(view[:end], pos)
    except PageError:
        return None
    if header.crc is None:
        return None
    if header.page_type != _DATA:
        return (
            header.page_type,
            header.uncompressed_size,
            header.compressed_size,
            header.crc,
            -1,
            (),
            pos + header.header_bytes,
        )
    encodings = (header.encoding, header.definition_level_encoding, header.repetition_level_encoding)
    if header.num_values is None:
        return None
    return (
        header.page_type,
        header.uncompressed_size,
        header.compressed_size,
        header.crc,
        header.num_values,
        tuple(_raw(e) for e in encodings),
        pos + header.header_bytes,
    )


def walk(data: bytes, metadata: Any) -> int:
    """The pages of the file `data` when every one passes (see the module docstring), else 0."""
    view = memoryview(data)
    crc32 = zlib.crc32
    try:
        chunks = _chunks(metadata)
    except ValueError:  # a column name that is not UTF-8
        return 0
    if chunks is None:
        return 0
    pages, size = 0, len(data)
    for first, length, plain, num_values, allowed in chunks:
        pos, end, values = first, first + length, 0
        if first < 4 or length <= 0 or end > size:
            return 0
        while pos < end:
            page = _page(data, view, pos, end)
            if page is None:
                return 0
            page_type, unpacked, stored, crc, count, used, body = page
            if page_type == _DATA:
                if count < 0 or (allowed and any(e not in allowed for e in used)):
                    return 0
                values += count
            elif page_type != _DICTIONARY:  # v2 or index pages: the slow check decides
                return 0
            if unpacked < 0 or stored < 0 or (plain and stored != unpacked):
                return 0
            stop = body + stored
            if stop > end or crc32(view[body:stop]) != crc & 0xFFFFFFFF:
                return 0
            pages += 1
            pos = stop
        if values != num_values:
            return 0
    return pages


def intact(data: bytes) -> tuple[Any, pa.Table | None, int]:
    """(the pyarrow ParquetFile, the whole file decoded, its page count) when the file `data`
    passes the fast walk and decodes in one read with page CRCs checked; (None, None, 0)
    otherwise (the slow check decides)."""
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
        pages = walk(data, parquet.metadata)
        if not pages:
            return None, None, 0
        rows = parquet.read(use_threads=False)
    except Exception:  # pyarrow's OSError / ArrowInvalid / ValueError: the slow check names it
        return None, None, 0
    return parquet, rows, pages
