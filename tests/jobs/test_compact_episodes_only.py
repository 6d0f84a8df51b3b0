"""`pilake compact --episodes-only` (a marker merge, pi_format.lake.rewrite_markers): the small
groups' episodes files become one, the steps and video files stay, a pin reads the same samples
before and after (and after GC and a later full compaction); a corrupt episodes file is refused
by name and nothing is committed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pi_format import LakeLayout
from pi_format.errors import LakeError
from pi_format.lake.file_groups import read_lake_files
from pi_jobs.cli import main as pilake
from pi_jobs.maintenance import CompactConfig, GcConfig, compact, gc
from pi_jobs.maintenance.compaction import choose_groups, fragmented
from pi_jobs.maintenance.datasets import create_dataset
from pi_jobs.ops.audit import audit
from pi_loader import Dataset, SampleSpec

from tests.fixtures.lake_factory import write_lake

SPEC = SampleSpec(cameras=("front",), action_horizon=3)
ONLY = CompactConfig(episodes_only=True)


def _files(layout: LakeLayout, table: str) -> set[str]:
    return {uri.rsplit("/", 1)[-1] for uri in DeltaTable(layout.table(table)).file_uris()}


def _samples(layout: LakeLayout, snapshot: str | None = None) -> list[tuple[str, int, bytes, bytes]]:
    ds = Dataset(layout, snapshot=snapshot, spec=SPEC, seed=7)
    out = []
    for i in range(len(ds)):
        s: dict[str, Any] = ds[i]
        out.append(
            (
                str(s["episode_id"]),
                int(s["step"]),
                s["observation.images.front"].tobytes(),
                s["action"].tobytes(),
            )
        )
    return out


def test_a_marker_merge_leaves_steps_and_video_and_reads_the_same_samples(tmp_path: Path) -> None:
    lake = write_lake(
        tmp_path / "lake",
        episodes=10,
        steps=12,
        cameras=("front",),
        size=(32, 24),
        group=2,
        garbage_attempt=False,
    )
    layout = lake.layout
    create_dataset(layout, "all-v1", episode_ids=list(lake.episode_ids))
    before = _samples(layout)
    pinned = _samples(layout, "all-v1")
    steps, video = _files(layout, "steps"), _files(layout, "video")
    assert len(_files(layout, "episodes")) >= 5

    report = compact(layout, ONLY)
    assert report.files_after["episodes"] == 1 and report.files_before["episodes"] >= 5
    assert _files(layout, "steps") == steps and _files(layout, "video") == video  # not touched
    assert _samples(layout) == before and _samples(layout, "all-v1") == pinned
    (group,) = read_lake_files(layout).groups
    assert fragmented(group)
    assert choose_groups((group,), set(), ONLY) == []  # nothing small left for a marker merge
    assert compact(layout, ONLY).groups_merged == 0

    # GC keeps every steps and video file (a current marker names each), drops the old episodes files
    gc(layout, GcConfig(retention_hours=0))
    assert _samples(layout) == before and _samples(layout, "all-v1") == pinned
    # a later full compaction merges the fragmented group's steps and video files
    full = compact(layout)
    assert full.groups_merged == 1
    assert len(_files(layout, "steps")) == 1 and len(_files(layout, "video")) == 1
    assert _samples(layout) == before and _samples(layout, "all-v1") == pinned
    result = audit(layout)
    assert result.missing == 0 and result.duplicated == 0, result


def test_the_cli_flag_runs_a_marker_merge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = write_lake(tmp_path / "lake", episodes=6, steps=8, cameras=("front",), size=(32, 24), group=2)
    steps = _files(lake.layout, "steps")
    monkeypatch.setenv("PILAKE_LAKE", str(tmp_path / "lake"))
    assert pilake(["compact", "--episodes-only"]) == 0
    assert len(_files(lake.layout, "episodes")) == 1 and _files(lake.layout, "steps") == steps


def test_a_corrupt_episodes_file_is_refused_and_nothing_is_committed(tmp_path: Path) -> None:
    lake = write_lake(tmp_path / "lake", episodes=6, steps=8, cameras=("front",), size=(32, 24), group=2)
    layout = lake.layout
    version = DeltaTable(layout.episodes).version()
    victim = sorted(DeltaTable(layout.episodes).file_uris())[1]
    # robot_id: a column the plan does not read (the merge reads every column)
    chunk = pq.ParquetFile(victim).metadata.row_group(0).column(2)
    assert chunk.path_in_schema == "robot_id"
    raw = bytearray(Path(victim).read_bytes())
    # a flipped byte at the end of its data page's stored bytes: the page CRC no longer matches
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    raw[start + chunk.total_compressed_size - 2] ^= 0xFF
    Path(victim).write_bytes(bytes(raw))
    with pytest.raises(
        LakeError, match=rf"episodes file .*{Path(victim).name} does not read .*(?i:crc|checksum)"
    ):
        compact(layout, ONLY)
    assert DeltaTable(layout.episodes).version() == version
