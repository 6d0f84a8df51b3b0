"""`pilake dataset copy --flink` (pi_jobs.datasets._flink_copy, issue 33 item 1 "beyond one
machine") on real lakes and the real PyFlink mini-cluster: a subtask SIGKILLed mid-copy (the
transfer fault hook, in a `pilake` process of its own) leaves no pin at the destination; the
rerun at parallelism 2 sends only the files not already there, each subtask moves a share, the
pin opens with the source's content hash and the loader yields the same samples (fingerprint);
a corrupt source byte fails the job naming the file with nothing committed; bad options refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pi_format import LakeLayout
from pi_format.lake import PinStore
from pi_format.lake._commit import file_sizes
from pi_jobs.datasets import KILL_AFTER_FILES_ENV, CopyError
from pi_jobs.datasets._flink_copy import FlinkCopyOptions, copy_dataset_flink, split_shares
from pi_jobs.datasets._transfer import FileJob
from pi_jobs.maintenance.datasets import create_dataset

from tests.jobs.test_dataset_copy import _flip_a_video_byte, _lake, _same, _samples


def test_shares_split_the_file_list_by_bytes_each_file_once() -> None:
    jobs = [FileJob(f"steps/part-{i}.parquet", size, True) for i, size in enumerate([9, 1, 8, 2, 7, 3, 5, 5])]
    shares = split_shares(jobs, 4)
    assert sorted(j.relative for s in shares for j in s) == sorted(j.relative for j in jobs)
    assert [sum(j.size for j in s) for s in shares] == [10, 10, 10, 10]
    assert len(split_shares(jobs[:2], 8)) == 2  # no empty share


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"parallelism": 0}, r"parallelism must be an integer in \[1, 1024\], got 0"),
        ({"parallelism": True}, "parallelism must be an integer"),
        ({"shares_per_subtask": 10**6}, "shares_per_subtask must be"),
        ({"restart_attempts": -1}, "restart_attempts must be"),
        ({"cluster": "https://flink.example.com"}, "must look like http://host:port"),
    ],
)
def test_bad_flink_options_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FlinkCopyOptions(**kwargs)  # type: ignore[arg-type]


def _present(dest: Path, source: LakeLayout) -> int:
    """Files at the destination with the source's size (finished before the kill)."""
    count = 0
    for table in ("steps", "video"):
        for path in Path(source.root, table).glob("part-*.parquet"):
            there = dest / table / path.name
            count += there.is_file() and there.stat().st_size == path.stat().st_size
    return count


def test_flink_copy_killed_mid_copy_resumes_without_resending_and_reads_identical_samples(
    tmp_path: Path,
) -> None:
    source = _lake(tmp_path / "src", 0, 8)  # 4 group commits: 4 steps + 4 video files
    create_dataset(source, "pick-v1", episode_ids=[f"ep-{i:03d}" for i in range(8)])
    fingerprint, samples, _ = _samples(source.root, "pick-v1")
    dest = tmp_path / "dst"
    env = {
        **os.environ,
        "PILAKE_LAKE": source.root,
        "PILAKE_HOME": str(tmp_path / "h"),
        KILL_AFTER_FILES_ENV: "1",  # each subtask's Python worker is SIGKILLed after sending a file
    }
    killed = subprocess.run(
        [sys.executable, "-m", "pi_jobs.cli", "dataset", "copy", "pick-v1", str(dest), "--flink", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert killed.returncode != 0, killed.stdout
    assert "the copy job" in killed.stderr and "run the same command again" in killed.stderr, killed.stderr
    assert PinStore(LakeLayout(str(dest))).find("pick-v1") is None  # no half-copied pin shows
    assert not list((dest / "episodes").glob("*.parquet"))  # no episodes row committed
    finished = _present(dest, source)
    assert 1 <= finished < 8

    report = copy_dataset_flink(
        source.root,
        "pick-v1",
        str(dest),
        flink=FlinkCopyOptions(parallelism=2, work_dir=tmp_path / "flink"),
        show_progress=False,
    )
    assert report.files == 8 and report.files_sent == 8 - finished, report
    assert report.files_already_there == finished  # checked in place, not sent again
    assert report.shares == 8 and set(report.subtask_files) == {"0", "1"}  # the list split in two
    assert all(n > 0 for n in report.subtask_files.values()) and sum(report.subtask_files.values()) == 8
    assert report.rows_committed["episodes"] == 8 and report.where == "mini-cluster"
    pin = PinStore(LakeLayout(str(dest))).get("pick-v1")
    assert pin.content_hash == PinStore(source).get("pick-v1").content_hash == report.content_hash
    fingerprint_there, samples_there, _ = _samples(str(dest), "pick-v1")
    assert fingerprint_there == fingerprint
    _same(samples, samples_there)
    assert not (dest / "_pilake_copy" / "copy-pick-v1.flink").exists()  # reports cleaned after the pin


def test_a_corrupt_source_file_fails_the_job_naming_it_and_commits_nothing(tmp_path: Path) -> None:
    source = _lake(tmp_path / "src", 0, 4)
    create_dataset(source, "pick-v1")
    name = _flip_a_video_byte(source)
    dest = tmp_path / "dst"
    flink = FlinkCopyOptions(parallelism=2, restart_attempts=0, work_dir=tmp_path / "flink")
    with pytest.raises(CopyError, match=rf"(?s)the copy job .* failed.*{name} failed its checks twice"):
        copy_dataset_flink(source.root, "pick-v1", str(dest), flink=flink, show_progress=False)
    assert PinStore(LakeLayout(str(dest))).find("pick-v1") is None
    assert not list(Path(dest, "video").glob(name))  # the bad bytes were never written
    for table in ("steps", "video", "episodes"):  # nothing in any table's log
        assert file_sizes(DeltaTable(LakeLayout(str(dest)).table(table))) == {}


def test_flink_copy_runs_on_a_session_cluster(tmp_path: Path) -> None:
    """The same job submitted with `flink run` to a real standalone session cluster (a JobManager
    and a TaskManager JVM with 2 slots, from the apache-flink wheel), watched over REST."""
    from pi_jobs.local.flink_cluster import LocalClusterConfig, start_local_cluster, stop_local_cluster
    from pi_jobs.settings import Settings

    from tests.conftest import _free_port

    source = _lake(tmp_path / "src", 0, 4)
    create_dataset(source, "pick-v1")
    fingerprint, samples, _ = _samples(source.root, "pick-v1")
    url = f"http://127.0.0.1:{_free_port()}"
    settings = Settings(home=tmp_path / "home", flink_rest_url=url)
    start_local_cluster(settings, LocalClusterConfig(slots=2, taskmanager_memory_mb=2048))
    try:
        flink = FlinkCopyOptions(parallelism=2, cluster=url, work_dir=tmp_path / "flink")
        report = copy_dataset_flink(
            source.root, "pick-v1", str(tmp_path / "dst"), flink=flink, show_progress=False
        )
    finally:
        stop_local_cluster(settings)
    assert report.where == f"session cluster {url}" and len(report.job_id) == 32
    assert report.files_sent == report.files == 4 and set(report.subtask_files) == {"0", "1"}
    fingerprint_there, samples_there, _ = _samples(str(tmp_path / "dst"), "pick-v1")
    assert fingerprint_there == fingerprint
    _same(samples, samples_there)
