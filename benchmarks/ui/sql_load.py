"""`pilake ui` under heavy user SQL (issue 31): do the pages that run no user SQL stay under 1 s
while 6 heavy queries run, and does the Query page bound them?

    python -m benchmarks.ui.sql_load --quick     # a lake of 1,000 episodes (~1-2 min)
    python -m benchmarks.ui.sql_load --size 10000

The lake and its real chdb catalog are grown by benchmarks/ui/_lake.py (the real write path, as
benchmarks/ui/run.py). The app is `pi_jobs.ui.create_app` with its default UiConfig (2 user
queries at once, 4 more waiting up to 10 s, 10 s each, 512 MiB each), served through starlette's
TestClient in this process (server time, no network). Each heavy query is a three-way cross
join of the catalog's episodes hashing their ids (1e9 rows at 1,000 episodes), which runs into
its time limit.

Legs, interleaved by `benchmarks._figures.interleaved` where they repeat:
* idle: each page (Overview, Quarantine, Pins, an Episode, a small Query) with nothing else
  running, `--repeats` times;
* loaded: 6 heavy queries sent at once from 6 threads; while any of them is still running the
  pages are requested in turn, again and again; then the same page list once more after they
  ended. Recorded: every page's time during the load (median, spread, max, count), each heavy
  query's status (200, 400 = ClickHouse's time limit, 503 = refused by the gate) and when it
  ended, the most queries the gate let run at once, the process's peak RSS.

Before issue 31 the Query page ran users' SQL on the engine every other page uses, one after
another: six heavy queries ended at 10, 20 ... 60 s and the Overview took 59 s meanwhile.
Writes OUT/ui_sql_load.json; prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from benchmarks._figures import MIN_REPEATS, interleaved, judge, spread
from benchmarks.ui._lake import LakeConfig, LakeGrower

TARGET_S = 1.0
HEAVY_QUERIES = 6
HEAVY_SQL = (
    "SELECT count() AS n FROM episodes AS a, episodes AS b, episodes AS c "
    "WHERE sipHash64(a.episode_id, b.episode_id, c.episode_id) % 7 = 0"
)


def _pages() -> dict[str, str]:
    small = "SELECT episode_id, task FROM episodes WHERE success ORDER BY episode_id"
    return {
        "overview": "/",
        "quarantine": "/quarantine",
        "pins": "/pins",
        "episode": "/episode/{episode}",
        "query_small": "/query?sql=" + quote(small),
    }


def _measure(lake: Path, catalog: Path, repeats: int, cache: Path) -> dict[str, Any]:
    from pi_catalog import Catalog
    from pi_jobs.ui import UiConfig, create_app
    from starlette.testclient import TestClient

    config = UiConfig(lake_root=str(lake), catalog=str(catalog), cache_dir=cache)
    app = create_app(config, Catalog(str(catalog)))
    gate = app.pages.sql.gate
    episode = Catalog(str(catalog)).query_arrow("SELECT min(episode_id) AS e FROM episodes").column("e")[0]
    pages = {name: url.format(episode=quote(str(episode), safe="")) for name, url in _pages().items()}

    def timed(client: Any, url: str) -> tuple[float, int]:
        started = time.perf_counter()
        status = client.get(url).status_code
        return time.perf_counter() - started, status

    result: dict[str, Any] = {"config": {k: getattr(config, k) for k in config.__slots__ if k != "token"}}
    result["config"] = {k: str(v) if isinstance(v, Path | tuple) else v for k, v in result["config"].items()}
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        for url in pages.values():  # warm: the engine, its function list, the Delta tables
            timed(client, url)
        idle: dict[str, list[float]] = {name: [] for name in pages}
        for _, name in interleaved(list(pages), repeats):
            seconds, status = timed(client, pages[name])
            if status != 200:
                raise RuntimeError(f"{name} answered {status} with nothing else running")
            idle[name].append(seconds)
        heavy: list[dict[str, Any]] = []
        lock = threading.Lock()
        started = time.perf_counter()

        def run_heavy(index: int) -> None:
            status = timed(client, "/query?sql=" + quote(HEAVY_SQL))[1]
            with lock:
                heavy.append(
                    {"index": index, "status": status, "ended_s": round(time.perf_counter() - started, 3)}
                )

        threads = [threading.Thread(target=run_heavy, args=(i,)) for i in range(HEAVY_QUERIES)]
        for thread in threads:
            thread.start()
        while gate.running == 0 and any(t.is_alive() for t in threads):
            time.sleep(0.005)
        loaded: dict[str, list[float]] = {name: [] for name in pages}
        statuses: dict[str, list[int]] = {name: [] for name in pages}
        while any(t.is_alive() for t in threads):
            for name, url in pages.items():
                seconds, status = timed(client, url)
                loaded[name].append(seconds)
                statuses[name].append(status)
        for thread in threads:
            thread.join()
        after = {name: timed(client, url)[0] for name, url in pages.items()}
    result["idle"] = {n: {"seconds": spread(v, what=n).to_json()} for n, v in idle.items()}
    result["loaded"] = {}
    for name in pages:
        values = loaded[name]
        figure = spread(values, what=name) if len(values) >= MIN_REPEATS else None
        result["loaded"][name] = {
            "seconds": figure.to_json() if figure else None,
            "max_s": round(max(values), 4) if values else None,
            "requests": len(values),
            "statuses": sorted(set(statuses[name])),
            # user SQL pages may be refused while the gate is full; the others must answer
            "judged": judge(figure, TARGET_S, higher_is_better=False)
            if figure and name != "query_small"
            else None,
        }
    result["after_load"] = {n: round(v, 4) for n, v in after.items()}
    result["heavy"] = sorted(heavy, key=lambda h: h["ended_s"])
    result["gate_most_running"] = gate.most_running
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1000, help="lake size in episodes")
    parser.add_argument("--quick", action="store_true", help="a lake of 1,000 episodes")
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS)
    parser.add_argument("--out", default=None, help="output folder (default benchmarks/ui/results/<time>)")
    parser.add_argument("--workdir", default=None, help="where the lake grows (default a temp dir)")
    args = parser.parse_args(argv)
    size = 1000 if args.quick else args.size
    out = Path(args.out or Path(__file__).resolve().parent / "results" / time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="pilake-ui-sql-"))
    config = LakeConfig()
    grower = LakeGrower(work / "lake", work / "catalog", config, say=lambda line: print(line, flush=True))
    try:
        grower.grow_to(size)
    finally:
        grower.close()
    result: dict[str, Any] = {
        "benchmark": "ui_sql_load",
        "argv": sys.argv,
        "size": size,
        "heavy_sql": HEAVY_SQL,
        "heavy_queries": HEAVY_QUERIES,
        "target_s": TARGET_S,
        "machine": {"cpus": os.cpu_count(), "loadavg_start": list(os.getloadavg())},
        "served": "starlette TestClient in this process (server time, no network)",
    }
    result.update(_measure(work / "lake", work / "catalog", args.repeats, work / "cache"))
    result["machine"]["loadavg_end"] = list(os.getloadavg())
    (out / "ui_sql_load.json").write_text(json.dumps(result, indent=2))
    head = f"{'idle median s':>14} {'loaded median s':>16} {'loaded max s':>13} {'n':>4}"
    print(f"\n{'page':<12} {head}  statuses")
    for name, row in result["loaded"].items():
        idle = result["idle"][name]["seconds"]["median"]
        median = row["seconds"]["median"] if row["seconds"] else float("nan")
        print(f"{name:<12} {idle:>14.4f} {median:>16.4f} {row['max_s'] or float('nan'):>13.4f} "
              f"{row['requests']:>4}  {row['statuses']}")  # fmt: skip
    print("heavy queries (status, ended at s):", [(h["status"], h["ended_s"]) for h in result["heavy"]])
    print(f"most running at once: {result['gate_most_running']}; peak RSS {result['peak_rss_mb']} MB")
    print(f"wrote {out / 'ui_sql_load.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
