"""`pilake dataset copy` when a source file changes while it is copied (the checks run beside the
writes since issue 33's speed work): the real file on disk is flipped or truncated between the
plan and the reads (a wrapper around the source's real LocalFileSystem changes it at the n-th
open), into a local lake and into SeaweedFS. A change that is gone on the re-fetch is sent
intact; one that stays fails the copy naming the file, with no pin and no object under the
file's name at the destination, and the files beside it are untouched by the fault."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from pi_format import LakeLayout
from pi_format.lake import PinStore
from pi_format.lake.integrity import column_chunk_ranges
from pi_jobs.datasets import CopyError, copy_dataset
from pi_jobs.datasets._manifest import CopyManifest
from pi_jobs.datasets._rows import source_rows
from pi_jobs.datasets._stores import LakeStore
from pi_jobs.datasets._transfer import Transfers
from pi_jobs.datasets.copy import _plan
from pi_jobs.maintenance.datasets import create_dataset

from tests.fixtures.lake_factory import append_episodes, make_episode
from tests.fixtures.seaweedfs import SeaweedS3

SIZE = (32, 32)


class _ChangingFS:
    """The source's real LocalFileSystem; `change(path, n)` runs before the n-th open of `path`
    (so the file really changes on disk while the copy reads it)."""

    def __init__(self, change: Callable[[str, int], None]) -> None:
        self.fs = pafs.LocalFileSystem()
        self.change = change
        self.opens: Counter[str] = Counter()

    def open_input_file(self, path: str) -> Any:
        self.opens[path] += 1
        self.change(path, self.opens[path])
        return self.fs.open_input_file(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fs, name)


@pytest.fixture()
def source(tmp_path: Path) -> LakeLayout:
    layout = LakeLayout(str(tmp_path / "src"))
    episodes = [make_episode(i, steps=8, cameras=("front",), size=SIZE, seed=0) for i in range(4)]
    append_episodes(layout, episodes, SIZE, group=2)  # 2 steps + 2 video files
    create_dataset(layout, "pick-v1")
    return layout


def _video(layout: LakeLayout) -> Path:
    return sorted(Path(layout.video).glob("part-*.parquet"))[0]


def _flipped(path: Path) -> bytes:
    data = bytearray(path.read_bytes())
    _, _, start, length = max(column_chunk_ranges(pq.ParquetFile(path).metadata), key=lambda c: c[3])
    data[start + length - 2] ^= 0x5A  # inside a page of encoded frames
    return bytes(data)


def _changing_source(
    monkeypatch: pytest.MonkeyPatch, layout: LakeLayout, change: Callable[[str, int], None]
) -> _ChangingFS:
    fs = _ChangingFS(change)
    real_open = LakeStore.open

    def open_store(root: str) -> LakeStore:
        store = real_open(root)
        return LakeStore(store.root, fs, store.base, False) if store.root == layout.root else store

    monkeypatch.setattr(LakeStore, "open", staticmethod(open_store))
    return fs


@pytest.fixture()
def s3(seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[SeaweedS3]:
    for key, value in seaweed.storage_options.items():
        monkeypatch.setenv(key, value)
    yield seaweed


def test_a_file_changed_during_the_first_read_is_fetched_again_and_sent_intact(
    source: LakeLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    video = _video(source)
    intact, bad = video.read_bytes(), _flipped(video)

    def change(path: str, n: int) -> None:
        if path == str(video):
            video.write_bytes(bad if n == 1 else intact)  # changed, then put back

    _changing_source(monkeypatch, source, change)
    report = copy_dataset(source.root, "pick-v1", str(tmp_path / "dst"), show_progress=False)
    assert (report.files_sent, report.files_refetched) == (4, 1)
    assert (tmp_path / "dst" / "video" / video.name).read_bytes() == intact
    assert PinStore(LakeLayout(str(tmp_path / "dst"))).get("pick-v1").content_hash == report.content_hash


@pytest.mark.parametrize("end", ["local", "s3"])
def test_a_file_that_stays_changed_fails_naming_it_and_leaves_no_object_under_its_name(
    end: str,
    source: LakeLayout,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    video = _video(source)
    bad = _flipped(video)

    def change(path: str, n: int) -> None:
        if path == str(video) and n == 1:
            video.write_bytes(bad)  # after the plan read the Delta log: same size, other bytes

    _changing_source(monkeypatch, source, change)
    dest = (
        str(tmp_path / "dst")
        if end == "local"
        else request.getfixturevalue("s3").uri(f"during-{uuid.uuid4().hex[:8]}/lake")
    )
    with pytest.raises(CopyError, match=rf"{video.name} failed its checks twice: .*page fault"):
        copy_dataset(source.root, "pick-v1", dest, show_progress=False)
    assert PinStore(LakeLayout(dest)).find("pick-v1") is None
    store = LakeStore.open(dest)
    assert store.size(f"video/{video.name}") is None  # checked beside the upload, then removed
    # the good files beside it went through
    others = [
        p for t in ("steps", "video") for p in Path(source.table(t)).glob("part-*.parquet") if p != video
    ]
    assert others and all(store.size(f"{p.parent.name}/{p.name}") == p.stat().st_size for p in others)


@pytest.mark.parametrize("stays", [False, True])
def test_a_part_truncated_while_the_parts_are_read_is_fetched_again_then_fails_naming_it(
    stays: bool, source: LakeLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    video = _video(source)
    intact = video.read_bytes()
    part = 2048
    assert len(intact) > 4 * part  # read in several ranged parts

    def change(path: str, n: int) -> None:
        if path != str(video):
            return
        first_try = 1 + -(-len(intact) // part)  # the size's handle, then one per part
        if n == 2:  # the first part's own handle: the tail is gone before the last parts are read
            video.write_bytes(intact[: len(intact) - part - 17])
        elif n > first_try and not stays:  # the re-fetch finds it whole again
            video.write_bytes(intact)

    fs = _changing_source(monkeypatch, source, change)
    src, dst = LakeStore.open(source.root), LakeStore.open(str(tmp_path / "dst"))
    jobs = _plan(source, source_rows(source, PinStore(source).get("pick-v1")))
    transfers = Transfers(src, dst, CopyManifest(store=dst, pin="pick-v1"), None, workers=1, part_bytes=part)
    relative = f"video/{video.name}"
    if stays:
        with pytest.raises(
            CopyError, match=rf"{video.name} failed its checks twice: read \d+ bytes, .* says"
        ):
            transfers.run(jobs)
        assert dst.size(relative) is None
        return
    done = transfers.run(jobs)
    assert fs.opens[str(video)] > 3 and transfers.counts.refetched == 1
    assert (tmp_path / "dst" / relative).read_bytes() == intact and done[relative].size == len(intact)
