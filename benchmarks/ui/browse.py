"""Server time of the Episodes and Dataset pages (issue 36) at 100,000 episodes.

    python -m benchmarks.ui.browse                # 100,000 episodes (~3-5 min to build)
    python -m benchmarks.ui.browse --episodes 10000 --repeats 3

These pages read the catalog (the list, its count and prev/next; the Dataset page's histogram,
success tables and sample) and the lake's `episodes` table (the Dataset page's sketches, a pin's
rows): not a step, not a frame. So the lake built here is what they read and no more: a real
chdb catalog filled by `Catalog.record_episodes` and a real Delta `episodes` table of the same
rows (files of 2,000 rows sorted by episode id, as `pilake compact` leaves them), every row
with real statistics columns (`pi_format.stats.episode_stat_columns` of 200 random episodes of
50-400 steps and 14 dimensions, reused round robin, so the 2 kB sketches are real bytes); no
steps or video tables (benchmarks/ui/run.py measures the other pages on a full lake). A pin of
every success is made by `create_dataset`. Each page is requested through starlette's
TestClient `--repeats` times, interleaved; reported as median and spread, judged against 1 s.
Writes OUT/ui_browse.json; prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

import numpy as np
import pyarrow as pa

from benchmarks._figures import MIN_REPEATS, interleaved, judge, spread

TARGET_S = 1.0
TEMPLATES = 200
DIMS = 14
TASKS = ("pick", "place", "stack", "wipe", "fold", "pour")


def _rows(n: int, seed: int = 36) -> pa.Table:
    from pi_format import EPISODES_SCHEMA
    from pi_format.stats import episode_stat_columns

    rng = np.random.default_rng(seed)
    templates = []
    for _ in range(TEMPLATES):
        steps = int(rng.integers(50, 401))
        values = (rng.normal(size=(steps, DIMS)) * np.linspace(0.1, 3, DIMS)).astype(np.float32)
        stats = episode_stat_columns("proprio", values) | episode_stat_columns(
            "action", values[:, ::-1].copy()
        )
        templates.append((steps, stats))
    now = time.time_ns()
    rows = []
    for i in range(n):
        steps, stats = templates[i % TEMPLATES]
        rows.append(
            {
                "episode_id": f"scale-{i:07d}",
                "attempt_id": f"a-{i}",
                "robot_id": f"robot-{i % 40:03d}",
                "robot_type": "aloha",
                "task": TASKS[(i // 7) % len(TASKS)],
                "start_time_ns": now - (n - i) * 30_000_000_000,
                "control_rate_hz": 50.0,
                "success": bool((i * 2654435761) % 100 < 70),
                "tags": [],
                "step_count": steps,
                "duration_s": steps / 50.0,
                "proprio_dim": DIMS,
                "action_dim": DIMS,
                "cameras": ["cam_high"],
                "camera_fps": [30.0],
                "video_width": 64,
                "video_height": 64,
                "video_chunk_frames": 30,
                "raw_size_bytes": 1_000_000,
                "received_at_ns": now - (n - i) * 1_000_000,
                "committed_at_ns": now - (n - i) * 1_000_000 + 1,
                **stats,
            }
        )
    names = EPISODES_SCHEMA.names
    return pa.Table.from_pylist([{k: r.get(k) for k in names} for r in rows], schema=EPISODES_SCHEMA)


def build(root: Path, n: int) -> tuple[str, str]:
    from deltalake import write_deltalake
    from pi_catalog import Catalog
    from pi_format import LakeLayout
    from pi_format.lake import ensure_lake_tables
    from pi_jobs.maintenance.datasets import create_dataset

    layout = LakeLayout(str(root / "lake"))
    ensure_lake_tables(layout)
    catalog = Catalog(str(root / "catalog"))
    rows = _rows(n)
    for start in range(0, n, 10_000):
        catalog.record_episodes(rows.slice(start, 10_000), episodes_version=0)
    for start in range(0, n, 2_000):
        write_deltalake(layout.episodes, rows.slice(start, 2_000), mode="append")
    catalog.close()
    create_dataset(
        layout, "success", sql="SELECT episode_id FROM episodes WHERE success", catalog=str(root / "catalog")
    )
    return layout.root, str(root / "catalog")


def pages(n: int) -> dict[str, str]:
    middle = f"scale-{n // 2:07d}"
    sql = quote("SELECT episode_id FROM episodes WHERE task = 'stack' AND step_count > 100")
    return {
        "episodes": "/episodes",
        "episodes_filtered_page_10": "/episodes?success=yes&min_steps=100&sort=step_count&order=asc&page=10",
        "episodes_robot_annotation": "/episodes?robot=robot-003&annotation=instruction",
        "episodes_since": "/episodes?since=2000-01-01&sort=duration_s",
        # the Episode page's prev/next queries (its steps and video are not in this lake)
        "neighbours_of_an_episode": f"{middle}?robot=robot-{(n // 2) % 40:03d}&sort=step_count",
        "dataset_all": "/dataset",
        "dataset_filter": "/dataset?robot=robot-007&success=yes",
        "dataset_sql": f"/dataset?sql={sql}",
        "dataset_pin_success": "/dataset?pin=success",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS)
    parser.add_argument("--out", default="benchmarks/baselines")
    args = parser.parse_args(argv)
    from pi_catalog import Catalog
    from pi_jobs.ui import UiConfig, create_app
    from pi_jobs.ui._episodes import EpisodeFilter, neighbours
    from starlette.testclient import TestClient

    with tempfile.TemporaryDirectory(prefix="pilake-ui-browse-") as tmp:
        t0 = time.perf_counter()
        lake, catalog = build(Path(tmp), args.episodes)
        built_s = time.perf_counter() - t0
        print(f"built {args.episodes:,} episodes in {built_s:.0f} s", flush=True)
        ui = UiConfig(lake_root=lake, catalog=catalog, cache_dir=Path(tmp) / "cache")
        urls = pages(args.episodes)
        times: dict[str, list[float]] = {name: [] for name in urls}
        with TestClient(create_app(ui, Catalog(catalog)), base_url="http://127.0.0.1:8765") as client:
            pages_ = client.app.pages  # type: ignore[attr-defined]

            def get(name: str) -> None:
                if name.startswith("neighbours"):
                    episode_id, query = urls[name].split("?")
                    flt = EpisodeFilter.from_params(dict(parse_qsl(query)))
                    with pages_.catalog_lock:
                        before, after = neighbours(pages_.catalog, flt, episode_id)
                    if before is None or after is None:
                        raise RuntimeError(f"{name}: no neighbours of {episode_id}")
                    return
                response = client.get(urls[name])
                if response.status_code != 200:
                    raise RuntimeError(f"{name}: HTTP {response.status_code}: {response.text[-1500:]}")

            for name in urls:  # warm
                get(name)
            for _, name in interleaved(list(urls), args.repeats):
                t = time.perf_counter()
                get(name)
                times[name].append(time.perf_counter() - t)
    out: dict[str, Any] = {
        "episodes": args.episodes,
        "build_s": round(built_s, 1),
        "load_average": os.getloadavg(),
        "layout": "catalog + episodes table only (no steps/video), files of 2,000 rows sorted by id",
        "pages": {},
    }
    print(f"{'page':40s} {'median s':>9s} {'min-max':>15s}  target < {TARGET_S} s")
    for name, values in times.items():
        figure = spread(values, what=name)
        verdict = judge(figure, TARGET_S, higher_is_better=False)
        out["pages"][name] = {"url": urls[name], "seconds": figure.to_json(), "target": verdict}
        print(f"{name:40s} {figure.median:9.3f} {figure.low:7.3f}-{figure.high:<7.3f}  {verdict['verdict']}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "ui_browse.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
