"""The copy benchmark's lake: large enough that a copy's fixed costs (Delta commits, rows, the
pin) do not dominate, built through the real write path.

Encoding hundreds of MB of video takes tens of minutes on a small host, so `distinct` episodes
are simulated and featurized (`benchmarks.loader._data`), and each is committed `replicas`
times under fresh episode and attempt ids with `LakeWriter.commit_episodes` in groups of
`group` (the stream job's group commits): the files, their row groups, page CRCs and Delta log
are what the writer makes of real rows; only the frames repeat.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class CopyLakeConfig:
    """What the copy benchmark's lake holds.

    Example:
        >>> CopyLakeConfig(distinct=2, replicas=32, duration_s=60.0)
    """

    distinct: int = 2  # episodes simulated and encoded
    replicas: int = 32  # commits of each under fresh ids: distinct * replicas episodes
    duration_s: float = 60.0  # ~4.4 MB of 224 px intra-only video per minute
    size_px: int = 224
    group: int = 4  # episodes per group commit: one steps and one video file per group

    @property
    def key(self) -> str:
        return f"x{self.distinct}-r{self.replicas}-d{self.duration_s:g}-s{self.size_px}-g{self.group}"


def _renamed(rows: Any, episode_id: str, attempt_id: str) -> Any:
    import pyarrow as pa
    from pi_format.lake import EpisodeRows

    def rename(table: pa.Table) -> pa.Table:
        for column, value in (("episode_id", episode_id), ("attempt_id", attempt_id)):
            if column in table.column_names:
                index = table.column_names.index(column)
                field = table.schema.field(index)
                table = table.set_column(index, field, pa.array([value] * table.num_rows, field.type))
        return table

    return EpisodeRows(episode=rename(rows.episode), steps=rename(rows.steps), video=rename(rows.video))


def build_copy_lake(config: CopyLakeConfig, root: Path) -> Path:
    """The lake under root/lake (built once per config, reused after)."""
    from pi_format import LakeLayout
    from pi_format.lake import LakeWriter

    from benchmarks.loader._data import DataConfig, _featurized, _simulation

    lake = root / "lake"
    marker = root / "lake.done.json"
    if marker.exists() and json.loads(marker.read_text()) == asdict(config):
        return lake
    shutil.rmtree(lake, ignore_errors=True)
    data = DataConfig(episodes=config.distinct, duration_s=config.duration_s, size_px=config.size_px)
    sim = _simulation(data, config.distinct, config.duration_s)
    start = time.monotonic()
    base = [_featurized(data, sim, i) for i in range(config.distinct)]
    print(
        f"  copy lake: {config.distinct} episodes featurized ({time.monotonic() - start:.0f} s)", flush=True
    )
    writer = LakeWriter(LakeLayout(str(lake)))
    batch = []
    for r in range(config.replicas):
        for i, rows in enumerate(base):
            batch.append(_renamed(rows, f"copy-{r:04d}-{i:02d}", f"copy-attempt-{r:04d}-{i:02d}"))
            if len(batch) == config.group:
                writer.commit_episodes(batch)
                batch = []
    if batch:
        writer.commit_episodes(batch)
    print(f"  copy lake: {config.distinct * config.replicas} episodes ({time.monotonic() - start:.0f} s)")
    marker.write_text(json.dumps(asdict(config)))
    return lake
