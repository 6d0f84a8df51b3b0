"""Byte-range reads of an s3:// lake (issue 32 item 3): a cold epoch on SeaweedFS fetches about
what the reader asks for (within 1.5x, counted by the loader's own counters) and yields the
local lake's samples, a warm one fetches nothing; hostile ranges, objects and cached bytes are
refused clearly, with bounded memory, and the good reads beside them still go through.

SeaweedFS (tests/fixtures/seaweedfs.py) is the store; the hostile endpoint
(tests/loader/reading/hostile_s3.py, a test double) serves the bodies a real store will not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_loader import CacheConfig, Dataset
from pi_loader._errors import CorruptDataError
from pi_loader.reading._ranges import COALESCE_BUDGET, MAX_COALESCED_BYTES, coalesce, range_counts
from pi_loader.reading._retry import PermanentStorageError, StoreUnreachableError
from pi_loader.reading._storage import S3Options, S3Storage, StorageError

from tests.fixtures.lake_factory import write_lake
from tests.fixtures.seaweedfs import SeaweedS3
from tests.loader.reading.test_store_hiccups import _storage, hostile  # noqa: F401 (fixture)


def _upload(s3: SeaweedS3, local: Path, prefix: str) -> None:
    fs = S3Options.from_storage_options(s3.storage_options).filesystem()
    for path in sorted(local.rglob("*")):
        if path.is_file():
            with fs.open_output_stream(f"{s3.bucket}/{prefix}/{path.relative_to(local).as_posix()}") as out:
                out.write(path.read_bytes())


def _put(s3: SeaweedS3, key: str, data: bytes) -> None:
    fs = S3Options.from_storage_options(s3.storage_options).filesystem()
    with fs.open_output_stream(f"{s3.bucket}/{key}") as out:
        out.write(data)


def _remote(s3: SeaweedS3, prefix: str, ids: list[str], cache: Path) -> Dataset:
    return Dataset(
        s3.uri(prefix),
        episode_ids=ids,
        seed=3,
        action_horizon=4,
        storage_options=s3.storage_options,
        cache=CacheConfig(cache, 10**8),
    )


def _same(a: dict[str, object], b: dict[str, object]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)
        else:
            assert a[key] == b[key], key


@pytest.fixture(scope="module")
def lake(seaweed: SeaweedS3, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("ranges") / "lake"
    written = write_lake(root, episodes=3, steps=12, cameras=("front", "wrist"), size=(48, 32))
    _upload(seaweed, root, "ranges-lake")
    return root, list(written.episode_ids)


def test_cold_epoch_fetches_ranges_within_bound_and_warm_fetches_nothing(
    seaweed: SeaweedS3, lake: tuple[Path, list[str]], tmp_path: Path
) -> None:
    root, ids = lake
    local = Dataset(str(root), episode_ids=ids, seed=3, action_horizon=4)
    cold = _remote(seaweed, "ranges-lake", ids, tmp_path / "cache")
    assert len(cold) == len(local) > 0
    before, read_before = range_counts(), cold.read_stats["bytes_read"]
    for i in range(len(local)):
        _same(local[i], cold[i])
    fetched = range_counts()["s3_fetched_bytes"] - before["s3_fetched_bytes"]
    returned = cold.read_stats["bytes_read"] - read_before
    assert 0 < fetched <= 1.5 * returned, (fetched, returned)
    # steps and video were never downloaded whole: ranges only (the open reads episodes files whole)
    objects = tmp_path / "cache" / "objects"
    assert any(objects.rglob("*.r*-*"))
    whole = {p.name for p in objects.rglob("*.parquet")}
    assert len(whole) == len({p.name for p in (root / "episodes").glob("*.parquet")})

    warm = _remote(seaweed, "ranges-lake", ids, tmp_path / "cache")
    before = range_counts()
    for i in range(len(local)):
        _same(local[i], warm[i])
    after = range_counts()
    assert after["s3_fetched_bytes"] == before["s3_fetched_bytes"]
    assert after["s3_range_requests"] == before["s3_range_requests"]
    assert after["s3_range_hits"] > before["s3_range_hits"]


def test_ranges_past_the_end_and_oversized_asks_are_bounded(
    seaweed: SeaweedS3, lake: tuple[Path, list[str]], tmp_path: Path
) -> None:
    root, ids = lake
    ds = _remote(seaweed, "ranges-lake", ids, tmp_path / "cache")
    storage = ds._storage
    assert isinstance(storage, S3Storage)
    name = sorted((root / "video").glob("*.parquet"))[0].name
    uri = seaweed.uri(f"ranges-lake/video/{name}")
    size = storage.object_size(uri)
    assert size == (root / "video" / name).stat().st_size
    assert storage.read_range(uri, size - 4, 100) == b"PAR1"  # short at the end, as pread
    assert storage.read_range(uri, size + 10, 100) == b""
    with pytest.raises(StorageError, match="larger than the whole cache"):
        storage.read_range(uri, 0, 10**9)  # refused before a byte is fetched or allocated
    with pytest.raises(ValueError, match="offset >= 0"):
        storage.read_range(uri, -1, 4)
    assert storage.read_range(uri, 0, 4) == b"PAR1"  # the good read beside them


def test_object_shorter_than_the_lake_says_and_corrupt_bytes_are_refused(
    seaweed: SeaweedS3, lake: tuple[Path, list[str]], tmp_path: Path
) -> None:
    root, ids = lake
    _upload(seaweed, root, "ranges-hurt")
    local = Dataset(str(root), episode_ids=ids, seed=3, action_horizon=4)
    videos = sorted(v for v in (root / "video").glob("*.parquet") if "crashed" not in v.name)
    # one video object cut to its first half (HEAD agrees: the file is not what the log wrote)
    first = videos[0].read_bytes()
    _put(seaweed, f"ranges-hurt/video/{videos[0].name}", first[: len(first) // 2])
    ds = _remote(seaweed, "ranges-hurt", ids, tmp_path / "cache")
    errors, good = [], 0
    for i in range(len(local)):
        try:
            _same(local[i], ds[i])
            good += 1
        except CorruptDataError as err:
            errors.append(str(err))
    assert errors, "a truncated video file must not read"
    assert all(videos[0].name in e for e in errors), errors[:2]
    assert good == 0  # every visible chunk is in that one file; the lake beside it reads below

    # a cached range whose bytes the disk damaged: the page CRC refuses it (never a wrong sample)
    clean = tmp_path / "clean"
    ok = _remote(seaweed, "ranges-lake", ids, clean)
    for i in range(len(local)):
        ok[i]
    for cached in clean.glob("objects/*/*.r*-*"):  # one byte of every cached range flipped
        data = bytearray(cached.read_bytes())
        data[len(data) // 2] ^= 0xFF
        cached.write_bytes(bytes(data))
    again = _remote(seaweed, "ranges-lake", ids, clean)
    refused = 0
    for i in range(len(local)):
        try:
            _same(local[i], again[i])
        except CorruptDataError as err:
            assert "corrupt data in" in str(err) and "s3://" in str(err), err
            refused += 1
    assert refused == len(local)  # every sample refused, none read as different bytes


def test_hostile_bodies_to_ranged_reads_are_refused_within_the_deadline(
    hostile: str,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    storage = _storage(hostile, tmp_path / "cache", deadline_s=1)
    with pytest.raises(PermanentStorageError, match=r"403|ACCESS_DENIED|refused"):
        storage.read_range("s3://b/lake/steps/forbidden-4000.parquet", 0, 100)
    # a store that answers a range with the wrong number of bytes: refused, never cached
    with pytest.raises((PermanentStorageError, StoreUnreachableError)):
        storage.read_range("s3://b/lake/steps/wrong-length-4000.parquet", 100, 1000)
    with pytest.raises((PermanentStorageError, StoreUnreachableError)):
        storage.read_range("s3://b/lake/steps/cut-4000.parquet", 0, 4000)
    assert not list((tmp_path / "cache" / "objects").rglob("*wrong*"))
    # the good object beside them (the double answers whole bodies: ask for all of it)
    assert len(storage.read_range("s3://b/lake/steps/ok-4000.parquet", 0, 4000)) == 4000


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 5000)), max_size=60))
def test_coalesce_covers_every_span_within_its_budget(spans: list[tuple[int, int]]) -> None:
    plan = coalesce(spans)
    for start, size in spans:
        if size:
            assert any(a <= start and start + size <= a + n for a, n in plan), (start, size)
    merged: list[list[int]] = []
    for a, n in sorted((a, n) for a, n in spans if n):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], a + n)
        else:
            merged.append([a, a + n])
    union = sum(b - a for a, b in merged)
    assert sum(n for _, n in plan) <= union * (1 + COALESCE_BUDGET) + 1
    assert all(n <= MAX_COALESCED_BYTES for _, n in plan)
    assert [a for a, _ in plan] == sorted(a for a, _ in plan)


def test_row_group_path_reads_through_ranges_like_local_disk(
    seaweed: SeaweedS3, lake: tuple[Path, list[str]], tmp_path: Path
) -> None:
    # the path of files without a host index (pyarrow over a file object of ranges), and the
    # page CRC walk, read the same rows as from local disk and fetch no more than they count
    from pi_loader.reading._row_groups import RowGroupReader
    from pi_loader.reading._storage import LocalStorage

    root, ids = lake
    ds = _remote(seaweed, "ranges-lake", ids, tmp_path / "cache")
    remote, local = RowGroupReader(ds._storage), RowGroupReader(LocalStorage())
    for table, columns in (("video", ["episode_id", "data"]), ("steps", ["episode_id", "action"])):
        path = sorted(p for p in (root / table).glob("*.parquet") if "crashed" not in p.name)[0]
        uri = seaweed.uri(f"ranges-lake/{table}/{path.name}")
        before = range_counts()["s3_fetched_bytes"]
        got = remote.read(uri, 0, columns, table=table, version=0)
        assert got.equals(local.read(str(path), 0, columns, table=table, version=0))
        remote.check_crcs_present(uri, 0, columns, table=table)
        assert range_counts()["s3_fetched_bytes"] - before <= 1.5 * remote.bytes_read
