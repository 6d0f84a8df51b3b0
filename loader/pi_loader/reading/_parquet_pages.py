"""Footer-free decoding of one column chunk of a flat list column (`list<float32|int32>`),
written as Parquet v1 data pages: what `_steps_index` reads instead of a steps row group.

A column chunk is a run of pages, each [PageHeader (Thrift compact)][compressed page]. A v1
data page, once decompressed, is [4-byte length][repetition levels][4-byte length][definition
levels][PLAIN values]: levels in the RLE/bit-packed hybrid encoding, values little-endian.
`decode_list_chunk` parses every header (`_page_header.page_header`), decompresses each page
with the codec the footer named (recorded in the index), and checks the structure: page type,
encodings, sizes, level and value counts. Anything that does not parse raises `PageError`; the
caller turns it into a PiLoaderError naming the file and row group. Every page that carries a
CRC (every page the lake writes since 2026-11-26, architecture decision 10) is checked before it
is decompressed: a mismatch raises `PageChecksumError`, which the caller turns into a
`CorruptDataError`; bytes flipped inside a compressed page would otherwise still decompress to
the right size (zstd frames carry no checksum). A page without a CRC (an older lake) is read
unverified.

Data that parses but is not a uniform, null-free list of `width` values per row (an empty
list, a null, rows of different lengths) is not an error here: `decode_list_chunk` returns None
and the caller reads the row group through pyarrow, whose checks say what is wrong with it.

Reference: parquet-format `Encodings.md` (RLE/bit-packed hybrid).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import zstandard
from pi_format.checksum import crc32

from pi_loader.reading._page_header import DATA_PAGE, PLAIN, RLE, PageError, PageHeader, page_header

__all__ = [
    "CODECS", "DATA_PAGE", "PageChecksumError", "PageError", "PageHeader", "decode_list_chunk",
    "hybrid_levels", "page_header",
]  # fmt: skip


class PageChecksumError(PageError):
    """A page whose stored bytes do not match the CRC in its header."""

    def __init__(self, message: str, page: int) -> None:
        super().__init__(message)
        self.page = page


# Codecs of an index (the footer's name for each); 0 is "not supported": no index.
CODECS = {"UNCOMPRESSED": 1, "ZSTD": 2, "SNAPPY": 3}
_CODEC_NAMES = {1: None, 2: "zstd", 3: "snappy"}


# Decoded level sections kept per process, keyed by their bytes (a pure function's memo): the
# repetition levels of fixed-width vectors are the same bytes in every page of the same row
# count, and decoding them costs one Python step per run (~2 runs per row).
_LEVELS_MEMO_ENTRIES = 512
_LEVELS_MEMO_MAX_BYTES = 64 * 1024
_levels_memo: OrderedDict[tuple[bytes, int, int], np.ndarray] = OrderedDict()
_memo_lock = threading.Lock()


def hybrid_levels(raw: memoryview, bit_width: int, count: int) -> np.ndarray:
    """`count` levels (uint8, read-only) of the RLE/bit-packed hybrid encoding `raw` (exactly
    consumed up to the padding of its last bit-packed run); equal sections decode once per
    process (an LRU keyed by their bytes)."""
    data = bytes(raw)
    if len(data) > _LEVELS_MEMO_MAX_BYTES:
        return _decode_hybrid(data, bit_width, count)
    key = (data, bit_width, count)
    with _memo_lock:
        found = _levels_memo.get(key)
        if found is not None:
            _levels_memo.move_to_end(key)
            return found
    levels = _decode_hybrid(data, bit_width, count)
    levels.flags.writeable = False
    with _memo_lock:
        _levels_memo[key] = levels
        if len(_levels_memo) > _LEVELS_MEMO_ENTRIES:
            _levels_memo.popitem(last=False)
    return levels


def _decode_hybrid(data: bytes, bit_width: int, count: int) -> np.ndarray:
    """One Python step per run: runs of one value are gathered and expanded by one np.repeat
    per stretch of them."""
    size = len(data)
    pieces: list[np.ndarray] = []
    run_values: list[int] = []
    run_lengths: list[int] = []
    value_bytes = (bit_width + 7) // 8
    weights = (1 << np.arange(bit_width, dtype=np.uint8)).astype(np.uint8)
    pos = got = 0
    while got < count:
        header = shift = 0
        while True:  # the run's header, a ULEB128 varint
            if pos >= size or shift > 28:
                raise PageError("the levels end inside a run header")
            b = data[pos]
            pos += 1
            header |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        n = (header >> 1) * 8 if header & 1 else header >> 1
        if n == 0:
            raise PageError("an empty run in the levels")
        if header & 1:  # bit-packed: header >> 1 groups of 8 values
            nbytes = (header >> 1) * bit_width
            if pos + nbytes > size:
                raise PageError("a bit-packed run of levels overruns its bytes")
            if run_values:
                pieces.append(np.repeat(np.array(run_values, np.uint8), run_lengths))
                run_values, run_lengths = [], []
            bits = np.unpackbits(np.frombuffer(data, np.uint8, nbytes, pos), bitorder="little")
            values = bits.reshape(-1, bit_width) @ weights if bit_width > 1 else bits
            pieces.append(values[: count - got].astype(np.uint8, copy=False))
            pos += nbytes
        else:  # a run of header >> 1 copies of one value
            if pos + value_bytes > size:
                raise PageError("a run of levels overruns its bytes")
            value = int.from_bytes(data[pos : pos + value_bytes], "little")
            if value >= 1 << bit_width:
                raise PageError(f"a level run of value {value} does not fit {bit_width} bits")
            run_values.append(value)
            run_lengths.append(min(n, count - got))
            pos += value_bytes
        got += n
    if run_values:
        pieces.append(np.repeat(np.array(run_values, np.uint8), run_lengths))
    if pos != size:
        raise PageError(f"the levels take {pos} of their {size} bytes")
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def decode_list_chunk(
    raw: memoryview,
    *,
    codec: int,
    rows: int,
    width: int,
    max_definition: int,
    dtype: np.dtype,
    require_crc: bool = False,
) -> np.ndarray | None:
    """The values of a column chunk of a flat list column as a [rows, width] array of `dtype`
    (little-endian 4-byte PLAIN values), or None when the chunk parses but its rows are not
    `width` non-null values each (see the module docstring).

    Pages that each hold whole rows of `width` non-null values (what pyarrow writes for a
    vector column) take the short path: their level sections are judged once per process per
    distinct bytes (`_whole_rows`, memoized), so a page costs its header, its decompression and
    a copy of its values. Any other page sends the chunk through the general path, which decodes
    every level.

    With `require_crc` (the file's table records page CRCs in every file:
    `pi_format.lake.integrity`), a page without a CRC raises PageChecksumError: its header's
    CRC field was damaged, and the page's bytes cannot be trusted.

    Raises:
        PageError: the chunk does not parse as v1 data pages of this layout.
        PageChecksumError: a page's bytes do not match its CRC, or it lacks a required one.
    """
    if codec not in _CODEC_NAMES:
        raise PageError(f"codec number {codec} of the index is not one this reader knows")
    decompressor = _codec(_CODEC_NAMES[codec])
    expected = rows * width
    itemsize = np.dtype(dtype).itemsize
    values: list[memoryview] = []
    levels = 0
    pos = 0
    while pos < len(raw):
        count, page, end = _page(raw, pos, decompressor, require_crc)
        levels += count
        if levels > expected:
            raise PageError(f"the pages hold more than the {expected} values of {rows} rows x {width}")
        body = _Body(page)
        rep, defs = body.section(), body.section()
        if not _whole_rows(bytes(rep), bytes(defs), count, width, max_definition):
            return _decode_any(raw, decompressor, rows, width, max_definition, dtype, require_crc)
        rest = page[body.pos :]
        if len(rest) != count * itemsize:
            raise PageError(f"page at byte {pos} holds {len(rest)} bytes of values for {count} values")
        values.append(rest)
        pos = end
    if levels != expected:
        raise PageError(f"the pages hold {levels} values, not the {expected} of {rows} rows x {width}")
    flat = np.frombuffer(values[0] if len(values) == 1 else b"".join(values), dtype)
    return flat.reshape(rows, width).copy()  # its own memory: not a view of the whole read


def _page(
    raw: memoryview, pos: int, decompressor: _Decompress | None, require_crc: bool = False
) -> tuple[int, memoryview, int]:
    """The value count, the decompressed bytes and the end of the v1 data page at `raw[pos:]`."""
    header = page_header(raw, pos)
    count = header.num_values
    if header.page_type != DATA_PAGE or count is None:
        raise PageError(f"page at byte {pos} is of type {header.page_type}, not a v1 data page")
    if (header.encoding, header.repetition_level_encoding, header.definition_level_encoding) != (
        PLAIN, RLE, RLE
    ):  # fmt: skip
        raise PageError(
            f"page at byte {pos} has encodings {header.encoding}/{header.repetition_level_encoding}/"
            f"{header.definition_level_encoding}, not PLAIN values with RLE levels"
        )
    start = pos + header.header_bytes
    end = start + header.compressed_size
    if header.compressed_size < 0 or end > len(raw) or count <= 0:
        raise PageError(f"page at byte {pos} ({header.compressed_size} bytes) overruns the chunk")
    if header.crc is None and require_crc:
        raise PageChecksumError(
            f"the page at byte {pos} of the column chunk has no CRC, but every file of its table is "
            "written with page CRCs: its header was damaged",
            pos,
        )
    if header.crc is not None:
        actual = crc32(raw[start:end]) & 0xFFFFFFFF
        if actual != header.crc & 0xFFFFFFFF:
            raise PageChecksumError(
                f"the page at byte {pos} of the column chunk has CRC {actual:08x}, its header says "
                f"{header.crc & 0xFFFFFFFF:08x}",
                pos,
            )
    return count, _decompress(decompressor, raw[start:end], header.uncompressed_size), end


# Verdicts on pages' level sections, keyed by their bytes: pages of the same row count carry the
# same levels, so a process judges each distinct pair once (a pure function's memo).
_VERDICT_ENTRIES = 4096
_verdicts: OrderedDict[tuple[bytes, bytes, int, int, int], bool] = OrderedDict()


def _whole_rows(rep: bytes, defs: bytes, count: int, width: int, max_definition: int) -> bool:
    """Whether levels `rep`/`defs` of a page of `count` values say: whole rows of `width`
    non-null values each (repetition 0 then width-1 ones, every definition at its maximum)."""
    key = (rep, defs, count, width, max_definition)
    with _memo_lock:
        verdict = _verdicts.get(key)
    if verdict is not None:
        return verdict
    verdict = False
    if count % width == 0 and len(rep) + len(defs) <= 2 * _LEVELS_MEMO_MAX_BYTES:
        try:
            reps = _decode_hybrid(rep, 1, count).reshape(-1, width)
            definitions = _decode_hybrid(defs, max_definition.bit_length(), count)
        except PageError:
            verdict = False  # the general path says what is wrong with them
        else:
            verdict = (
                not bool(reps[:, 0].any())
                and bool(reps[:, 1:].all())
                and bool((definitions == max_definition).all())
            )
    with _memo_lock:
        _verdicts[key] = verdict
        if len(_verdicts) > _VERDICT_ENTRIES:
            _verdicts.popitem(last=False)
    return verdict


def _decode_any(
    raw: memoryview,
    decompressor: _Decompress | None,
    rows: int,
    width: int,
    max_definition: int,
    dtype: np.dtype,
    require_crc: bool = False,
) -> np.ndarray | None:
    """`decode_list_chunk` decoding every level: rows may cross pages, and what is not whole rows
    of `width` non-null values returns None."""
    expected = rows * width
    itemsize = np.dtype(dtype).itemsize
    reps: list[np.ndarray] = []
    values: list[np.ndarray] = []
    uniform = True
    levels = 0
    pos = 0
    while pos < len(raw):
        count, page, end = _page(raw, pos, decompressor, require_crc)
        levels += count
        if levels > expected:
            raise PageError(f"the pages hold more than the {expected} values of {rows} rows x {width}")
        body = _Body(page)
        reps.append(hybrid_levels(body.section(), 1, count))
        defs = hybrid_levels(body.section(), max_definition.bit_length(), count)
        rest = page[body.pos :]
        if uniform and bool((defs != max_definition).any()):
            uniform = False  # an empty list or a null: pyarrow's path says what it is
        if uniform:
            if len(rest) != count * itemsize:
                raise PageError(f"page at byte {pos} holds {len(rest)} bytes of values for {count} values")
            values.append(np.frombuffer(rest, dtype))
        pos = end
    if levels != expected:
        raise PageError(f"the pages hold {levels} values, not the {expected} of {rows} rows x {width}")
    if not uniform:
        return None
    rep = np.concatenate(reps).reshape(rows, width)
    if bool(rep[:, 0].any()) or not bool(rep[:, 1:].all()):
        return None  # rows of other lengths than `width`
    return np.concatenate(values).reshape(rows, width)


_codecs = threading.local()
_Decompress = Callable[[memoryview, int], bytes]


def _codec(name: str | None) -> _Decompress | None:
    """This thread's decompression of codec `name`, (page, size) -> bytes, made once per thread
    (making one costs more than decompressing a steps page). zstd through `zstandard` (~4 us a
    3 kB page, against ~12 us through pyarrow's Codec wrapper)."""
    if name is None:
        return None
    held = getattr(_codecs, name, None)
    if held is None:
        if name == "zstd":
            zstd = zstandard.ZstdDecompressor()

            def held(page: memoryview, size: int) -> bytes:
                return zstd.decompress(page, max_output_size=size)

        else:
            codec = pa.Codec(name)

            def held(page: memoryview, size: int) -> bytes:
                return codec.decompress(page, decompressed_size=size, asbytes=True)

        setattr(_codecs, name, held)
    return held


def _decompress(decompressor: _Decompress | None, page: memoryview, size: int) -> memoryview:
    if decompressor is None:
        if len(page) != size:
            raise PageError(f"an uncompressed page of {len(page)} bytes says it has {size}")
        return page
    try:
        out = decompressor(page, size)
    except (pa.ArrowException, zstandard.ZstdError, OSError, ValueError) as err:
        raise PageError(f"the page does not decompress: {err}") from None
    if len(out) != size:
        raise PageError(f"the page decompresses to {len(out)} bytes, its header says {size}")
    return memoryview(out)


class _Body:
    """The length-prefixed sections (levels) at the start of a decompressed v1 page."""

    def __init__(self, page: memoryview) -> None:
        self._page, self.pos = page, 0

    def section(self) -> memoryview:
        if self.pos + 4 > len(self._page):
            raise PageError("the page ends inside its levels")
        length = int.from_bytes(self._page[self.pos : self.pos + 4], "little")
        start = self.pos + 4
        if start + length > len(self._page):
            raise PageError(f"levels of {length} bytes overrun the page")
        self.pos = start + length
        return self._page[start : self.pos]
