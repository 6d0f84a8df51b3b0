"""The benchmark's lake, in the layout the stream job writes, and what is measured of its files.

`build_lake` commits `episodes` episodes through `LakeWriter.commit_episodes` in group commits of
`group` episodes, raw rows included (one steps, video, episodes and raw file per group commit, as
the stream sink leaves them). Episodes are `benchmarks.scale._grow.episode_copy`s of a few rendered
episodes (simulator -> featurize: real H.264 chunks and steps), the template cycling with the
index; each copy's proprio values are shifted by its index, so a locator that pointed at another
episode's steps would change the samples (the before/after check would catch it).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.scale._grow import GrowConfig, delta_log_sizes, episode_copy, template_episode, template_rows


@dataclass(frozen=True, slots=True)
class LakeSpec:
    """What `build_lake` writes.

    Example:
        >>> LakeSpec(episodes=1000, group=16)
    """

    episodes: int = 2000
    group: int = 16  # episodes per group commit: one file per table each
    templates: int = 4  # distinct rendered episodes the copies cycle through
    size_px: int = 224
    duration_s: float = 2.0  # at 50 Hz: 100 steps, 30 frames per camera
    seed: int = 11

    def grow_config(self, k: int) -> GrowConfig:
        return GrowConfig(
            sizes=(self.episodes,),
            group_size=self.group,
            duration_s=self.duration_s,
            size_px=self.size_px,
            seed=self.seed + k,
        )


@dataclass(frozen=True, slots=True)
class _Template:
    rows: Any  # pi_format.lake.EpisodeRows
    messages: list[bytes]  # the episode's wire messages (what the raw table keeps)


def _template(config: GrowConfig) -> _Template:
    from pi_format.wire.writer import encode_episode

    episode = template_episode(config)  # simulated once: its rows and its wire messages
    return _Template(rows=template_rows(config, episode), messages=encode_episode(episode))


def _shift_proprio(steps: pa.Table, offset: float) -> pa.Table:
    i = steps.schema.get_field_index("proprio")
    column = steps.column(i).combine_chunks()
    values = pc.add(column.values, pa.scalar(offset, pa.float32()))
    shifted = pa.ListArray.from_arrays(column.offsets, values, type=column.type)
    return steps.set_column(i, steps.schema.field(i), shifted)


def _raw_rows(messages: list[bytes], episode_id: str, attempt_id: str, offset: int) -> pa.Table:
    from pi_format import RAW_SCHEMA

    n = len(messages)
    return pa.Table.from_pydict(
        {
            "episode_id": [episode_id] * n,
            "chunk_index": list(range(n)),
            "kafka_topic": ["episodes"] * n,
            "kafka_partition": [0] * n,
            "kafka_offset": list(range(offset, offset + n)),
            "received_at_ns": [time.time_ns()] * n,
            "attempt_id": [attempt_id] * n,
            "message": messages,
        },
        schema=RAW_SCHEMA,
    )


def episode_variant(templates: list[_Template], index: int, spec: LakeSpec) -> tuple[Any, pa.Table]:
    """Episode `index`: (EpisodeRows, raw rows) of a template copy with shifted proprio."""
    from pi_format.lake import EpisodeRows

    template = templates[index % len(templates)]
    rows = episode_copy(template.rows, index, spec.grow_config(0))
    rows = EpisodeRows(episode=rows.episode, steps=_shift_proprio(rows.steps, index * 1e-3), video=rows.video)
    eid = rows.episode.column("episode_id")[0].as_py()
    attempt = rows.episode.column("attempt_id")[0].as_py()
    raw = _raw_rows(template.messages, eid, attempt, index * len(template.messages))
    return rows, raw


def build_lake(lake: Path, spec: LakeSpec, say: Any = print) -> dict[str, Any]:
    """Write a fresh lake at `lake` (removed first); returns the build's figures."""
    from pi_format import LakeLayout
    from pi_format.lake import LakeWriter

    if lake.exists():
        shutil.rmtree(lake)
    lake.mkdir(parents=True)
    started = time.perf_counter()
    templates = [_template(spec.grow_config(k)) for k in range(spec.templates)]
    render_s = time.perf_counter() - started
    writer = LakeWriter(LakeLayout(str(lake)), writer_id="lifecycle-benchmark")
    commit_ms: list[float] = []
    last_say = time.monotonic()
    for first in range(0, spec.episodes, spec.group):
        indices = range(first, min(first + spec.group, spec.episodes))
        pairs = [episode_variant(templates, i, spec) for i in indices]
        t0 = time.perf_counter()
        result = writer.commit_episodes([p[0] for p in pairs], raw=pa.concat_tables([p[1] for p in pairs]))
        commit_ms.append((time.perf_counter() - t0) * 1e3)
        if len(result.committed) != len(pairs):
            raise RuntimeError(f"group at {first}: {len(result.committed)} of {len(pairs)} committed")
        if time.monotonic() - last_say > 10:
            last_say = time.monotonic()
            say(f"  lake: {first + len(pairs)}/{spec.episodes} episodes")
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "render_templates_s": round(render_s, 1),
        "group_commits": len(commit_ms),
        "group_commit_ms_p50": round(statistics.median(commit_ms), 1),
        "group_commit_ms_max": round(max(commit_ms), 1),
    }


def table_figures(lake: Path) -> dict[str, Any]:
    """Per Delta table: files the current version holds, data files and bytes on disk, Delta log
    bytes and files; and the totals over the tables."""
    from deltalake import DeltaTable

    per = delta_log_sizes(lake)
    tables: dict[str, Any] = {}
    for name, sizes in per.items():
        table = DeltaTable(str(lake / name))
        tables[name] = {
            "active_files": len(table.file_uris()),
            "version": table.version(),
            "files_on_disk": sizes["data_files"],
            "data_bytes": sizes["data_bytes"],
            "log_bytes": sizes["log_bytes"],
            "log_files": sizes["log_files"],
            "checkpoints": sizes["checkpoints"],
        }
    totals = {
        key: sum(t[key] for t in tables.values())
        for key in ("active_files", "files_on_disk", "data_bytes", "log_bytes", "log_files")
    }
    return {"tables": tables, "totals": totals}


def lake_files(lake: Path) -> list[Path]:
    return sorted(p for p in lake.rglob("*") if p.is_file())


def resident_bytes(files: list[Path]) -> int | None:
    """Bytes of `files` in the page cache (util-linux `fincore`); None when it is missing."""
    if shutil.which("fincore") is None or not files:
        return None
    total = 0
    for start in range(0, len(files), 500):
        out = subprocess.run(
            [
                "fincore",
                "--bytes",
                "--noheadings",
                "--raw",
                "-o",
                "RES",
                *map(str, files[start : start + 500]),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        total += sum(int(line) for line in out.split())
    return total


def drop_pages(lake: Path) -> dict[str, Any]:
    """Flush and drop the page-cache pages of every file of the lake (data files and Delta logs):
    fsync, then posix_fadvise(DONTNEED). Cold-ish: the disk's own cache and the pages of the
    venv's libraries stay."""
    files = lake_files(lake)
    before = resident_bytes(files)
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return {
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
        "resident_bytes_before": before,
        "resident_bytes_after": resident_bytes(files),
    }
