"""Footer-free steps reads through the host-wide steps index (pi_loader.reading._steps_index)."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pi_format.lake import STEPS_ROW_GROUP_STEPS
from pi_loader import CorruptDataError, Dataset, PiLoaderError, SampleSpec
from pi_loader.reading._parquet_pages import decode_list_chunk, page_header
from pi_loader.reading._row_groups import RowGroupReader
from pi_loader.reading._steps import STEPS_COLUMNS, EpisodeSteps, StepsReader
from pi_loader.reading._steps_index import (
    CODEC,
    EXACT,
    LIST_COLUMNS,
    MAX_DEF,
    OFFSET,
    ROWS,
    SIZE,
    START,
    WIDTH,
    StepsIndex,
    list_field,
)
from pi_loader.reading._storage import LocalStorage

from tests.fixtures.lake_factory import FakeLake, append_episodes, make_episode, write_lake

CAMERAS = ("front",)
SIZE_WH = (16, 16)
PAGE_BYTES = 1024  # a small data page size, so a row group's chunk spans several pages
ONE_GROUP_PER_EPISODE = 1_000_000  # steps per row group: the layout before 2026-11-24


def _steps_files(root: Path | str) -> list[str]:
    return sorted(str(p) for p in Path(root, "steps").glob("*.parquet"))


def _episode(index: int, steps: int, proprio_width: int, cameras: tuple[str, ...] = CAMERAS) -> Any:
    """An episode of `steps` steps whose cameras show one frame each (cheap to encode), with a
    proprio of `proprio_width` values per step."""
    ep = make_episode(index, steps=steps, cameras=cameras, size=SIZE_WH, seed=5)
    rng = np.random.default_rng(index)
    proprio = rng.normal(size=(steps, proprio_width)).astype(np.float32)
    proprio[0, 0] = np.float32("nan")  # NaN bits must survive unchanged
    return dataclasses.replace(
        ep,
        proprio=proprio,
        camera_frame_index=np.zeros((steps, len(cameras)), np.int32),
        frames={camera: frames[:1] for camera, frames in ep.frames.items()},
    )


class _SmallPages(pq.ParquetWriter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("data_page_size", PAGE_BYTES)
        kwargs.setdefault("write_batch_size", 16)  # the page size is checked once per batch
        super().__init__(*args, **kwargs)


LAYOUTS = pytest.mark.parametrize(
    "group_steps", [STEPS_ROW_GROUP_STEPS, ONE_GROUP_PER_EPISODE], ids=["groups", "whole"]
)


@pytest.fixture(
    scope="module", params=[STEPS_ROW_GROUP_STEPS, ONE_GROUP_PER_EPISODE], ids=["groups", "whole"]
)
def varied_lake(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """Steps files written by LakeWriter with small data pages: episodes of 1, 7 and 3,000 steps
    and proprio widths 3, 20 (rep levels in RLE runs) and 1, in two group commits; steps in row
    groups of 64 steps, or one row group per episode (as lakes written before)."""
    root = tmp_path_factory.mktemp("varied")
    from pi_format import LakeLayout

    episodes = [_episode(0, 7, 3), _episode(1, 3000, 20), _episode(2, 1, 1), _episode(3, 2500, 3)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pq, "ParquetWriter", _SmallPages)
        append_episodes(LakeLayout(str(root)), episodes, SIZE_WH, group=2, steps_group_steps=request.param)
    return root


def _pyarrow_steps(path: str, group: int) -> dict[str, np.ndarray]:
    rows = pq.ParquetFile(path).read_row_group(group, columns=list(STEPS_COLUMNS))
    out = {}
    for name, physical in LIST_COLUMNS:
        values = [
            np.asarray(v, np.float32 if physical == "FLOAT" else np.int32) for v in rows[name].to_pylist()
        ]
        out[name] = np.stack(values)
    return out


def _pages(raw: memoryview) -> int:
    pos = count = 0
    while pos < len(raw):
        header = page_header(raw, pos)
        pos += header.header_bytes + header.compressed_size
        count += 1
    return count


def _decode(reader: RowGroupReader, path: str, entry: np.ndarray, c: int) -> tuple[np.ndarray | None, int]:
    offset, size = int(entry[list_field(c, OFFSET)]), int(entry[list_field(c, SIZE)])
    raw = memoryview(reader.read_range(path, path, offset, size))
    array = decode_list_chunk(
        raw,
        codec=int(entry[list_field(c, CODEC)]),
        rows=int(entry[ROWS]),
        width=int(entry[list_field(c, WIDTH)]),
        max_definition=int(entry[list_field(c, MAX_DEF)]),
        dtype=np.dtype("<f4" if LIST_COLUMNS[c][1] == "FLOAT" else "<i4"),
    )
    return array, _pages(raw)


def test_footer_free_equals_pyarrow_for_lengths_widths_and_pages(varied_lake: Path, tmp_path: Path) -> None:
    reader = RowGroupReader(LocalStorage())
    index = StepsIndex(str(tmp_path / "index"))
    files = _steps_files(varied_lake)
    assert len(files) == 2
    most_pages = 0
    for path in files:
        entries = index.entries(reader, path, path)
        groups = pq.read_metadata(path).num_row_groups
        assert entries.shape[0] == groups and groups in (2, 1 + 47, 1 + 40)  # 7+3000, 1+2500 steps
        for g, entry in enumerate(entries):
            assert entry[EXACT] == 1
            step_index = pq.ParquetFile(path).read_row_group(g, columns=["step_index"])["step_index"]
            assert entry[START] == step_index[0].as_py()
            want = _pyarrow_steps(path, g)
            for c, (name, _) in enumerate(LIST_COLUMNS):
                got, pages = _decode(reader, path, entry, c)
                most_pages = max(most_pages, pages)
                assert got is not None and got.shape == want[name].shape
                assert got.tobytes() == want[name].tobytes()  # bit-identical, NaN included
    assert most_pages >= 4  # the long episodes' chunks span several data pages
    assert index.builds == 2 and reader.footer_reads == 2


@pytest.fixture(scope="module")
def grouped_lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    """6 episodes of different lengths... (the factory's: 13 steps each) in group commits of 3."""
    return write_lake(
        tmp_path_factory.mktemp("grouped_steps"),
        episodes=6,
        steps=13,
        cameras=("front", "wrist"),
        size=SIZE_WH,
        group=3,
        garbage_attempt=False,
    )


def _dataset(root: Any) -> Dataset:
    return Dataset(root, spec=SampleSpec(cameras=("front", "wrist"), action_horizon=2), seed=3)


def _row_group_path(ds: Dataset) -> StepsReader:
    """A copy of the dataset's steps reader that never uses the index."""
    steps: StepsReader = pickle.loads(pickle.dumps(ds._gather.steps))
    steps._steps_index = None
    return steps


def _same(a: EpisodeSteps, b: EpisodeSteps) -> None:
    for x, y in ((a.proprio, b.proprio), (a.action, b.action), (a.frame_index, b.frame_index)):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def test_dataset_reads_steps_footer_free_and_bit_identical(grouped_lake: FakeLake) -> None:
    ds = _dataset(grouped_lake.layout)
    plain = _row_group_path(ds)
    for e in range(len(ds.episode_ids)):
        _same(ds._gather.steps.episode(e), plain.episode(e))
    stats = ds.read_stats
    assert stats["steps_indexed_reads"] == stats["steps_reads"] == 6
    assert stats["steps_index_builds"] == 2 and stats["footer_reads"] == 2  # one per file, to index it
    assert plain.indexed_reads == 0 and plain.steps_reads == 6

    # a fresh dataset (cold per-process caches) on this host: no footer at all
    fresh = _dataset(grouped_lake.layout)
    for e in range(len(fresh.episode_ids)):
        _same(fresh._gather.steps.episode(e), plain.episode(e))
    assert fresh.read_stats["footer_reads"] == 0 and fresh.read_stats["steps_index_builds"] == 0
    spans = 0  # per row group: from its first list column chunk to the end of its last
    for path in _steps_files(grouped_lake.layout.root):
        metadata = pq.read_metadata(path)
        for g in range(metadata.num_row_groups):
            lists = [
                metadata.row_group(g).column(j)
                for j in range(metadata.num_columns)
                if metadata.schema.column(j).path.split(".")[0] in {n for n, _ in LIST_COLUMNS}
            ]
            first = min(c.data_page_offset for c in lists)
            spans += max(c.data_page_offset + c.total_compressed_size for c in lists) - first
    assert fresh.read_stats["bytes_read"] == spans  # one range of the list column chunks, no footer

    # a whole sample, cold, once the host has both indexes: no footer either
    ds.samples([0, len(ds) - 1])  # builds the video files' chunk indexes
    cold = _dataset(grouped_lake.layout)
    cold.samples([len(cold) - 1])
    assert cold.read_stats["footer_reads"] == 0 and cold.read_stats["steps_indexed_reads"] == 1


def test_steps_reader_pickles_only_the_index_directory(grouped_lake: FakeLake) -> None:
    ds = _dataset(grouped_lake.layout)
    ds._gather.steps.episode(0)
    clone: StepsReader = pickle.loads(pickle.dumps(ds._gather.steps))
    index, original = clone.steps_index, ds._gather.steps.steps_index
    assert index is not None and original is not None
    assert index.directory == original.directory and index.builds == 0 and original.builds == 1
    assert clone.steps_reads == 0


@LAYOUTS
def test_a_read_costs_the_row_groups_its_spans_cover(tmp_path: Path, group_steps: int) -> None:
    lake = write_lake(
        tmp_path / "lake",
        episodes=2,
        steps=200,  # row groups of 64, 64, 64 and 8 steps (or one of 200)
        cameras=CAMERAS,
        size=SIZE_WH,
        garbage_attempt=False,
        steps_group_steps=group_steps,
    )
    grouped = group_steps == STEPS_ROW_GROUP_STEPS
    _dataset_one(lake)._gather.steps.episode(1)  # indexes the file on this host
    ds = _dataset_one(lake)
    steps, plain = ds._gather.steps, _row_group_path(ds)
    truth = lake.episodes[ds.episode_ids[0]]

    def check(held: EpisodeSteps, first: int, last: int) -> None:
        at = held.rows(np.arange(first, last + 1))
        np.testing.assert_array_equal(held.proprio[at], truth.proprio[first : last + 1])
        np.testing.assert_array_equal(held.action[at], truth.action[first : last + 1])
        np.testing.assert_array_equal(held.frame_index[at], truth.camera_frame_index[first : last + 1])

    held = steps.read(0, [(70, 100)])
    check(held, 70, 100)
    assert held.group_size == (64 if grouped else 200) and len(held.proprio) == (64 if grouped else 200)
    assert steps.steps_reads == steps.indexed_reads == 1 and ds.read_stats["footer_reads"] == 0
    path = _steps_files(lake.layout.root)[0]
    metadata = pq.read_metadata(path)
    group = metadata.row_group(1 if grouped else 0)
    names = {n for n, _ in LIST_COLUMNS}
    lists = [
        group.column(j)
        for j in range(group.num_columns)
        if group.column(j).path_in_schema.split(".")[0] in names
    ]
    start = min(c.data_page_offset for c in lists)
    span = max(c.data_page_offset + c.total_compressed_size for c in lists) - start
    assert ds.read_stats["bytes_read"] == span  # that row group's list column chunks, nothing else

    held = steps.read(0, [(60, 70), (193, 199)])  # groups 0, 1 (cached) and 3
    check(held, 60, 70)
    check(held, 193, 199)
    assert steps.steps_reads == (3 if grouped else 1)
    assert steps.steps_lookups == (4 if grouped else 2)  # a cached row group is a lookup, not a read
    if grouped:
        with pytest.raises(ValueError, match="did not cover"):
            held.rows(np.array([130]))
    whole = steps.episode(0)
    check(whole, 0, 199)
    assert steps.steps_reads == (4 if grouped else 1)
    _same(whole, plain.episode(0))  # the row-group path reads the same bytes
    _same(steps.read(0, [(63, 64)]), plain.read(0, [(63, 64)]))
    with pytest.raises(PiLoaderError, match=r"not spans of its 200 steps"):
        steps.read(0, [(150, 200)])


def _rewrite(path: str, **options: Any) -> None:
    """Rewrite a steps file in place, same rows and row groups, other Parquet options."""
    parquet = pq.ParquetFile(path)
    tables = [parquet.read_row_group(g) for g in range(parquet.metadata.num_row_groups)]
    # with page CRCs, as the lake writes every file (its table records that: pi_format.lake.integrity)
    with pq.ParquetWriter(path, tables[0].schema, write_page_checksum=True, **options) as writer:
        for table in tables:
            writer.write_table(table, row_group_size=table.num_rows)


@pytest.mark.parametrize(
    "options",
    [
        {"compression": "zstd", "use_dictionary": True},  # dictionary pages on the list columns
        {"compression": "zstd", "use_dictionary": False, "data_page_version": "2.0"},
        {"compression": "gzip", "use_dictionary": False},  # a codec the index does not take
    ],
    ids=["dictionary", "page-v2", "gzip"],
)
def test_other_layouts_fall_back_to_pyarrow(tmp_path: Path, options: dict[str, Any]) -> None:
    lake = write_lake(
        tmp_path / "lake", episodes=3, steps=5, cameras=CAMERAS, size=SIZE_WH, garbage_attempt=False
    )
    (path,) = _steps_files(lake.layout.root)
    _rewrite(path, **options)
    ds = _dataset_one(lake)
    for e, eid in enumerate(ds.episode_ids):
        steps = ds._gather.steps.episode(e)
        np.testing.assert_array_equal(steps.proprio, lake.episodes[eid].proprio)
        np.testing.assert_array_equal(steps.action, lake.episodes[eid].action)
    stats = ds.read_stats
    assert stats["steps_indexed_reads"] == 0 and stats["steps_index_builds"] == 1
    assert stats["footer_reads"] == 1  # the build's footer, kept for the row-group reads
    index = ds._gather.steps.steps_index
    assert index is not None and index.entries(ds._reader, path, path).shape[0] == 0


def test_snappy_and_uncompressed_files_are_read_footer_free(tmp_path: Path) -> None:
    lake = write_lake(
        tmp_path / "lake", episodes=2, steps=5, cameras=CAMERAS, size=SIZE_WH, garbage_attempt=False
    )
    (path,) = _steps_files(lake.layout.root)
    for codec in ("snappy", "none"):
        _rewrite(path, compression=codec, use_dictionary=False)
        ds = _dataset_one(lake)
        for e, eid in enumerate(ds.episode_ids):
            np.testing.assert_array_equal(ds._gather.steps.episode(e).proprio, lake.episodes[eid].proprio)
        assert ds.read_stats["steps_indexed_reads"] == 2


def _dataset_one(lake: FakeLake) -> Dataset:
    return Dataset(lake.layout, spec=SampleSpec(cameras=CAMERAS, action_horizon=2), seed=3)


def test_rows_the_index_does_not_vouch_for_fall_back() -> None:
    """Empty lists, nulls and rows of other widths parse, but are left to pyarrow's checks."""
    schema = pa.schema([pa.field("v", pa.list_(pa.float32()), nullable=False)])
    # each with a value count that is a multiple of the rows (else the index has no width at all)
    cases: list[list[list[float | None]]] = [
        [[1.0, 2.0], [3.0], [4.0, 5.0, 6.0]],
        [[1.0, None], [3.0, 4.0]],
        [[], []],
        [[1.0, 2.0, 3.0], [4.0]],
    ]
    for rows in cases:
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"v": rows}, schema=schema), sink, compression="zstd", use_dictionary=False)
        data = sink.getvalue().to_pybytes()
        chunk = pq.ParquetFile(pa.BufferReader(data)).metadata.row_group(0).column(0)
        raw = memoryview(data)[chunk.data_page_offset : chunk.data_page_offset + chunk.total_compressed_size]
        assert chunk.num_values % len(rows) == 0
        width = chunk.num_values // len(rows)
        got = decode_list_chunk(
            raw, codec=2, rows=len(rows), width=width, max_definition=2, dtype=np.dtype("<f4")
        )
        assert got is None, rows


def test_a_corrupt_page_is_an_error_not_garbage(tmp_path: Path) -> None:
    lake = write_lake(
        tmp_path / "lake", episodes=2, steps=40, cameras=CAMERAS, size=SIZE_WH, garbage_attempt=False
    )
    (path,) = _steps_files(lake.layout.root)
    ds = _dataset_one(lake)
    ds._gather.steps.episode(0)  # builds the index
    index = ds._gather.steps.steps_index
    assert index is not None
    entry = index.entries(ds._reader, path, path)[1]
    offset = int(entry[list_field(1, OFFSET)])  # the `action` chunk of episode 1
    original = Path(path).read_bytes()
    header = page_header(memoryview(original), offset)
    page = offset + header.header_bytes
    for byte, error, match in (
        # the page header's type field: the page does not parse (damage: a CorruptDataError)
        (offset, CorruptDataError, r"row group 1, column action.*: the `action` column chunk .* not what"),
        # the zstd frame's magic, its content size: the page's CRC (architecture decision 10)
        (page, CorruptDataError, r"steps file .*, row group 1, column action, page 0.*CRC"),
        (page + 5, CorruptDataError, r"steps file .*, row group 1, column action, page 0.*CRC"),
    ):
        data = bytearray(original)
        data[byte] ^= 0xFF
        Path(path).write_bytes(bytes(data))
        with pytest.raises(error, match=match) as raised:
            _dataset_one(lake)._gather.steps.episode(1)
        if error is CorruptDataError:
            assert isinstance(raised.value, CorruptDataError)
            assert raised.value.where["episode_id"] == lake.episode_ids[1]
    Path(path).write_bytes(original)
    _same(_dataset_one(lake)._gather.steps.episode(1), ds._gather.steps.episode(1))


def _read_in_child(ds: Dataset, out: Any) -> None:
    for e in range(len(ds.episode_ids)):
        ds._gather.steps.episode(e)
    out.put(ds.read_stats)


def test_two_processes_index_each_file_once_per_host(grouped_lake: FakeLake) -> None:
    ds = _dataset(grouped_lake.layout)
    ctx: Any = mp.get_context("spawn")
    out = ctx.Queue()
    children = [ctx.Process(target=_read_in_child, args=(ds, out)) for _ in range(2)]
    for child in children:
        child.start()
    stats = [out.get(timeout=180) for _ in children]
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    assert sum(s["steps_index_builds"] for s in stats) == 2  # two steps files, each indexed once
    assert all(s["steps_indexed_reads"] == 6 for s in stats)
    assert sum(s["footer_reads"] for s in stats) == 2
    directory = ds._gather.steps.steps_index.directory  # type: ignore[union-attr]
    assert len(list(Path(str(directory)).glob("*.npy"))) == 2


def test_level_sections_decode_once_and_equal_a_fresh_decode() -> None:
    """hybrid_levels memoizes by the section's bytes: a hit returns the same values as decoding
    them again, read-only so no caller can change what the next one gets."""
    from pi_loader.reading import _parquet_pages as pages

    # a run of 5 zeros, then one bit-packed group of 8 values 1,0,1,1,0,0,1,1 (bit width 1)
    section = memoryview(bytes([5 << 1, 0, (1 << 1) | 1, 0b11001101]))
    first = pages.hybrid_levels(section, 1, 13)
    again = pages.hybrid_levels(memoryview(bytes(section)), 1, 13)
    assert again is first and not first.flags.writeable
    assert first.tolist() == [0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 1, 1]
    assert np.array_equal(first, pages._decode_hybrid(bytes(section), 1, 13))
    assert pages.hybrid_levels(section, 1, 12).tolist() == first.tolist()[:12]
