"""The benchmark's data: one pi-lake lake, its neutral export for the peers, and a 1,000-episode lake.

The lake is made the way the stream job makes it (fleet simulator -> featurize -> LakeWriter),
with the cameras recorded at the control rate so that every loader sees one frame per step.
The export holds the frames *decoded from the lake* (so all loaders start from the same pixels),
proprio and actions, one compressed .npz per episode; the peers build their own datasets from it.
The 1,000-episode lake reuses one featurized episode's rows under new ids (only the index and
open path scale with it), committed through LakeWriter in group commits as the stream job
commits (its file layout and locators), then indexed in a chdb catalog.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from pi_format.lake import EpisodeRows


@dataclass(frozen=True, slots=True)
class DataConfig:
    """What the benchmark's episodes look like.

    Example:
        >>> DataConfig(episodes=24, duration_s=8.0, rate_hz=15.0)
    """

    episodes: int = 24
    duration_s: float = 8.0
    rate_hz: float = 15.0  # control rate == camera rate: one frame per step for every loader
    size_px: int = 224
    seed: int = 7
    # the lake's video: FeaturizeConfig's defaults (10-frame rows, intra-only)
    chunk_frames: int = 10
    keyframe_interval: int = 1

    @property
    def key(self) -> str:
        return (
            f"e{self.episodes}-d{self.duration_s:g}-r{self.rate_hz:g}-s{self.size_px}-seed{self.seed}"
            f"-c{self.chunk_frames}-k{self.keyframe_interval}"
        )


def _simulation(config: DataConfig, episodes: int, duration_s: float) -> object:
    from pi_ingest.simulator import SimulationConfig

    return SimulationConfig(
        robots=1,
        episodes_per_robot=episodes,
        duration_s=duration_s,
        control_rate_hz=config.rate_hz,
        camera_fps=config.rate_hz,
        camera_width=config.size_px,
        camera_height=config.size_px,
        seed=config.seed,
    )


def _featurized(config: DataConfig, sim: object, index: int) -> object:
    from pi_ingest.simulator import SimulationConfig, simulate_episode
    from pi_jobs.stream.featurize import FeaturizeConfig, featurize

    assert isinstance(sim, SimulationConfig)
    episode = simulate_episode(sim, 0, index).episode
    now = time.time_ns()
    return featurize(
        episode,
        attempt_id=f"bench-{index}",
        received_at_ns=now,
        raw_size_bytes=0,
        committed_at_ns=now,
        config=FeaturizeConfig(
            video_width=sim.camera_width,
            video_height=sim.camera_height,
            chunk_frames=config.chunk_frames,
            keyframe_interval=config.keyframe_interval,
        ),
    )


def build_lake(config: DataConfig, root: Path) -> Path:
    """The benchmark lake under root/lake (built once per config, reused after)."""
    from pi_format import LakeLayout
    from pi_format.lake import EpisodeRows, LakeWriter

    lake = root / "lake"
    marker = root / "lake.done.json"
    if marker.exists() and json.loads(marker.read_text()) == asdict(config):
        return lake
    shutil.rmtree(lake, ignore_errors=True)
    writer = LakeWriter(LakeLayout(str(lake)))
    sim = _simulation(config, config.episodes, config.duration_s)
    start = time.monotonic()
    for i in range(config.episodes):
        featurized = _featurized(config, sim, i)
        assert isinstance(featurized, EpisodeRows)
        writer.commit_episode(featurized)
        print(f"  lake: episode {i + 1}/{config.episodes} ({time.monotonic() - start:.0f} s)", flush=True)
    marker.write_text(json.dumps(asdict(config)))
    return lake


@dataclass(frozen=True, slots=True)
class LakeEpisode:
    """One committed episode of the benchmark lake, read straight from Delta (no pi_loader)."""

    episode_id: str
    cameras: tuple[str, ...]
    state: np.ndarray  # float32 [T, D]
    action: np.ndarray  # float32 [T, A]
    camera_frame_index: np.ndarray  # int32 [T, cameras]
    chunks: dict[str, list[dict[str, object]]]  # camera -> rows (first_frame, frame_count, data...)


def read_lake(lake: Path) -> list[LakeEpisode]:
    """Every committed episode (sorted by id) with its steps and encoded video chunks."""
    from pi_format.lake import LakeLayout, read_committed, read_visible

    layout = LakeLayout(str(lake))
    committed = read_committed(layout, ["attempt_id", "cameras"])
    steps = read_visible(layout, "steps").sort_by([("episode_id", "ascending"), ("step_index", "ascending")])
    video = read_visible(
        layout,
        "video",
        ["episode_id", "camera", "first_frame", "frame_count", "width", "height", "data"],
    ).sort_by([("episode_id", "ascending"), ("camera", "ascending"), ("first_frame", "ascending")])
    chunks: dict[str, dict[str, list[dict[str, object]]]] = {}
    for row in video.to_pylist():
        chunks.setdefault(row["episode_id"], {}).setdefault(row["camera"], []).append(row)
    by_episode: dict[str, list[int]] = {}
    for i, e in enumerate(steps.column("episode_id").to_pylist()):
        by_episode.setdefault(e, []).append(i)
    out = []
    for row in committed.to_pylist():
        part = steps.take(by_episode[row["episode_id"]])
        out.append(
            LakeEpisode(
                episode_id=row["episode_id"],
                cameras=tuple(row["cameras"]),
                state=np.array(part.column("proprio").to_pylist(), np.float32),
                action=np.array(part.column("action").to_pylist(), np.float32),
                camera_frame_index=np.array(part.column("camera_frame_index").to_pylist(), np.int32),
                chunks=chunks[row["episode_id"]],
            )
        )
    return out


def export_episodes(config: DataConfig, lake: Path, root: Path) -> Path:
    """root/export/<episode>.npz with frames (per camera, [T, H, W, 3] uint8), state, action."""
    from pi_format.video import decode_chunk_rgb

    out = root / "export"
    marker = root / "export.done.json"
    if marker.exists() and json.loads(marker.read_text()) == asdict(config):
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    episodes = read_lake(lake)
    for n, ep in enumerate(episodes):
        arrays: dict[str, np.ndarray] = {
            "state": ep.state,
            "action": ep.action,
            "cameras": np.array(ep.cameras),
            "fps": np.array(config.rate_hz),
        }
        for k, camera in enumerate(ep.cameras):
            frames = np.stack(
                [
                    f
                    for c in ep.chunks[camera]
                    for f in decode_chunk_rgb(c["data"], height=c["height"], width=c["width"])  # type: ignore[arg-type]
                ]
            )
            arrays[f"frames_{camera}"] = frames[ep.camera_frame_index[:, k]]
        np.savez(out / f"{n:05d}_{ep.episode_id}.npz", **arrays)
        print(f"  export: episode {n + 1}/{len(episodes)}", flush=True)
    marker.write_text(json.dumps(asdict(config)))
    return out


def _renamed(table: pa.Table, column: str, value: str) -> pa.Table:
    index = table.schema.get_field_index(column)
    return table.set_column(index, table.schema.field(index), pa.array([value] * table.num_rows, pa.string()))


def _copies(template: object, count: int, first: int) -> Iterator[EpisodeRows]:
    from pi_format.lake import EpisodeRows

    assert isinstance(template, EpisodeRows)
    for i in range(first, first + count):
        eid, attempt = f"big-{i:06d}", f"big-attempt-{i:06d}"
        episode, steps, video = (
            _renamed(_renamed(t, "episode_id", eid), "attempt_id", attempt)
            for t in (template.episode, template.steps, template.video)
        )
        yield EpisodeRows(episode=episode, steps=steps, video=video)


# Episodes per group commit of the big lake: what a stream-job sink commits at once under load.
BIG_LAKE_GROUP = 32


def build_big_lake(config: DataConfig, root: Path, episodes: int) -> tuple[Path, Path]:
    """A lake of `episodes` copies of one short episode, and its chdb catalog: (lake, catalog)."""
    from pi_catalog import Catalog
    from pi_format import LakeLayout
    from pi_format.lake import LakeWriter

    lake, catalog = root / f"big{episodes}" / "lake", root / f"big{episodes}" / "catalog"
    marker = root / f"big{episodes}.done.json"
    built_as = {**asdict(config), "layout": f"LakeWriter group commits of {BIG_LAKE_GROUP}"}
    if marker.exists() and json.loads(marker.read_text()) == built_as:
        return lake, catalog
    shutil.rmtree(lake.parent, ignore_errors=True)
    layout = LakeLayout(str(lake))
    template = _featurized(config, _simulation(config, 1, 4.0), 0)
    # Through the lake's one commit path, so files, row groups and locators are the stream job's.
    writer = LakeWriter(layout, writer_id="bench-big")
    for first in range(0, episodes, BIG_LAKE_GROUP):
        writer.commit_episodes(list(_copies(template, min(BIG_LAKE_GROUP, episodes - first), first)))
    indexed = Catalog(str(catalog)).rebuild_from_lake(layout)
    if indexed != episodes:
        raise RuntimeError(f"catalog indexed {indexed} episodes, expected {episodes}")
    marker.write_text(json.dumps(built_as))
    return lake, catalog
