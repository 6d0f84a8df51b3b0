"""Growing the metadata lake: one episode's rows under new ids, through the real commit path.

Only metadata and layout are measured on this lake (the issue allows reusing video rows there):
one short episode (simulator -> featurize, small frames) is rendered once, and every episode of
the lake is a copy of its rows under a new episode_id / attempt_id, with robot, task, success and
start time varied so that the catalog's queries select something. The lake grows by group
commits (`LakeWriter.commit_episodes`, a batch of `group_size` episodes per Delta commit of
each table), and after each group the committed episodes rows go to the catalog through
`Catalog.record_episodes`, as the stream job's sink does. At each size of `sizes` the growth
stops for measuring: the latency of the last group commits (one checkpoint interval's worth),
the Delta log and checkpoint bytes of each table, and the catalog queries; `grow` yields there
and resumes after.
"""

from __future__ import annotations

import collections
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

# The catalog queries the issue names (a selection and a group-by), as a user would write them.
SELECTION_SQL = "SELECT episode_id FROM episodes WHERE task = {task:String} AND success"
GROUP_BY_SQL = "SELECT robot_id, count(), sum(step_count) FROM episodes GROUP BY robot_id"
# What a catalog call costs before any query work (chdb: lock, open the engine, close it).
SESSION_SQL = "SELECT 1"
TABLES = ("episodes", "steps", "video")


@dataclass(frozen=True, slots=True)
class GrowConfig:
    """How the metadata lake is grown and what its (copied) episode looks like.

    Example:
        >>> GrowConfig(sizes=(1000, 10000), group_size=50)
    """

    sizes: tuple[int, ...]
    group_size: int = 50  # episodes per group commit
    # group commits timed before each size; None: one checkpoint interval of the lake's tables
    timed_groups: int | None = None
    duration_s: float = 2.0
    control_rate_hz: float = 50.0  # the simulator's (ALOHA) rate: 100 steps per episode
    camera_fps: float = 15.0
    size_px: int = 64  # tiny video: only layout and metadata are measured here
    robots: int = 64
    query_repeats: int = 7
    seed: int = 11
    # `pilake compact` (pi_jobs.maintenance.compaction.compact, production's defaults) after
    # every this many group commits, as the hourly CronJob compacts a streaming lake
    # (deploy/k8s/maintenance.yaml); 0: never (the runs before issue 33's million lake)
    compact_every: int = 0

    def __post_init__(self) -> None:
        if self.compact_every < 0:
            raise ValueError(
                f"compact_every is a count of group commits (0: never), got {self.compact_every}"
            )

    @property
    def steps_per_episode(self) -> int:
        return round(self.duration_s * self.control_rate_hz)


def template_episode(config: GrowConfig) -> Any:
    """The one simulated episode every copy is made from (a pi_format.Episode)."""
    from pi_ingest.simulator import SimulationConfig, simulate_episode

    sim = SimulationConfig(
        robots=1,
        episodes_per_robot=1,
        duration_s=config.duration_s,
        control_rate_hz=config.control_rate_hz,
        camera_fps=config.camera_fps,
        camera_width=config.size_px,
        camera_height=config.size_px,
        seed=config.seed,
    )
    return simulate_episode(sim, 0, 0).episode


def template_rows(config: GrowConfig, episode: Any = None) -> Any:
    """The one rendered episode every copy reuses (pi_format.lake.EpisodeRows), featurized from
    `episode` (default: `template_episode(config)`)."""
    from pi_jobs.stream.featurize import FeaturizeConfig, featurize

    episode = template_episode(config) if episode is None else episode
    now = time.time_ns()
    return featurize(
        episode,
        attempt_id="template",
        received_at_ns=now,
        raw_size_bytes=0,
        committed_at_ns=now,
        config=FeaturizeConfig(video_width=config.size_px, video_height=config.size_px),
    )


def _set(table: pa.Table, column: str, value: object) -> pa.Table:
    i = table.schema.get_field_index(column)
    if i < 0:
        return table
    field = table.schema.field(i)
    return table.set_column(i, field, pa.array([value] * table.num_rows, field.type))


def tasks() -> tuple[str, ...]:
    from pi_ingest.simulator import TASKS

    return tuple(TASKS)


def episode_copy(template: Any, index: int, config: GrowConfig) -> Any:
    """Episode `index` of the lake: the template's rows under new ids and varied metadata."""
    from pi_format.lake import EpisodeRows

    eid, attempt = f"scale-{index:07d}", f"scale-attempt-{index:07d}"
    all_tasks = tasks()
    episode = template.episode
    for column, value in (
        ("episode_id", eid),
        ("attempt_id", attempt),
        ("robot_id", f"robot-{index % config.robots:03d}"),
        ("task", all_tasks[index % len(all_tasks)]),
        ("success", index % 5 != 0),
        ("start_time_ns", 1_770_000_000_000_000_000 + index * 180_000_000_000),
    ):
        episode = _set(episode, column, value)
    steps = _set(_set(template.steps, "episode_id", eid), "attempt_id", attempt)
    video = _set(_set(template.video, "episode_id", eid), "attempt_id", attempt)
    return EpisodeRows(episode=episode, steps=steps, video=video)


def _percentiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"p50": None, "p99": None, "n": 0}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 3), "p99": round(p99, 3), "n": len(ordered)}


def delta_log_sizes(lake: Path) -> dict[str, dict[str, int]]:
    """Per table: bytes and files of `_delta_log` (checkpoints apart), and of the data files."""
    out: dict[str, dict[str, int]] = {}
    for table in sorted(p for p in lake.iterdir() if (p / "_delta_log").is_dir()):
        log = [p for p in (table / "_delta_log").rglob("*") if p.is_file()]
        checkpoints = sorted(
            (p for p in log if ".checkpoint." in p.name and p.name.endswith(".parquet")),
            key=lambda p: p.name,
        )
        last = checkpoints[-1].name.split(".")[0] if checkpoints else None
        data = [p for p in table.rglob("*.parquet") if "_delta_log" not in p.parts]
        out[table.name] = {
            "log_bytes": sum(p.stat().st_size for p in log),
            "log_files": len(log),
            "checkpoint_bytes": sum(p.stat().st_size for p in checkpoints),
            "checkpoints": len(checkpoints),
            # what a reader loads: the newest checkpoint (all its parts)
            "last_checkpoint_bytes": sum(
                p.stat().st_size for p in checkpoints if p.name.startswith(str(last))
            ),
            "data_files": len(data),
            "data_bytes": sum(p.stat().st_size for p in data),
        }
    return out


def catalog_queries(catalog: Any, repeats: int) -> dict[str, Any]:
    """Latency of the selection, the group-by and an empty call through `Catalog.query_arrow`:
    on one held client (`Catalog.held()`, what the targets judge: the query itself) and cold,
    each call opening and closing chdb under its lock (`<name>_cold`)."""
    params = {"task": tasks()[0]}
    out: dict[str, Any] = {}
    queries = (
        ("session_only", SESSION_SQL, None),
        ("selection", SELECTION_SQL, params),
        ("group_by", GROUP_BY_SQL, None),
    )

    def timed(name: str, sql: str, parameters: Any) -> dict[str, Any]:
        times, rows = [], 0
        for _ in range(repeats):
            start = time.perf_counter()
            rows = catalog.query_arrow(sql, parameters).num_rows
            times.append((time.perf_counter() - start) * 1e3)
        return {**_percentiles(times), "min": round(min(times), 3), "rows": rows, "sql": sql}

    for name, sql, parameters in queries:
        out[f"{name}_cold"] = timed(name, sql, parameters)
    with catalog.held():
        for name, sql, parameters in queries:
            out[name] = timed(name, sql, parameters)
    return out


def checkpoint_interval(lake: Path) -> int:
    """The episodes table's `delta.checkpointInterval` (Delta's default, 100, when unset)."""
    from deltalake import DeltaTable

    configuration = DeltaTable(str(lake / "episodes")).metadata().configuration
    return int(configuration.get("delta.checkpointInterval") or 100)


def grow(
    lake: Path,
    catalog_dir: Path,
    config: GrowConfig,
    *,
    start: int = 0,
    stop: Callable[[int], str | None] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Grow the lake to each of `config.sizes` in turn; yields (size, figures) at each. `start`:
    the episodes the lake already holds from an earlier `grow` (their ids are not reused).
    `stop(count)`, asked after every group commit (its catalog rows recorded), returns a reason
    to stop there: the figures at that count are yielded with `stopped` set, and the growth ends
    (a lake stopped so holds whole groups only, resumable with `start=count`)."""
    from pi_catalog import Catalog
    from pi_format import LakeLayout
    from pi_format.lake import LakeWriter

    template = template_rows(config)
    writer = LakeWriter(LakeLayout(str(lake)), writer_id="scale-benchmark")
    catalog = Catalog(str(catalog_dir))
    catalog.ensure_schema()
    interval = checkpoint_interval(lake)
    # A commit's cost rises with the commits since the table's last checkpoint and drops at the
    # next one (a sawtooth of period `interval`); a window of one whole period measures the
    # same thing at every size, wherever in the period the size falls.
    window = config.timed_groups or interval
    # (wall ms, episodes, CPU ms of this process, catalog record ms) per group commit
    timed: collections.deque[tuple[float, int, float, float]] = collections.deque(maxlen=window)
    count, building_s, last_log = start, 0.0, 0.0
    target = max(config.sizes)
    stopped: str | None = None
    groups, compactions = 0, []  # compactions: (seconds, episodes files after) of each run
    for size in sorted(config.sizes):
        resumed = time.monotonic()
        while count < size and stopped is None:
            n = min(config.group_size, size - count)
            batch = [episode_copy(template, count + i, config) for i in range(n)]
            t0, c0 = time.perf_counter(), time.process_time()
            result = writer.commit_episodes(batch)
            t1, c1 = time.perf_counter(), time.process_time()
            committed = set(result.committed)
            if len(committed) != n or result.duplicates:
                raise RuntimeError(
                    f"group commit of episodes {count}..{count + n - 1}: {len(committed)} committed, "
                    f"{len(result.duplicates)} duplicates (a fresh lake should take all)"
                )
            # the committed markers with their locators: what the stream sink records
            catalog.record_episodes(result.episodes, episodes_version=result.version)
            t2 = time.perf_counter()
            timed.append(((t1 - t0) * 1e3, n, (c1 - c0) * 1e3, (t2 - t1) * 1e3))
            count += n
            now = time.monotonic()
            if now - last_log > 15 or count == size:
                last_log = now
                rate = (count - start) / (building_s + now - resumed)
                print(
                    f"  lake: {count:,}/{target:,} episodes ({rate:.0f}/s, last group commit "
                    f"{(t1 - t0) * 1e3:.0f} ms + catalog {(t2 - t1) * 1e3:.0f} ms, "
                    f"ETA {(target - count) / rate:.0f} s)",
                    flush=True,
                )
            groups += 1
            if config.compact_every and groups % config.compact_every == 0:
                compactions.append(compact_now(lake))
            stopped = stop(count) if stop is not None else None
        building_s += time.monotonic() - resumed
        if count == start:  # stopped before any group: nothing new to measure
            return
        figures: dict[str, Any] = {
            "episodes": count,
            "build_s": round(building_s, 1),  # growing the lake to this size, measuring pauses left out
            "commit": {
                "group_size": config.group_size,
                "window_groups": len(timed),
                "checkpoint_interval": interval,
                "episodes_version": result.version,
                "per_episode_ms": _percentiles([t / n for t, n, _, _ in timed]),
                # CPU of this process (delta-rs threads included): less moved by other load
                "per_episode_cpu_ms": _percentiles([c / n for _, n, c, _ in timed]),
                "group_commit_ms": _percentiles([t for t, _, _, _ in timed]),
                # the sink's next step after each group commit, timed apart
                "catalog_record_ms": _percentiles([c for _, _, _, c in timed]),
                "group_commit_ms_series": [round(t) for t, _, _, _ in timed],
            },
            # the compactions on the way (their time is in build_s, not in the commit window)
            "compaction": {
                "every_groups": config.compact_every,
                "runs": len(compactions),
                "s_total": round(sum(c[0] for c in compactions), 1),
                "last_s": round(compactions[-1][0], 1) if compactions else None,
                "episodes_files_after_last": compactions[-1][1] if compactions else None,
            },
            "delta_log": delta_log_sizes(lake),
            "catalog_queries": catalog_queries(catalog, config.query_repeats),
        }
        if stopped is not None:
            figures["stopped"] = stopped
            yield count, figures
            return
        yield size, figures


def compact_now(lake: Path) -> tuple[float, int]:
    """One `pilake compact` run on the lake (production's defaults); (seconds, episodes files after)."""
    from pi_format import LakeLayout
    from pi_jobs.maintenance.compaction import compact

    t0 = time.perf_counter()
    report = compact(LakeLayout(str(lake)))
    return time.perf_counter() - t0, int(report.files_after.get("episodes", 0))


def config_dict(config: GrowConfig) -> dict[str, Any]:
    return {**asdict(config), "steps_per_episode": config.steps_per_episode}
