"""Training on an s3:// lake through the node-local cache (pi_train._stage), as the training Job
runs it: `pilake train --stage` (its init container) reads the selection into --cache-dir, then
`pilake train` trains from that cache. The S3 server is the session's real SeaweedFS."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pi_format import LakeLayout
from pi_jobs.cli import main
from pi_train import TrainConfig
from pi_train._stage import cache_config

from tests.fixtures.lake_factory import FakeLake, append_episodes, make_episode
from tests.fixtures.seaweedfs import SeaweedS3


@pytest.fixture()
def s3(seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[SeaweedS3]:
    # pilake and the loader take the endpoint and credentials from the environment, as the
    # training pod gets them (deploy/k8s/training.yaml)
    for key, value in seaweed.storage_options.items():
        monkeypatch.setenv(key, value)
    yield seaweed


def _files(directory: Path) -> int:
    return sum(1 for p in directory.rglob("*") if p.is_file())


def test_stage_then_train_an_s3_lake_through_the_node_cache(
    s3: SeaweedS3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = LakeLayout(s3.uri(f"train-stage-{uuid.uuid4().hex[:8]}/lake"))
    episodes = [make_episode(i, steps=12, cameras=("front",), size=(32, 32), seed=0) for i in range(3)]
    append_episodes(layout, episodes, (32, 32))
    cache = tmp_path / "nvme" / "cache"
    argv = ["train", "--lake", layout.root, "--batch-size", "4", "--action-horizon", "4", "--workers", "0"]
    argv += ["--out", str(tmp_path / "run"), "--cache-dir", str(cache), "--cache-gib", "1", "--device", "cpu"]
    assert main([*argv, "--stage", "--nproc", "2"]) == 0  # --workers 0 x 2 processes: in-process
    out = capsys.readouterr().out
    assert "read 36 samples of 3 episodes" in out and str(cache) in out
    staged = _files(cache)
    assert staged > 0  # the lake's files are on the node's disk now
    assert not (tmp_path / "run" / "checkpoints").exists()  # staging trains nothing
    assert main([*argv, "--steps", "2"]) == 0
    assert (tmp_path / "run" / "summary.json").exists()
    assert _files(cache) >= staged


def test_an_s3_lake_without_a_cache_dir_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"s3://b/lake.*pass cache_dir \(--cache-dir"):
        TrainConfig(lake="s3://b/lake")
    for bad in (0, -1.0, float("nan"), float("inf"), True, "100"):
        with pytest.raises(ValueError, match="cache_gib must be a number of GiB > 0"):
            TrainConfig(lake="lake", cache_gib=bad)  # type: ignore[arg-type]
    config = TrainConfig(lake="s3://b/lake", cache_dir="/nvme/c", cache_gib=0.5)
    cached = cache_config(config)
    assert cached is not None and cached.max_size_bytes == 2**29
    assert cache_config(TrainConfig(lake="lake")) is None


def test_stage_of_a_local_lake_reads_every_sample(train_lake: FakeLake, tmp_path: Path) -> None:
    from pi_train._stage import stage

    lake = train_lake.layout.root
    config = TrainConfig(lake=lake, batch_size=5, action_horizon=4, workers=0, out_dir=str(tmp_path))
    report = stage(config)
    assert (report["samples"], report["episodes"]) == (48, 4)  # drop_last=False: the last 3 too
