"""`pilake dataset copy` and `pilake dataset stage` (pi_jobs.datasets, issue 33 items 1-2) on
real lakes: a pin copied local -> SeaweedFS (the session's real S3 server) -> another local
lake, the copy SIGKILLed half way (a fault hook in the CLI process) and resumed, the samples read
identical at the end; a corrupted source byte fails the copy naming the file with no pin
committed; hostile destinations and pin names; staging then a loader that fetches nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pi_format import LakeLayout
from pi_format.lake import PinStore
from pi_jobs.cli import main
from pi_jobs.datasets import (
    KILL_AFTER_FILES_ENV,
    CopyError,
    CopyOptions,
    StageOptions,
    copy_dataset,
    stage_dataset,
)
from pi_jobs.maintenance.datasets import create_dataset
from pi_loader import CacheConfig, Dataset, SampleSpec

from tests.fixtures.lake_factory import FakeEpisode, append_episodes, make_episode
from tests.fixtures.seaweedfs import SeaweedS3

SIZE = (32, 32)


@pytest.fixture()
def s3(seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[SeaweedS3]:
    # pilake, deltalake and the loader take the endpoint and credentials from the environment
    for key, value in seaweed.storage_options.items():
        monkeypatch.setenv(key, value)
    yield seaweed


def _episode(i: int) -> FakeEpisode:
    return make_episode(i, steps=8, cameras=("front",), size=SIZE, seed=0)


def _lake(root: Path, first: int, count: int, *, group: int = 2) -> LakeLayout:
    layout = LakeLayout(str(root))
    episodes = [
        make_episode(i, steps=8, cameras=("front",), size=SIZE, seed=0) for i in range(first, first + count)
    ]
    append_episodes(layout, episodes, SIZE, group=group)  # a steps and a video file per 2 episodes
    return layout


def _samples(root: str, pin: str, cache: Path | None = None) -> tuple[str, list[dict[str, object]], Dataset]:
    spec = SampleSpec(action_horizon=4)
    ds = Dataset(root, snapshot=pin, spec=spec, cache=CacheConfig(cache, 2**30) if cache else None)
    return ds.snapshot.fingerprint, [ds[i] for i in range(len(ds))], ds


def _same(a: list[dict[str, object]], b: list[dict[str, object]]) -> None:
    assert len(a) == len(b) and len(a) > 0
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(np.asarray(x[key]), np.asarray(y[key]), err_msg=key)


def _cli(args: list[str], lake: str, home: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PILAKE_LAKE": lake, "PILAKE_HOME": str(home), **extra}
    return subprocess.run(
        [sys.executable, "-m", "pi_jobs.cli", "dataset", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_copy_local_to_s3_killed_half_way_resumes_then_to_local_reads_identical_samples(
    s3: SeaweedS3, tmp_path: Path
) -> None:
    source = _lake(tmp_path / "src", 0, 8)
    create_dataset(source, "pick-v1", episode_ids=[f"ep-{i:03d}" for i in range(6)])
    fingerprint, samples, _ = _samples(source.root, "pick-v1")
    remote = s3.uri(f"copy-{uuid.uuid4().hex[:8]}/lake")

    # 6 episodes in 3 group commits: 3 steps + 3 video files; killed after sending 2 of them
    killed = _cli(
        ["copy", "pick-v1", remote, "--workers", "1", "--json"],
        source.root,
        tmp_path / "h",
        **{KILL_AFTER_FILES_ENV: "2"},
    )
    assert killed.returncode == -9, killed.stderr
    assert PinStore(LakeLayout(remote)).find("pick-v1") is None  # no half-copied pin shows
    resumed = _cli(["copy", "pick-v1", remote, "--json", "--readback"], source.root, tmp_path / "h")
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["files"] == 6 and report["files_sent"] == 4 and report["files_already_there"] == 2
    assert report["rows_committed"]["episodes"] == 6
    assert "copy pick-v1 [" in resumed.stderr and "/s ETA" in resumed.stderr  # the progress bar

    again = copy_dataset(source.root, "pick-v1", remote, show_progress=False)  # nothing new: a no-op
    assert (again.files_sent, again.rows_committed["episodes"]) == (0, 0)

    back = copy_dataset(  # readback: every written file read back against the source's sha256
        remote, "pick-v1", str(tmp_path / "dst"), options=CopyOptions(workers=4, part_mib=1, readback=True)
    )
    assert back.files_sent == 6
    fingerprint_back, samples_back, _ = _samples(str(tmp_path / "dst"), "pick-v1")
    assert fingerprint_back == fingerprint
    assert PinStore(LakeLayout(str(tmp_path / "dst"))).get("pick-v1").content_hash == report["content_hash"]
    _same(samples, samples_back)

    # a newer pin of the same selection plus new episodes sends only the new files
    append_episodes(
        source, [make_episode(i, steps=8, cameras=("front",), size=SIZE, seed=0) for i in (8, 9)], SIZE
    )
    create_dataset(source, "pick-v2", episode_ids=[f"ep-{i:03d}" for i in (*range(6), 8, 9)])
    newer = copy_dataset(source.root, "pick-v2", remote, show_progress=False)
    assert (newer.files, newer.files_sent, newer.rows_committed["episodes"]) == (8, 2, 2)
    _same(_samples(source.root, "pick-v2")[1], _samples(remote, "pick-v2", tmp_path / "c")[1])


def _flip_a_video_byte(layout: LakeLayout) -> str:
    import pyarrow.parquet as pq
    from pi_format.lake.integrity import column_chunk_ranges

    video = sorted(p for p in Path(layout.video).glob("part-*.parquet"))[0]
    data = bytearray(video.read_bytes())
    # the last byte but one of the largest column chunk: inside a page of encoded frames
    _, _, start, length = max(column_chunk_ranges(pq.ParquetFile(video).metadata), key=lambda c: c[3])
    data[start + length - 2] ^= 0x5A
    video.write_bytes(bytes(data))
    return video.name


def test_a_corrupt_source_byte_fails_the_copy_naming_the_file_and_commits_no_pin(tmp_path: Path) -> None:
    source = _lake(tmp_path / "src", 0, 4)
    create_dataset(source, "pick-v1")
    name = _flip_a_video_byte(source)
    dest = tmp_path / "dst"
    with pytest.raises(CopyError, match=rf"{name} failed its checks twice: .*page fault"):
        copy_dataset(source.root, "pick-v1", str(dest), show_progress=False)
    assert PinStore(LakeLayout(str(dest))).find("pick-v1") is None
    assert not list(Path(dest, "video").glob(name))  # the bad bytes were never written


def test_hostile_destinations_and_pin_names_are_refused_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _lake(tmp_path / "src", 0, 2)
    create_dataset(source, "pick-v1")
    monkeypatch.setenv("PILAKE_LAKE", source.root)
    monkeypatch.setenv("PILAKE_HOME", str(tmp_path / "home"))
    cases = [
        (["pick-v1", str(tmp_path / "src" / "inside")], "overlap"),
        (["pick-v1", str(tmp_path / "src")], "overlap"),
        (["pick-v1", str(tmp_path)], "overlap"),  # the source lies inside the destination
        (["no-such-pin", str(tmp_path / "d")], "no dataset pin named 'no-such-pin'.*pick-v1"),
        (["../../etc", str(tmp_path / "d")], "a pin name is 1-128 characters"),
        (["a/b", str(tmp_path / "d")], "a pin name is 1-128 characters"),
        (["pïn-ü", str(tmp_path / "d")], "a pin name is 1-128 characters"),
        (["x" * 200, str(tmp_path / "d")], "a pin name is 1-128 characters"),
        (["pick-v1", "gs://bucket/lake"], "local path or s3://bucket/prefix"),
        (["pick-v1", str(tmp_path / "d"), "--workers", "0"], r"workers must be an integer in \[1, 256\]"),
    ]
    for args, message in cases:
        assert main(["dataset", "copy", *args, "--quiet"]) == 1, args
        err = capsys.readouterr().err
        assert __import__("re").search(message, err), (args, err)
    assert not Path(tmp_path / "d").exists() and not Path(tmp_path / "src" / "inside").exists()
    # the good copy beside them still goes through, and the destination's catalog indexes it
    catalog = str(tmp_path / "dest-catalog")
    good = ["dataset", "copy", "pick-v1", str(tmp_path / "d"), "--dest-catalog", catalog, "--quiet"]
    assert main(good) == 0
    assert PinStore(LakeLayout(str(tmp_path / "d"))).get("pick-v1").episode_ids == ("ep-000", "ep-001")
    from pi_catalog import Catalog

    index = Catalog(catalog)
    try:
        assert sorted(index.episode_ids("SELECT episode_id FROM episodes")) == ["ep-000", "ep-001"]
    finally:
        index.close()


def test_stage_fills_the_cache_so_a_loader_fetches_no_remote_byte(
    s3: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _lake(tmp_path / "src", 0, 4)
    create_dataset(source, "pick-v1")
    remote = s3.uri(f"stage-{uuid.uuid4().hex[:8]}/lake")
    copy_dataset(source.root, "pick-v1", remote, show_progress=False)

    _, _, cold = _samples(remote, "pick-v1", tmp_path / "cold")  # the control: a cold cache fetches
    assert cold._storage.stats().misses > 0  # type: ignore[attr-defined]

    cache = tmp_path / "nvme"
    options = StageOptions(workers=0)  # in-process: no worker processes to spawn
    report = stage_dataset(remote, "pick-v1", str(cache), options=options, show_progress=False)
    assert (report["samples"], report["episodes"], report["files"]) == (32, 4, 4)  # 2 steps + 2 video files
    local = LakeLayout(source.root)
    sizes = [
        p.stat().st_size for t in ("steps", "video") for p in Path(local.table(t)).glob("part-*.parquet")
    ]
    assert report["bytes"] == sum(sizes)  # the files' bytes, whole: nothing decoded, nothing else
    _, samples, warm = _samples(remote, "pick-v1", cache)
    stats = warm._storage.stats()  # type: ignore[attr-defined]
    assert (stats.misses, stats.downloaded_bytes) == (0, 0) and stats.hits > 0
    _same(samples, _samples(source.root, "pick-v1")[1])

    # through the CLI: an unknown pin and a bad name are refused clearly, the pin stages
    monkeypatch.setenv("PILAKE_LAKE", remote)
    monkeypatch.setenv("PILAKE_HOME", str(tmp_path / "home"))
    for name, message in (("nope", "no dataset pin named 'nope'"), ("a/b", "a pin name is 1-128")):
        assert main(["dataset", "stage", name, "--cache", str(tmp_path / "c2"), "--quiet"]) == 1
        assert message in capsys.readouterr().err
    assert main(["dataset", "stage", "pick-v1", "--cache", str(tmp_path / "c2"), "--workers", "0"]) == 0
    captured = capsys.readouterr()
    assert "staged 32 samples of 4 episodes" in captured.out and "stage pick-v1 [" in captured.err
