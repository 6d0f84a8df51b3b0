"""The header of a Parquet page (Thrift compact `PageHeader`), parsed without pyarrow: what
`pi_format.lake.integrity` reads before each page to check its CRC, and pi_loader's own page
reader before each page of a steps column chunk (one parser for both).

`page_header` first tries `_plain_header`, one pass over the shape pyarrow writes for a v1 data
page without page statistics (fields 1, 2, 3, [4,] 5 = {1, 2, 3, 4, [5 = {}]}, each an i32 in
order: ~3x cheaper), and otherwise `_any_header`, which parses every field and skips unknown
ones as the Thrift compact protocol says. Anything that does not parse raises `PageError`.

Reference: parquet-format `src/main/thrift/parquet.thrift` (PageHeader, DataPageHeader);
Thrift compact protocol.
"""

from __future__ import annotations

from dataclasses import dataclass

from pi_format.errors import LakeError

# parquet.thrift enums.
DATA_PAGE = 0
PLAIN, RLE = 0, 3
# Thrift compact field types.
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
_MAX_DEPTH = 8


class PageError(LakeError):
    """A column chunk that does not parse as its footer says it should."""


@dataclass(frozen=True, slots=True)
class PageHeader:
    page_type: int
    uncompressed_size: int
    compressed_size: int
    crc: int | None
    num_values: int | None  # data_page_header fields (None: no data_page_header)
    encoding: int | None
    definition_level_encoding: int | None
    repetition_level_encoding: int | None
    header_bytes: int  # bytes of the Thrift header itself


class _Cursor:
    """Reads Thrift compact values from `raw` starting at `pos`."""

    def __init__(self, raw: bytes | memoryview, pos: int) -> None:
        self.raw, self.pos = raw, pos

    def byte(self) -> int:
        if self.pos >= len(self.raw):
            raise PageError("the page header runs past the end of the column chunk")
        b = self.raw[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        value = shift = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise PageError("a varint of the page header is longer than 10 bytes")

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def skip(self, kind: int, depth: int) -> None:
        """Skip one value of compact type `kind` (a field nobody here reads)."""
        if depth > _MAX_DEPTH:
            raise PageError("the page header nests deeper than any Parquet page header")
        if kind in (_BOOL_TRUE, _BOOL_FALSE):
            return
        if kind == _BYTE:
            self.byte()
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.take(8)
        elif kind == _BINARY:
            self.take(self.varint())
        elif kind in (_LIST, _SET):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            for _ in range(size):
                if elem in (_BOOL_TRUE, _BOOL_FALSE):  # list booleans are one byte each
                    self.byte()
                else:
                    self.skip(elem, depth + 1)
        elif kind == _MAP:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4, depth + 1)
                    self.skip(types & 0x0F, depth + 1)
        elif kind == _STRUCT:
            for _field, field_kind in self.fields():
                self.skip(field_kind, depth + 1)
        else:
            raise PageError(f"unknown Thrift compact type {kind} in the page header")

    def take(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.raw):
            raise PageError("the page header runs past the end of the column chunk")
        self.pos += n

    def fields(self) -> _FieldIter:
        return _FieldIter(self)


class _FieldIter:
    """(field id, compact type) of each field of a struct, up to its STOP byte."""

    def __init__(self, cursor: _Cursor) -> None:
        self._cursor, self._last = cursor, 0

    def __iter__(self) -> _FieldIter:
        return self

    def __next__(self) -> tuple[int, int]:
        head = self._cursor.byte()
        if head == 0:
            raise StopIteration
        delta, kind = head >> 4, head & 0x0F
        field = self._last + delta if delta else self._cursor.zigzag()
        self._last = field
        return field, kind


def page_header(raw: bytes | memoryview, pos: int) -> PageHeader:
    """The PageHeader at `raw[pos:]` (every field parsed or skipped)."""
    return _plain_header(raw, pos) or _any_header(raw, pos)


def _plain_header(raw: bytes | memoryview, pos: int) -> PageHeader | None:
    """The header as pyarrow writes a v1 data page without page statistics (fields 1, 2, 3, [4,]
    5 = {1, 2, 3, 4, [5 = {}]}, each i32, in order), read in one pass; None for any other shape (then
    `_any_header` parses it, or says what is wrong)."""
    end, at, values = len(raw), pos, []
    expect = (0x15, 0x15, 0x15, 0x15)  # delta 1, i32
    field = 0
    while True:
        if at >= end:
            return None
        head = raw[at]
        at += 1
        if head == 0x15 and field < 4:  # the next top-level i32 (1..3, or the crc, 4)
            field += 1
        elif head in (0x1C, 0x2C) and field + (head >> 4) == 5 and field >= 3:  # data_page_header
            break
        else:
            return None
        read = _zigzag_i32(raw, at, end)
        if read is None:
            return None
        at = read[1]
        values.append(read[0])
    inner = []
    for want in expect:
        if at >= end or raw[at] != want:
            return None
        at += 1
        read = _zigzag_i32(raw, at, end)
        if read is None:
            return None
        at = read[1]
        inner.append(read[0])
    if at + 1 < end and raw[at] == 0x1C and raw[at + 1] == 0:  # statistics, empty (pyarrow's default)
        at += 2
    if at + 1 >= end or raw[at] != 0 or raw[at + 1] != 0:  # STOP of the data page header, then of the page's
        return None
    return PageHeader(
        page_type=values[0],
        uncompressed_size=values[1],
        compressed_size=values[2],
        crc=values[3] if field == 4 else None,
        num_values=inner[0],
        encoding=inner[1],
        definition_level_encoding=inner[2],
        repetition_level_encoding=inner[3],
        header_bytes=at + 2 - pos,
    )


def _zigzag_i32(raw: bytes | memoryview, at: int, end: int) -> tuple[int, int] | None:
    """The zigzag varint i32 at `raw[at:end]` and the position after it; None if it runs out."""
    value, shift = 0, 0
    while True:
        if at >= end or shift > 28:
            return None
        b = raw[at]
        at += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), at
        shift += 7


def _any_header(raw: bytes | memoryview, pos: int) -> PageHeader:
    cursor = _Cursor(raw, pos)
    top: dict[int, int] = {}
    data: dict[int, int] = {}
    for field, kind in cursor.fields():
        if field in (1, 2, 3, 4) and kind == _I32:
            top[field] = cursor.zigzag()
        elif field == 4:  # the crc: an i32 of any other type is a damaged header, not "no CRC"
            raise PageError(f"the page header's crc (field 4) has Thrift compact type {kind}, not i32 (5)")
        elif field == 5 and kind == _STRUCT:
            for inner, inner_kind in cursor.fields():
                if inner in (1, 2, 3, 4) and inner_kind == _I32:
                    data[inner] = cursor.zigzag()
                else:
                    cursor.skip(inner_kind, 1)
        else:
            cursor.skip(kind, 0)
    missing = [name for f, name in ((1, "type"), (2, "uncompressed_page_size"), (3, "compressed_page_size"))
               if f not in top]  # fmt: skip
    if missing:
        raise PageError(f"the page header lacks {', '.join(missing)}")
    return PageHeader(
        page_type=top[1],
        uncompressed_size=top[2],
        compressed_size=top[3],
        crc=top.get(4),
        num_values=data.get(1),
        encoding=data.get(2),
        definition_level_encoding=data.get(3),
        repetition_level_encoding=data.get(4),
        header_bytes=cursor.pos - pos,
    )
