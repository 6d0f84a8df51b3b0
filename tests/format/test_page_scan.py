"""`pi_format.lake.page_walk.walk` (every column chunk's pages parsed at once by numpy,
`_page_scan`) against the same rules applied page by page (the regular expressions and the
Thrift reader, `_walk_from`): on intact files of every table and on seeded damage aimed at the
page headers (bit flips, random bytes, runs of varint continuation bytes, a header's last bytes
cut) and anywhere in the file, both give the same page count or both refuse, strict or not."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pi_format import LakeLayout
from pi_format.lake import page_walk

from tests.fixtures.lake_factory import append_episodes, make_episode

SIZE = (32, 32)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    layout = LakeLayout(str(tmp_path_factory.mktemp("scan") / "lake"))
    episodes = [make_episode(i, steps=12, cameras=("front",), size=SIZE, seed=0) for i in range(4)]
    append_episodes(layout, episodes, SIZE, group=2)
    tables = ("episodes", "steps", "video")
    paths = [p for t in tables for p in sorted(Path(layout.table(t)).glob("*.parquet"))]
    assert len(paths) >= 3
    return [p.read_bytes() for p in paths]


@pytest.fixture(autouse=True)
def _always_vectorised(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixture's files are small (a real video file has ~13,000 chunks): walk them by numpy."""
    monkeypatch.setattr(page_walk, "_VECTOR_CHUNKS", 1)


def _page_by_page(data: bytes, metadata: Any, strict: bool) -> int | None:
    try:
        listed = page_walk.chunks(metadata, strict=strict)
    except ValueError:  # a column name that is not UTF-8 (as `walk` treats it)
        return None
    if listed is None:
        return None
    pages = previous_end = 0
    for chunk in listed:
        first, length, _, num_values, _ = chunk
        if first < max(4, previous_end) or length <= 0 or first + length > len(data):
            return None  # outside the file, or over the chunk before it (as `walk` treats it)
        previous_end = first + length
        walked = page_walk._walk_from(data, memoryview(data), first, chunk)
        if walked is None or (strict and walked[1] != num_values):
            return None
        pages += walked[0]
    return pages


def _both(data: bytes) -> list[tuple[int | None, int | None]]:
    try:
        metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
    except Exception:  # a footer that does not parse never reaches the walk
        return []
    modes = (True, False)
    return [(page_walk.walk(data, metadata, strict=s), _page_by_page(data, metadata, s)) for s in modes]


def test_intact_files_walk_the_same_page_by_page(files: list[bytes]) -> None:
    for data in files:
        for fast, slow in _both(data):
            assert fast == slow and fast, (fast, slow)


def test_seeded_header_damage_gets_the_page_by_page_verdict(files: list[bytes]) -> None:
    rng = random.Random(20261128)
    refused = compared = 0
    for data in files:
        listed = page_walk.chunks(pq.ParquetFile(pa.BufferReader(data)).metadata, strict=False) or []
        starts = [c[0] for c in listed]
        for trial in range(150):
            damaged = bytearray(data)
            at = rng.choice(starts) + rng.randrange(0, 40) if trial % 4 else rng.randrange(4, len(data) - 8)
            at = min(at, len(data) - 9)
            kind = trial % 5
            if kind == 0:
                damaged[at] ^= 1 << rng.randrange(8)
            elif kind == 1:
                damaged[at] = rng.randrange(256)
            elif kind == 2:  # a varint that never ends, or ends late
                damaged[at : at + rng.randrange(1, 7)] = b"\xff" * rng.randrange(1, 7)
            elif kind == 3:  # the statistics / sorted-flag bytes of the two shapes
                damaged[at] = rng.choice((0x00, 0x11, 0x12, 0x15, 0x1C, 0x3C))
            else:
                damaged[at : at + 4] = rng.randbytes(4)
            for fast, slow in _both(bytes(damaged)):
                compared += 1
                refused += fast is None
                assert fast == slow, (trial, at, kind, fast, slow)
    assert compared > 500 and refused > 100  # the damage reached the walk


def _reference_spans(metadata: Any) -> list[page_walk.Chunk] | None:
    """The non-strict chunk list read the long way (every accessor, as before `_span_table`)."""
    paths = [metadata.schema.column(c).path for c in range(metadata.num_columns)]
    out: list[page_walk.Chunk] = []
    for i in range(metadata.num_row_groups):
        group = metadata.row_group(i)
        if group.num_columns != len(paths):
            return None
        for c in range(group.num_columns):
            column = group.column(c)
            if i in (0, metadata.num_row_groups - 1) and column.path_in_schema != paths[c]:
                return None
            start = column.data_page_offset
            if column.has_dictionary_page and column.dictionary_page_offset is not None:
                start = min(start, column.dictionary_page_offset)
            out.append((start, column.total_compressed_size, False, -1, 0))
    return out


def test_seeded_footer_damage_walks_as_the_footer_read_the_long_way(files: list[bytes]) -> None:
    """Damage inside the footer (offsets, sizes, counts, paths): the walk over the footer's chunk
    table (`_span_table`) gives the verdict of a page-by-page walk over the chunks read one
    accessor at a time; check_pages never raises, names the fault, and allocates little; the
    intact file beside still passes."""
    import tracemalloc

    rng = random.Random(20261128)
    compared = refused = 0
    for data in files:
        footer = int.from_bytes(data[-8:-4], "little")
        first = len(data) - 8 - footer
        for trial in range(120):
            damaged = bytearray(data)
            at = rng.randrange(first, len(data) - 8)
            if trial % 3 == 0:
                damaged[at] ^= 1 << rng.randrange(8)
            elif trial % 3 == 1:
                damaged[at] = rng.randrange(256)
            else:
                damaged[at : at + 3] = rng.randbytes(3)
            raw = bytes(damaged)
            tracemalloc.start()
            verdict = page_walk.check_pages(raw, require_crc=True)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert isinstance(verdict, str) and peak < 64 * len(data) + (16 << 20), (trial, peak)
            try:
                metadata = pq.ParquetFile(pa.BufferReader(raw)).metadata
                listed = _reference_spans(metadata)
            except Exception:  # a footer that does not parse (or a name not UTF-8) never walks
                assert verdict, trial
                continue
            fast = page_walk.walk(raw, metadata, strict=False)
            slow = None
            if listed is not None:
                with pytest.MonkeyPatch.context() as monkey:
                    monkey.setattr(page_walk, "chunks", lambda *_, d=listed, **__: d)
                    slow = _page_by_page(raw, metadata, False)
            compared += 1
            refused += fast is None
            assert (fast is None) == (slow is None) and fast == slow, (trial, at, fast, slow)
        assert page_walk.check_pages(data, require_crc=True) == ""  # the intact file beside
    assert compared > 100 and refused > 5  # the damage reached the walk
