"""The throughput leg's data and legs: genuinely distinct episodes of real rendered video.

Every episode is rendered by the fleet simulator and featurized as the stream job does
(`benchmarks.loader._data`'s `_simulation` / `_featurized`, cameras at the control rate), in
`jobs` processes; the rows are kept as Arrow IPC files under `rendered/` (rendering is the
expensive part, ~1.3 s of CPU per 4 s episode here). The lake is then written from them
through `LakeWriter.commit_episodes` in groups, fresh each run (so it has the layout of the
writer as it is now); the export for the peers and LeRobot's v3 dataset are built from it once
per configuration (`benchmarks.loader._data.export_episodes`, `benchmarks.loader.run.build_peer`).

The legs are the loader benchmark's own (`benchmarks.loader._legs` for pi_loader and the raw
decode limit, `peers/lerobot_leg.py` in the peers' venv), each in its own process through
`benchmarks.loader._runner.run_leg`, all on this lake in one run.
"""

from __future__ import annotations

import multiprocessing
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks._figures import MIN_REPEATS, interleaved, ratio, spread
from benchmarks.loader._data import DataConfig

LOADER_HERE = Path(__file__).resolve().parent.parent / "loader"
PARTS = ("episode", "steps", "video")
LEG_LABELS = {"raw": "raw decode limit", "pi_loader": "pi_loader", "lerobot": "LeRobotDataset v3"}


def _render_one(task: tuple[dict[str, Any], int, str]) -> int:
    """Render and featurize episode `index` into out/<index>.<part>.arrow (runs in a pool)."""
    from benchmarks.loader._data import _featurized, _simulation

    fields, index, out = task
    config = DataConfig(**fields)
    rows: Any = _featurized(config, _simulation(config, config.episodes, config.duration_s), index)
    for part in PARTS:
        path = Path(out) / f"{index:05d}.{part}.arrow"
        tmp = path.with_suffix(".tmp")
        table: pa.Table = getattr(rows, part)
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        tmp.rename(path)
    return index


def render(config: DataConfig, root: Path, jobs: int) -> Path:
    """root/rendered: the featurized rows of every episode (kept across runs per configuration)."""
    out = root / "rendered"
    out.mkdir(parents=True, exist_ok=True)
    todo = [
        i for i in range(config.episodes) if not all((out / f"{i:05d}.{p}.arrow").exists() for p in PARTS)
    ]
    if not todo:
        return out
    print(f"  rendering {len(todo)} episodes in {jobs} processes", flush=True)
    start = time.monotonic()
    tasks = [(asdict(config), i, str(out)) for i in todo]
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for done, _ in enumerate(pool.imap_unordered(_render_one, tasks), start=1):
            if done % max(1, len(todo) // 10) == 0 or done == len(todo):
                elapsed = time.monotonic() - start
                print(
                    f"  rendered {done}/{len(todo)} ({elapsed:.0f} s, ETA "
                    f"{elapsed / done * (len(todo) - done):.0f} s)",
                    flush=True,
                )
    return out


def _read(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def build_lake(config: DataConfig, root: Path, rendered: Path, group_size: int) -> Path:
    """root/lake, written fresh from the rendered rows by group commits."""
    from pi_format import LakeLayout
    from pi_format.lake import EpisodeRows, LakeWriter

    lake = root / "lake"
    shutil.rmtree(lake, ignore_errors=True)
    writer = LakeWriter(LakeLayout(str(lake)), writer_id="scale-benchmark-real")
    start = time.monotonic()
    for first in range(0, config.episodes, group_size):
        batch = [
            EpisodeRows(**{p: _read(rendered / f"{i:05d}.{p}.arrow") for p in PARTS})
            for i in range(first, min(first + group_size, config.episodes))
        ]
        writer.commit_episodes(batch)
    print(
        f"  real lake: {config.episodes} episodes committed in {time.monotonic() - start:.0f} s", flush=True
    )
    return lake


def prepare(
    config: DataConfig, root: Path, *, jobs: int, group_size: int, peers: Path | None
) -> tuple[Path, Path | None, Path | None, dict[str, float]]:
    """(lake, peers' python or None, LeRobot dataset or None, seconds per stage)."""
    from benchmarks.loader._data import export_episodes

    timings: dict[str, float] = {}
    t = time.monotonic()
    rendered = render(config, root, jobs)
    timings["render_s"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    lake = build_lake(config, root, rendered, group_size)
    timings["lake_s"] = round(time.monotonic() - t, 1)
    if peers is None:
        return lake, None, None, timings
    from benchmarks.loader.run import build_peer, ensure_peers

    t = time.monotonic()
    export = export_episodes(config, lake, root)
    timings["export_s"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    python = ensure_peers(peers)
    lerobot = root / "lerobot"
    build_peer(python, "lerobot_leg.py", export, lerobot, config, [])
    timings["lerobot_build_s"] = round(time.monotonic() - t, 1)
    return lake, python, lerobot, timings


def leg_command(
    name: str, *, lake: Path, python: Path | None, lerobot: Path | None, horizon: int
) -> list[str]:
    """The command of one leg, as benchmarks/loader/run.py builds it."""
    if name == "raw":  # the limit: decode each frame up to itself, swscale RGB as pi_loader does
        return [sys.executable, "-m", "benchmarks.loader._legs", "raw", "--lake", str(lake), "--rgb24"]
    if name == "pi_loader":
        cmd = [sys.executable, "-m", "benchmarks.loader._legs", "pi_loader", "--lake", str(lake)]
        return [*cmd, "--horizon", str(horizon)]
    if name == "lerobot":
        assert python is not None and lerobot is not None
        script = str(LOADER_HERE / "peers" / "lerobot_leg.py")
        return [str(python), script, "run", "--root", str(lerobot), "--horizon", str(horizon)]
    raise ValueError(f"unknown leg {name!r}")


def run_legs(
    names: list[str],
    workers: list[int],
    *,
    lake: Path,
    python: Path | None,
    lerobot: Path | None,
    horizon: int,
    batch_size: int,
    measure_s: float,
    repeats: int,
    env: dict[str, str],
) -> list[dict[str, Any]]:
    """Every (workers, leg) once per repeat, interleaved (`benchmarks._figures.interleaved`: the
    order rotated each repeat), `repeats` (>= 3) times; each result as run_leg returns it."""
    from benchmarks.loader._runner import run_leg

    common = ["--batch-size", str(batch_size), "--warmup-batches", "3", "--measure-s", str(measure_s)]
    legs = []
    for repeat, (w, name) in interleaved([(w, n) for w in workers for n in names], repeats):
        cmd = leg_command(name, lake=lake, python=python, lerobot=lerobot, horizon=horizon)
        result = run_leg([*cmd, "--workers", str(w), *common], timeout_s=measure_s + 300, env=env)
        result.update(loader=name, workers=w, repeat=repeat)
        legs.append(result)
        if "error" in result:
            print(f"  {LEG_LABELS[name]:>20} x{w}: FAILED {result['error'][-800:]}", flush=True)
        else:
            print(
                f"  {LEG_LABELS[name]:>20} x{w}: {result['samples_per_s']:8.1f} samples/s, "
                f"CPU {result['cpu_ms_per_sample'] or 0:.2f} ms/sample, "
                f"peak {result['peak_memory_mb']:.0f} MB (repeat {repeat + 1})",
                flush=True,
            )
    return legs


def _series(legs: list[dict[str, Any]], field: str) -> dict[str, dict[str, dict[int, float]]]:
    """{workers: {leg: {repeat: value of `field`}}}, failed legs left out."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for leg in legs:
        if "error" in leg or leg.get(field) is None:
            continue
        out.setdefault(str(leg["workers"]), {}).setdefault(leg["loader"], {})[int(leg["repeat"])] = float(
            leg[field]
        )
    return out


def spreads(legs: list[dict[str, Any]], field: str = "samples_per_s") -> dict[str, dict[str, Any]]:
    """{workers: {leg: median and spread of `field` over its repeats}} (`benchmarks._figures`);
    a leg with fewer than 3 successful repeats is left out (its `error`s say why)."""
    out: dict[str, dict[str, Any]] = {}
    for w, per in _series(legs, field).items():
        for name, values in per.items():
            if len(values) >= MIN_REPEATS:
                out.setdefault(w, {})[name] = spread(
                    [values[k] for k in sorted(values)], what=f"{name} x{w} {field}"
                ).to_json()
    return out


def ratios(legs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{workers: pi_loader / LeRobot and pi_loader / the decode limit}, each the median and
    spread of the per-repeat ratios of the interleaved legs (repeat i with repeat i), in
    samples/s and (less moved by other load on the machine) in CPU per sample; None where a leg
    is missing or fewer than 3 repeats of both succeeded."""
    rates, cpu = _series(legs, "samples_per_s"), _series(legs, "cpu_ms_per_sample")

    def paired(per: dict[str, dict[int, float]], other: str, inverse: bool) -> dict[str, Any] | None:
        mine, theirs = per.get("pi_loader", {}), per.get(other, {})
        both = sorted(set(mine) & set(theirs))
        if len(both) < MIN_REPEATS:
            return None
        top, bottom = [mine[k] for k in both], [theirs[k] for k in both]
        if inverse:  # CPU per sample: less is better, so the ratio is theirs / mine
            top, bottom = bottom, top
        return ratio(top, bottom, what=f"pi_loader / {other}").to_json()

    return {
        w: {
            "pi_loader_vs_lerobot": paired(r, "lerobot", False),
            "pi_loader_vs_limit": paired(r, "raw", False),
            "pi_loader_vs_lerobot_cpu": paired(cpu.get(w, {}), "lerobot", True),
            "pi_loader_vs_limit_cpu": paired(cpu.get(w, {}), "raw", True),
        }
        for w, r in rates.items()
    }
