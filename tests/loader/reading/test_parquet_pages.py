"""Footer-free column chunk decoding (pi_loader.reading._parquet_pages): the one-pass header parser against
the general one, the whole-rows short path against pyarrow, and corrupt chunks as errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pi_loader.reading import _parquet_pages as pages
from pi_loader.reading._page_header import PageError, _any_header, _plain_header, page_header
from pi_loader.reading._parquet_pages import CODECS

ROWS, GROUP_ROWS, WIDTHS = 120, 50, {"vec": 7, "idx": 3}  # row groups of 50, 50 and 20 rows
DTYPES = {"vec": np.dtype("<f4"), "idx": np.dtype("<i4")}
CODEC_OF = {"NONE": "UNCOMPRESSED", "zstd": "ZSTD", "snappy": "SNAPPY"}
SMALL_PAGES = {"data_page_size": 256, "write_batch_size": 16}  # several pages per chunk
# Page layouts: one page per chunk; small pages of whole rows (a page index makes pyarrow end pages
# at row boundaries: the short path); small pages that split rows (the general path).
LAYOUTS = {"one-page": {}, "whole-rows": {**SMALL_PAGES, "write_page_index": True}, "split-rows": SMALL_PAGES}


@pytest.fixture(autouse=True)
def _no_verdicts() -> Iterator[None]:
    """Verdicts are memoized per process: start each test without any, so what it counts is its own."""
    pages._verdicts.clear()
    yield
    pages._verdicts.clear()


def _table(lengths: list[int | None] | None = None) -> pa.Table:
    """`vec`: rows of 7 float32 (a NaN whose bits must survive); `idx`: rows of 3 int32. `lengths`
    replaces `vec`'s row lengths (None: a null row)."""
    rng = np.random.default_rng(7)
    vec = rng.normal(size=(ROWS, 7)).astype(np.float32)
    vec[3, 2] = np.float32("nan")
    rows: list[Any] = list(vec)
    if lengths is not None:
        rows = [None if n is None else rng.normal(size=n).astype(np.float32) for n in lengths]
    idx = rng.integers(-(2**31), 2**31 - 1, size=(len(rows), 3), dtype=np.int32)
    return pa.table(
        {"vec": pa.array(rows, pa.list_(pa.float32())), "idx": pa.array(list(idx), pa.list_(pa.int32()))}
    )


def _write(path: Path, table: pa.Table, compression: str = "zstd", **options: Any) -> Path:
    options.setdefault("write_statistics", False)  # the lake writes no statistics for list columns
    pq.write_table(
        table, path, compression=compression, use_dictionary=False, row_group_size=GROUP_ROWS, **options
    )
    return path


def _chunks(path: Path) -> Iterator[tuple[int, str, memoryview, int, int]]:
    """(row group, column, chunk bytes, rows, max definition level) of every list column chunk."""
    data, meta = path.read_bytes(), pq.read_metadata(path)
    for g in range(meta.num_row_groups):
        for c, name in enumerate(meta.schema.to_arrow_schema().names):
            column = meta.row_group(g).column(c)
            start = column.data_page_offset
            raw = memoryview(data)[start : start + column.total_compressed_size]
            yield g, name, raw, meta.row_group(g).num_rows, meta.schema.column(c).max_definition_level


def _page_starts(raw: memoryview) -> list[int]:
    starts, pos = [], 0
    while pos < len(raw):
        starts.append(pos)
        header = _any_header(raw, pos)
        pos += header.header_bytes + header.compressed_size
    return starts


def _decode(raw: memoryview, compression: str, rows: int, name: str, max_def: int) -> Any:
    codec = CODECS[CODEC_OF[compression]]
    return pages.decode_list_chunk(
        raw, codec=codec, rows=rows, width=WIDTHS[name], max_definition=max_def, dtype=DTYPES[name]
    )


@pytest.mark.parametrize("compression", list(CODEC_OF))
@pytest.mark.parametrize("checksum", [False, True], ids=["", "crc"])
def test_plain_header_equals_the_general_parser(tmp_path: Path, compression: str, checksum: bool) -> None:
    options = {**SMALL_PAGES, **({"write_page_checksum": True} if checksum else {})}
    try:
        path = _write(tmp_path / "t.parquet", _table(), compression, **options)
    except TypeError:
        pytest.skip("this pyarrow has no write_page_checksum")
    headers = 0
    for _, _, raw, _, _ in _chunks(path):
        for pos in _page_starts(raw):
            plain = _plain_header(raw, pos)
            assert plain is not None and plain == _any_header(raw, pos) == page_header(raw, pos)
            assert (plain.crc is not None) == checksum
            headers += 1
    assert headers > 3 * 2  # several pages per chunk: headers at offsets other than 0 too


def test_page_statistics_fall_back_to_the_general_parser(tmp_path: Path) -> None:
    # pyarrow's default writes min/max statistics into each data page header: not the plain shape
    path = _write(tmp_path / "t.parquet", _table(), write_statistics=True)
    want = pq.read_table(path)
    for g, name, raw, rows, max_def in _chunks(path):
        for pos in _page_starts(raw):
            assert _plain_header(raw, pos) is None
            assert page_header(raw, pos) == _any_header(raw, pos)
        got = _decode(raw, "zstd", rows, name, max_def)
        flat = want[name].slice(g * GROUP_ROWS, rows).combine_chunks().flatten()
        assert got is not None and got.tobytes() == np.asarray(flat).tobytes()


def _i32(delta: int, value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 31)
    out = bytes([(delta << 4) | 5])
    while zigzag >= 0x80:
        out, zigzag = out + bytes([zigzag & 0x7F | 0x80]), zigzag >> 7
    return out + bytes([zigzag])


_SIZES = _i32(1, 300) + _i32(1, 200)  # uncompressed and compressed page sizes
_TOP = _i32(1, 0) + _SIZES  # a DATA_PAGE
_INNER = _i32(1, 64) + _i32(1, 0) + _i32(1, 3) + _i32(1, 3)  # values, PLAIN, RLE, RLE
CRAFTED = {
    "dictionary page": _i32(1, 2) + _SIZES + b"\x4c" + _i32(1, 9) + _i32(1, 0) + b"\x00\x00",
    "page statistics": _TOP + b"\x2c" + _INNER + b"\x1c\x36\x00\x00\x00\x00",  # null_count = 0
    "unknown data page field": _TOP + b"\x2c" + _INNER + _i32(2, 5) + b"\x00\x00",
    "unknown top-level field": _TOP + b"\x2c" + _INNER + b"\x00" + _i32(4, 5) + b"\x00",
    "long-form field id": _TOP + b"\x0c\x0a" + _INNER + b"\x00\x00",
    "v2 data page": _i32(1, 3) + _SIZES + b"\x5c" + _INNER + b"\x00\x00",
}


@pytest.mark.parametrize("header", list(CRAFTED.values()), ids=list(CRAFTED))
def test_plain_header_declines_other_shapes(header: bytes) -> None:
    raw = b"\x99" * 5 + header + b"\xff" * 16  # at an offset, a page body after it
    assert _plain_header(raw, 5) is None
    general = _any_header(raw, 5)
    assert page_header(raw, 5) == general and general.header_bytes == len(header)
    assert (general.uncompressed_size, general.compressed_size) == (300, 200)


def test_a_truncated_header_is_an_error_on_both_parsers() -> None:
    header = _TOP + _i32(1, -5) + b"\x1c" + _INNER + b"\x1c\x00\x00\x00"  # crc, empty statistics
    assert _plain_header(header, 0) == _any_header(header, 0) and _any_header(header, 0).crc == -5
    for cut in range(len(header)):
        assert _plain_header(header[:cut], 0) is None
        with pytest.raises(PageError):
            page_header(header[:cut], 0)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("compression", list(CODEC_OF))
def test_decoded_chunks_equal_pyarrow(tmp_path: Path, compression: str, layout: str) -> None:
    path = _write(tmp_path / "t.parquet", _table(), compression, **LAYOUTS[layout])
    table = pq.read_table(path)
    most_pages = 0
    for g, name, raw, rows, max_def in _chunks(path):
        flat = table[name].slice(g * GROUP_ROWS, rows).combine_chunks().flatten()
        want = np.asarray(flat).reshape(rows, WIDTHS[name])
        got = _decode(raw, compression, rows, name, max_def)
        assert got is not None and got.dtype == DTYPES[name] and got.shape == want.shape
        assert got.tobytes() == want.tobytes()  # bit-identical, the NaN included
        assert np.array_equal(got, want, equal_nan=True)
        assert got.flags.writeable and not np.shares_memory(got, np.frombuffer(raw, np.uint8))
        most_pages = max(most_pages, len(_page_starts(raw)))
    assert most_pages == 1 if layout == "one-page" else most_pages >= 3
    verdicts = list(pages._verdicts.values())
    # whole-row pages all take the short path; split rows send the chunk down the general path
    if layout == "split-rows":
        assert not all(verdicts)
    else:
        assert verdicts and all(verdicts)
    known = len(pages._verdicts)
    for _g, name, raw, rows, max_def in _chunks(path):
        _decode(raw, compression, rows, name, max_def)
    assert len(pages._verdicts) == known  # a page's levels are judged once per process


ODD_ROWS = {  # `vec` rows whose value count is a multiple of the rows (as the index requires)
    "other lengths": [7] * 10 + [6, 8] + [7] * 108,
    "a null row": [7] * 10 + [None, 13] + [7] * 108,
    "an empty row": [7] * 10 + [0, 13] + [7] * 108,  # an empty list still has a level
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("lengths", list(ODD_ROWS.values()), ids=list(ODD_ROWS))
def test_rows_other_than_width_values_are_none(
    tmp_path: Path, lengths: list[int | None], layout: str
) -> None:
    path = _write(tmp_path / "t.parquet", _table(lengths), "zstd", **LAYOUTS[layout])
    meta = pq.read_metadata(path)
    for g, name, raw, rows, max_def in _chunks(path):
        if name != "vec":
            continue
        num_values = meta.row_group(g).column(0).num_values
        assert num_values % rows == 0 and num_values // rows == 7  # the width the index records
        got = _decode(raw, "zstd", rows, name, max_def)
        assert (got is None) == (g == 0), g  # only the first row group holds the odd rows


@pytest.mark.parametrize("layout", ["whole-rows", "split-rows"])
def test_corrupt_chunks_raise_page_error(tmp_path: Path, layout: str) -> None:
    path = _write(tmp_path / "t.parquet", _table(), "zstd", **LAYOUTS[layout])
    _, name, raw, rows, max_def = next(_chunks(path))
    data = bytes(raw)
    starts = _page_starts(raw)
    second = _any_header(raw, starts[1])
    body = starts[1] + second.header_bytes  # the second page's zstd frame
    # the frame's magic, its header descriptor, its content size: flips zstd must notice (a flip in
    # the compressed data itself can decompress to other values of the right size: no checksum)
    broken = [data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :] for at in (body, body + 4, body + 5)]
    broken += [
        data[: starts[1] + 3],  # inside the second page's header
        data[: body + second.compressed_size // 2],  # inside its body
        data[: starts[-1]],  # whole pages, but not all of them
        data[:-1],
    ]
    for chunk in broken:
        with pytest.raises(PageError):
            _decode(memoryview(chunk), "zstd", rows, name, max_def)
