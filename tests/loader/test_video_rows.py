"""Reading one episode's video rows out of a file holding many episodes (pi_loader._video)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pi_loader._video import _RowGroupIndex


def test_row_group_index_picks_only_the_groups_that_can_hold_an_episode(tmp_path: Path) -> None:
    episodes = [f"ep-{i:03d}" for i in range(6) for _ in range(4)]  # sorted, 4 rows each
    table = pa.table({"episode_id": episodes, "chunk_index": list(range(len(episodes)))})
    path = str(tmp_path / "video.parquet")
    pq.write_table(table, path, row_group_size=3)
    index = _RowGroupIndex.of(path)
    assert len(index.ranges) == 8
    for episode_id in sorted(set(episodes)):
        groups = index.groups_for(episode_id)
        rows = pq.ParquetFile(path).read_row_groups(groups).to_pylist()
        assert [r["chunk_index"] for r in rows if r["episode_id"] == episode_id] == [
            i for i, e in enumerate(episodes) if e == episode_id
        ]
        assert len(groups) == 2  # 4 rows over groups of 3: never the whole file
    assert index.groups_for("ep-999") == []


def test_row_groups_without_string_statistics_are_always_read(tmp_path: Path) -> None:
    path = str(tmp_path / "video.parquet")
    pq.write_table(pa.table({"episode_id": ["a", "b", "c"]}), path, row_group_size=1, write_statistics=False)
    assert _RowGroupIndex.of(path).groups_for("zzz") == [0, 1, 2]
