"""`pi_format.lake.page_walk.walk` on the header shapes it parses itself and the footers it
trusts: a data page with statistics (the steps and episodes files' id and index columns) is
matched by the regular expression, not the Thrift reader, and gets the same verdict as the
Thrift reader under seeded damage of its header bytes; chunks a footer lists over each other
are never passed (a chunk counted twice, in either walk); without `strict` only the first and
last row groups' column paths are read, and a damaged path there is still refused."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pi_format import LakeLayout
from pi_format.lake import _page_header, page_walk

from tests.fixtures.lake_factory import append_episodes, make_episode

SIZE = (32, 32)
# the data-page shape before statistics were matched: such pages went to the Thrift reader
_NO_STATISTICS = re.compile(
    rb"\x15" + page_walk._V + rb"\x15" + page_walk._V + rb"\x15" + page_walk._V + rb"\x15" + page_walk._V
    + rb"\x1c\x15" + page_walk._V + rb"\x15" + page_walk._V + rb"\x15" + page_walk._V + rb"\x15"
    + page_walk._V + rb"(?:\x1c\x00)?\x00\x00",
    re.DOTALL,
)  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    layout = LakeLayout(str(tmp_path_factory.mktemp("shapes") / "lake"))
    episodes = [make_episode(i, steps=12, cameras=("front",), size=SIZE, seed=0) for i in range(4)]
    append_episodes(layout, episodes, SIZE, group=2)
    paths = [p for t in ("episodes", "steps") for p in sorted(Path(layout.table(t)).glob("*.parquet"))]
    assert paths
    return [p.read_bytes() for p in paths]


def _metadata(data: bytes) -> Any:
    try:
        return pq.ParquetFile(pa.BufferReader(data)).metadata
    except Exception:  # a footer that does not parse never reaches the walk
        return None


def _stats_pages(data: bytes) -> list[int]:
    """Where a data page with a non-empty statistics struct starts."""
    listed = page_walk.chunks(_metadata(data), strict=True) or []
    return [
        c[0]
        for c in listed
        if page_walk._DATA_PAGE.match(data, c[0]) and not _NO_STATISTICS.match(data, c[0])
    ]


def test_pages_with_statistics_are_walked_without_the_thrift_reader(
    files: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert any(_stats_pages(data) for data in files)  # the lake's files do carry them
    expected = [[page_walk.walk(d, _metadata(d), strict=s) for s in (True, False)] for d in files]

    def refuse(*_: object) -> None:
        raise AssertionError("a page header went to the Thrift reader")

    monkeypatch.setattr(_page_header, "page_header", refuse)
    for data, want in zip(files, expected, strict=True):
        got = [page_walk.walk(data, _metadata(data), strict=s) for s in (True, False)]
        assert got == want and all(got), (got, want)


def test_seeded_damage_of_statistics_headers_gets_the_thrift_readers_verdict(
    files: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(20261128)
    compared = refused = 0
    for data in files:
        starts = _stats_pages(data)
        if not starts:
            continue
        for trial in range(120):
            damaged = bytearray(data)
            at = min(rng.choice(starts) + rng.randrange(0, 48), len(data) - 9)
            kind = trial % 4
            if kind == 0:
                damaged[at] ^= 1 << rng.randrange(8)
            elif kind == 1:
                damaged[at] = rng.randrange(256)
            elif kind == 2:  # a length or field header turned into another shape's
                damaged[at] = rng.choice((0x00, 0x08, 0x16, 0x18, 0x28, 0x41, 0x7F, 0x80, 0xFF))
            else:
                damaged[at : at + 3] = rng.randbytes(3)
            metadata = _metadata(bytes(damaged))
            if metadata is None:
                continue
            for strict in (True, False):
                fast = page_walk.walk(bytes(damaged), metadata, strict=strict)
                with monkeypatch.context() as patched:
                    patched.setattr(page_walk, "_DATA_PAGE", _NO_STATISTICS)
                    reference = page_walk.walk(bytes(damaged), metadata, strict=strict)
                compared += 1
                refused += fast is None
                assert fast == reference, (trial, at, kind, strict, fast, reference)
    assert compared > 400 and refused > 50  # the damage reached the walk


@pytest.mark.parametrize("vectorised", [False, True])
def test_chunks_listed_over_each_other_are_never_passed(
    files: list[bytes], monkeypatch: pytest.MonkeyPatch, vectorised: bool
) -> None:
    if vectorised:
        monkeypatch.setattr(page_walk, "_VECTOR_CHUNKS", 1)
    data = files[-1]
    metadata = _metadata(data)
    listed = page_walk.chunks(metadata, strict=False)
    assert listed and page_walk.walk(data, metadata, strict=False)
    original, original_table = page_walk.chunks, page_walk._span_table
    for damaged in (
        listed + listed[-1:],  # the last chunk twice: every page passes, counted twice
        [listed[1], listed[0], *listed[2:]],  # out of the file's order
        [(listed[0][0], listed[0][1] + 1, *listed[0][2:]), *listed[1:]],  # one byte into the next
    ):
        monkeypatch.setattr(page_walk, "chunks", lambda *_, d=damaged, **__: d)
        # the non-strict walk reads the footer's (first byte, length) table directly
        table = np.array([chunk[:2] for chunk in damaged], dtype=np.int64)
        monkeypatch.setattr(page_walk, "_span_table", lambda *_, t=table: t)
        assert page_walk.walk(data, metadata, strict=False) is None, damaged[:3]
    monkeypatch.setattr(page_walk, "chunks", original)
    monkeypatch.setattr(page_walk, "_span_table", original_table)
    assert page_walk.walk(data, metadata, strict=False)  # the file itself still passes


def test_a_damaged_column_path_in_the_first_or_last_row_group_is_refused(files: list[bytes]) -> None:
    data = max(files, key=lambda d: _metadata(d).num_row_groups)
    metadata = _metadata(data)
    assert metadata is not None and metadata.num_row_groups >= 1
    for group in {0, metadata.num_row_groups - 1}:

        class Group:  # the row group as pyarrow reads it, its first chunk's path another column's
            def __init__(self, real: Any) -> None:
                self.real, self.num_columns = real, real.num_columns

            def column(self, c: int) -> object:
                column = self.real.column(c)
                if c != 0:
                    return column

                class Renamed:
                    def __getattr__(self, name: str) -> object:
                        return "renamed" if name == "path_in_schema" else getattr(column, name)

                return Renamed()

        class Footer:
            def __init__(self) -> None:
                self.schema, self.num_row_groups = metadata.schema, metadata.num_row_groups
                self.num_columns = metadata.num_columns

            def row_group(self, i: int, g: int = group) -> object:
                real = metadata.row_group(i)
                return Group(real) if i == g else real

        assert page_walk.chunks(Footer(), strict=False) is None
        assert page_walk.chunks(Footer(), strict=True) is None
        assert page_walk.walk(data, Footer(), strict=False) is None
