"""The copy's page-CRC check (`pi_format.lake.page_walk.check_pages`) on real lake files: the fast
walk finds intact files intact, and every seeded flip, truncation and garbage prefix it is given
is refused naming what is wrong (the fast walk hands anything odd to `check_parquet_file`); a
copy into a destination that refuses writes fails clearly, commits nothing, and the good copy
beside it goes through."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pi_format import LakeLayout
from pi_format.lake import PinStore, check_parquet_file
from pi_format.lake.page_walk import check_pages, walk
from pi_jobs.datasets import CopyError, copy_dataset
from pi_jobs.maintenance.datasets import create_dataset

from tests.fixtures.lake_factory import append_episodes, make_episode

SIZE = (32, 32)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> LakeLayout:
    layout = LakeLayout(str(tmp_path_factory.mktemp("pages") / "lake"))
    episodes = [make_episode(i, steps=12, cameras=("front",), size=SIZE, seed=0) for i in range(4)]
    append_episodes(layout, episodes, SIZE, group=2)
    create_dataset(layout, "pick-v1")
    return layout


def _files(layout: LakeLayout) -> list[Path]:
    return sorted(p for t in ("steps", "video") for p in Path(layout.table(t)).glob("part-*.parquet"))


def test_intact_lake_files_pass_and_the_video_files_take_the_fast_walk(lake: LakeLayout) -> None:
    for path in _files(lake):
        data = path.read_bytes()
        assert check_pages(data, require_crc=True) == "", path
    video = [p for p in _files(lake) if p.parent.name == "video"]
    assert video
    for path in video:  # the lake's video pages have the plain shape: no slow walk needed
        data = path.read_bytes()
        assert walk(data, pq.ParquetFile(path).metadata, strict=False), path


def test_seeded_flips_truncations_and_garbage_are_refused_as_the_slow_check_does(lake: LakeLayout) -> None:
    rng = random.Random(20261127)
    for path in _files(lake):
        data = path.read_bytes()
        for _ in range(40):
            damaged = bytearray(data)
            at = rng.randrange(4, len(data) - 8)
            damaged[at] ^= 1 << rng.randrange(8)
            problem = check_pages(bytes(damaged), require_crc=True)
            # whatever the fast walk says, a fault the authoritative walk finds is a refusal
            try:
                faults = check_parquet_file(
                    pa.BufferReader(bytes(damaged)), require_crc=True, decode=False
                ).faults
            except (ValueError, pa.ArrowException, OSError):  # e.g. a column path that is not UTF-8
                faults = ["footer"]  # type: ignore[list-item]
            if faults:
                assert problem, (path.name, at)
            if problem:
                assert re.search(r"page fault|footer does not (parse|read)", problem), problem
        for cut in (0, 1, 4, len(data) // 3, len(data) - 9, len(data) - 1):
            assert check_pages(data[:cut], require_crc=True), (path.name, cut)
        assert check_pages(b"\xff" * 64 + data, require_crc=True)  # every offset shifted: refused
        assert check_pages(data, require_crc=True) == ""  # the good file beside them still passes


def test_a_flip_in_a_video_page_payload_is_caught(lake: LakeLayout) -> None:
    video = next(p for p in _files(lake) if p.parent.name == "video")
    data = bytearray(video.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside the frames' pages
    assert "page CRC" in check_pages(bytes(data), require_crc=True)


def test_a_destination_that_refuses_writes_fails_naming_it_and_commits_nothing(
    lake: LakeLayout, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    refused = blocker / "lake"  # every write under it fails (ENOTDIR), whoever runs the test
    with pytest.raises((CopyError, OSError), match=r"a-file"):
        copy_dataset(lake.root, "pick-v1", str(refused), show_progress=False)
    assert blocker.read_text() == "not a directory"
    good = copy_dataset(lake.root, "pick-v1", str(tmp_path / "good"), show_progress=False)
    assert good.files_sent == len(_files(lake))
    assert PinStore(LakeLayout(str(tmp_path / "good"))).get("pick-v1").content_hash == good.content_hash


def test_hostile_destination_bytes_are_refused_before_anything_is_written(
    lake: LakeLayout, tmp_path: Path
) -> None:
    for dest, message in (
        ("s3://", "local path or s3://bucket/prefix"),
        ("gs://bucket/lake", "local path or s3://bucket/prefix"),
        ("ftp://host/lake", "local path or s3://bucket/prefix"),
    ):
        with pytest.raises((CopyError, ValueError), match=message):
            copy_dataset(lake.root, "pick-v1", dest, show_progress=False)
    for dest in (
        str(tmp_path / "nul\x00byte"),
        str(tmp_path / "new\nline"),
        str(tmp_path / "esc\x1b[2J"),
        "s3://bu\x00cket/lake",
        "   ",
    ):
        with pytest.raises(CopyError, match=r"lake root .*(control character|local path)"):
            copy_dataset(lake.root, "pick-v1", dest, show_progress=False)
    assert not list(tmp_path.iterdir())  # nothing made for any of them


def test_a_truncated_source_file_fails_the_copy_naming_it_and_commits_no_pin(tmp_path: Path) -> None:
    layout = LakeLayout(str(tmp_path / "src"))
    append_episodes(
        layout, [make_episode(i, steps=8, cameras=("front",), size=SIZE, seed=0) for i in range(2)], SIZE
    )
    create_dataset(layout, "pick-v1")
    video = next(p for p in _files(layout) if p.parent.name == "video")
    data = video.read_bytes()
    video.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        CopyError, match=rf"{video.name} failed its checks twice: read {len(data) // 2} bytes"
    ):
        copy_dataset(layout.root, "pick-v1", str(tmp_path / "dst"), show_progress=False)
    assert PinStore(LakeLayout(str(tmp_path / "dst"))).find("pick-v1") is None
    assert not (tmp_path / "dst" / "video" / video.name).exists()
