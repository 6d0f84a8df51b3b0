"""A rewrite (compaction, GC) copies each episode's rows exactly: the faster write path (one
writer call per run of equal row groups over contiguous columns, whole source files read once)
writes the same bytes as one call per row group, keeps the SPEC.md §7.8 layout, and a reader
sees the same samples; a locator past its file's end is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pi_format.errors import LakeError
from pi_format.lake import _files
from pi_format.lake._files import row_group_runs, write_file
from pi_format.lake.file_groups import read_lake_files
from pi_format.lake.rewrite import rewrite_groups
from pi_loader import Dataset, SampleSpec

from tests.fixtures.lake_factory import write_lake

SPEC = SampleSpec(cameras=("front", "wrist"), action_horizon=3)


def _chunked(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    parts = []
    start = 0
    while start < rows:  # uneven chunks, as a rewrite's concatenated per-episode slices are
        n = int(min(rows - start, rng.integers(1, 9)))
        parts.append(
            pa.table(
                {
                    "episode_id": [f"ep-{(start + i) // 7:04d}" for i in range(n)],
                    "step_index": pa.array(range(start, start + n), pa.int32()),
                    "data": [rng.bytes(int(rng.integers(0, 300))) for _ in range(n)],
                }
            )
        )
        start += n
    return pa.concat_tables(parts)


def test_row_group_runs() -> None:
    assert row_group_runs([]) == []
    assert row_group_runs([1, 1, 1, 64, 64, 22, 1]) == [(1, 3), (64, 2), (22, 1), (1, 1)]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("footer_statistics", [True, False])
def test_write_file_writes_the_bytes_of_one_call_per_row_group(
    tmp_path: Path, seed: int, footer_statistics: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _chunked(300, seed)
    assert table.column("data").num_chunks > 20
    rng = np.random.default_rng(seed)
    groups: list[int] = []
    while sum(groups) < table.num_rows:  # runs of ones (video) and of 64s with short tails (steps)
        size, count = int(rng.choice([1, 5, 64])), int(rng.integers(1, 6))
        for _ in range(count):
            groups.append(min(size, table.num_rows - sum(groups)))
            if sum(groups) == table.num_rows:
                break
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    fast = write_file(
        str(tmp_path / "a"),
        table,
        groups,
        writer_id="t",
        compression="zstd",
        footer_statistics=footer_statistics,
    )
    # the write as it was: one writer call per row group
    monkeypatch.setattr(_files, "row_group_runs", lambda rows: [(r, 1) for r in rows])
    slow = write_file(
        str(tmp_path / "b"),
        table,
        groups,
        writer_id="t",
        compression="zstd",
        footer_statistics=footer_statistics,
    )
    a = (tmp_path / "a" / fast.relative_path).read_bytes()
    b = (tmp_path / "b" / slow.relative_path).read_bytes()
    assert a == b
    meta = pq.ParquetFile(tmp_path / "a" / fast.relative_path).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == groups
    assert fast.stats_json == slow.stats_json
    assert pq.read_table(tmp_path / "a" / fast.relative_path).equals(table.combine_chunks())


def _episode_rows(root: Path) -> dict[tuple[str, str], tuple[pa.Table, pa.Table]]:
    """Every committed episode's steps and video rows, found through its locator."""
    out = {}
    markers = pq.read_table([str(p) for p in _paths(root, "episodes")]).to_pylist()
    for m in markers:
        if not m["steps_file"]:
            continue
        steps = pq.ParquetFile(root / "steps" / m["steps_file"])
        offsets = np.cumsum(
            [0] + [steps.metadata.row_group(g).num_rows for g in range(steps.metadata.num_row_groups)]
        )
        first = offsets[m["steps_row_group"]]
        s = steps.read().slice(int(first), int(m["step_count"]))
        video = pq.read_table(root / "video" / m["video_file"])
        ids = video.column("episode_id").to_pylist()
        v = video.slice(min(m["video_row_groups"]), ids.count(m["episode_id"]))
        out[(m["episode_id"], m["attempt_id"])] = (s, v)
    return out


def _layout(root: Path) -> Any:
    from pi_format import LakeLayout

    return LakeLayout(str(root))


def _paths(root: Path, table: str) -> list[Path]:
    """The table's current (committed, not removed) files."""
    return [Path(uri) for uri in DeltaTable(_layout(root).table(table)).file_uris()]


def _samples(root: Path) -> list[tuple[str, int, bytes, bytes]]:
    ds = Dataset(_layout(root), spec=SPEC, seed=3)
    out = []
    for i in range(len(ds)):
        s: dict[str, Any] = ds[i]
        out.append(
            (
                str(s["episode_id"]),
                int(s["step"]),
                s["observation.images.wrist"].tobytes(),
                s["action"].tobytes(),
            )
        )
    return out


def test_a_rewrite_copies_every_episode_exactly_and_keeps_the_layout(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    # 3 episodes per group commit, 150 steps each: steps row groups of 64, 64, 22
    write_lake(
        root, episodes=9, steps=150, cameras=("front", "wrist"), size=(32, 24), group=3, garbage_attempt=False
    )
    before = _episode_rows(root)
    samples = _samples(root)
    layout = _layout(root)
    groups = read_lake_files(layout).groups
    assert len(groups) == 3
    result = rewrite_groups(layout, groups, writer_id="compact")
    assert result.files_added == {"steps": 1, "video": 1, "episodes": 1}
    after = _episode_rows(root)
    assert after.keys() == before.keys()
    for key, (steps, video) in before.items():
        assert after[key][0].equals(steps), key
        assert after[key][1].select(video.column_names).equals(video), key
    (steps_path,) = _paths(root, "steps")
    (video_path,) = _paths(root, "video")
    steps_meta = pq.ParquetFile(steps_path).metadata
    assert [steps_meta.row_group(g).num_rows for g in range(steps_meta.num_row_groups)] == [64, 64, 22] * 9
    video_meta = pq.ParquetFile(video_path).metadata
    assert video_meta.num_row_groups == video_meta.num_rows  # one video row per row group (§7.8)
    assert _samples(root) == samples


def test_a_locator_past_its_steps_file_is_refused_by_name(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    write_lake(root, episodes=2, steps=10, cameras=("front",), size=(32, 24), group=1, garbage_attempt=False)
    layout = _layout(root)
    (episodes_path, *_) = _paths(root, "episodes")
    markers = pq.read_table(episodes_path)
    index = markers.schema.get_field_index("steps_row_group")
    bad = markers.set_column(index, markers.schema.field(index), pa.array([7] * markers.num_rows, pa.int32()))
    pq.write_table(bad, episodes_path, write_page_checksum=True)
    with pytest.raises(LakeError, match="names row group 7"):
        rewrite_groups(layout, read_lake_files(layout).groups)
