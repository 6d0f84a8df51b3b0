"""The host's memory-mapped copy of the episodes rows (pi_loader.reading._episodes_rows): what it returns
always equals reading every current file, while it reads only the files new to it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pi_loader import Dataset
from pi_loader.reading._episodes_rows import (
    FILE_COLUMN,
    REWRITE_AFTER_FILES,
    episodes_rows,
    segment_directory,
)
from pi_loader.reading._host_index import index_directory
from pi_loader.reading._lake import TableFiles, _read, make_storage

from tests.fixtures.lake_factory import append_episodes, make_episode, write_lake

SCHEMA = pa.schema([("episode_id", pa.string()), ("attempt_id", pa.string()), ("x", pa.list_(pa.float32()))])


def _write_files(root: Path, first: int, count: int, per_file: int = 3) -> list[str]:
    uris = []
    for f in range(first, first + count):
        ids = [f"ep-{f:04d}-{r}" for r in range(per_file)]
        table = pa.table(
            {
                "episode_id": ids,
                "attempt_id": [f"a{f}"] * per_file,
                "x": [[float(f), float(r)] for r in range(per_file)],
            },
            schema=SCHEMA,
        )
        path = root / f"part-{f:04d}.parquet"
        pq.write_table(table, path)
        uris.append(str(path))
    return uris


class CountingReader:
    """Reads files through pi_loader's own Parquet path, counting the files it was asked for."""

    def __init__(self, root: Path, uris: list[str]) -> None:
        self.files = TableFiles(
            name="episodes",
            version=0,
            uris=tuple(uris),
            min_episode=(None,) * len(uris),
            max_episode=(None,) * len(uris),
            schema=SCHEMA,
        )
        self.storage = make_storage(str(root), None, None)
        self.files_read = 0

    def __call__(self, indices):
        self.files_read += len(indices)
        return _read(self.files, self.storage, None, SCHEMA.names, None, indices=indices, tag_files=True)

    def everything(self) -> pa.Table:
        return _read(self.files, self.storage, None, SCHEMA.names, None)


def _sorted(rows: pa.Table) -> list[tuple]:
    if FILE_COLUMN in rows.column_names:
        rows = rows.drop_columns([FILE_COLUMN])
    return sorted(zip(*(rows.column(c).to_pylist() for c in SCHEMA.names), strict=True), key=repr)


def _open(directory: Path, root: Path, uris: list[str]) -> tuple[pa.Table, CountingReader]:
    reader = CountingReader(root, uris)
    return episodes_rows(directory, uris, SCHEMA, reader), reader


def test_rows_equal_every_file_and_only_new_files_are_read(tmp_path: Path) -> None:
    data, cache = tmp_path / "data", tmp_path / "cache" / "episodes-rows"
    data.mkdir()
    uris = _write_files(data, 0, 30)

    rows, reader = _open(cache, data, uris)
    assert reader.files_read == 30 and len(list(cache.glob("*.arrow"))) == 1
    assert _sorted(rows) == _sorted(reader.everything())
    # the file column names each row's own file
    files = rows.column(FILE_COLUMN).to_numpy()
    ids = rows.column("episode_id").to_pylist()
    assert all(uris[f].endswith(f"part-{i[3:7]}.parquet") for f, i in zip(files, ids, strict=True))

    rows, reader = _open(cache, data, uris)
    assert reader.files_read == 0, "a second open reads no Parquet file"
    assert _sorted(rows) == _sorted(reader.everything())

    few = uris + _write_files(data, 30, 3)
    rows, reader = _open(cache, data, few)
    assert reader.files_read == 3 and len(list(cache.glob("*.arrow"))) == 1
    assert _sorted(rows) == _sorted(reader.everything())

    many = few + _write_files(data, 33, REWRITE_AFTER_FILES)
    rows, reader = _open(cache, data, many)
    assert reader.files_read == 3 + REWRITE_AFTER_FILES
    assert _sorted(rows) == _sorted(reader.everything())
    rows, reader = _open(cache, data, many)
    assert reader.files_read == 0, "the open that read many files wrote a segment covering them"
    assert _sorted(rows) == _sorted(reader.everything())


def test_files_gone_from_the_table_drop_their_rows(tmp_path: Path) -> None:
    """A compaction replaces files: rows of files the table no longer lists must not come back."""
    data, cache = tmp_path / "data", tmp_path / "cache"
    data.mkdir()
    uris = _write_files(data, 0, 20)
    _open(cache, data, uris)
    merged = pa.concat_tables([pq.read_table(u) for u in uris[:10]])
    pq.write_table(merged, data / "compacted.parquet")
    after = [str(data / "compacted.parquet"), *uris[10:]]

    rows, reader = _open(cache, data, after)
    assert reader.files_read == 1
    assert _sorted(rows) == _sorted(reader.everything())
    assert rows.num_rows == 60 and len(set(rows.column("episode_id").to_pylist())) == 60


def test_a_damaged_segment_or_unwritable_directory_only_costs_reads(tmp_path: Path) -> None:
    data, cache = tmp_path / "data", tmp_path / "cache"
    data.mkdir()
    uris = _write_files(data, 0, 5)
    _open(cache, data, uris)
    (segment,) = cache.glob("*.arrow")
    segment.write_bytes(segment.read_bytes()[:100])
    rows, reader = _open(cache, data, uris)
    assert reader.files_read == 5 and _sorted(rows) == _sorted(reader.everything())

    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    rows, reader = _open(blocked / "episodes-rows", data, uris)
    assert reader.files_read == 5 and _sorted(rows) == _sorted(reader.everything())


def test_a_segment_of_another_schema_is_not_used(tmp_path: Path) -> None:
    data, cache = tmp_path / "data", tmp_path / "cache"
    data.mkdir()
    uris = _write_files(data, 0, 4)
    other = pa.schema([("episode_id", pa.string())])
    episodes_rows(
        cache,
        uris,
        other,
        lambda idx: pa.table({"episode_id": ["zzz"], FILE_COLUMN: pa.array([0], pa.int32())}),
    )
    rows, reader = _open(cache, data, uris)
    assert reader.files_read == 4 and "zzz" not in rows.column("episode_id").to_pylist()


def test_dataset_opens_from_the_copy_and_sees_later_commits(tmp_path: Path) -> None:
    """Through Dataset: one file per group commit; a reopen reads the copy, a commit after it
    is seen, and samples are the same as a first open's."""
    lake = write_lake(tmp_path / "lake", episodes=6, steps=5, cameras=("front",), size=(16, 16), group=1)
    first = Dataset(lake.layout, action_horizon=2)
    segments = segment_directory(index_directory(lake.layout.root, None))
    assert len(list(segments.glob("*.arrow"))) == 1
    again = Dataset(lake.layout, action_horizon=2)
    assert again.snapshot.fingerprint == first.snapshot.fingerprint
    for i in (0, len(first) - 1):
        a, b = first[i], again[i]
        assert a.keys() == b.keys()
        arrays = [k for k in a if isinstance(a[k], np.ndarray)]
        assert all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in arrays)

    extra = make_episode(50, steps=5, cameras=("front",), size=(16, 16), seed=0)
    append_episodes(lake.layout, [extra], (16, 16))
    later = Dataset(lake.layout, action_horizon=2)
    assert len(later.episode_ids) == 7 and later.episode_ids[:6] == first.episode_ids


def test_segment_directory_sits_beside_the_host_indexes() -> None:
    assert segment_directory("/x/chunk-index/abc") == Path("/x/chunk-index/abc/episodes-rows")


def test_no_files_reads_nothing(tmp_path: Path) -> None:
    rows, reader = _open(tmp_path / "cache", tmp_path, [])
    assert rows.num_rows == 0 and reader.files_read == 0
