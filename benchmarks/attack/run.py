"""Attack benchmark: the wire fuzz generator (`pi_jobs.local.faults.fuzz_plan`) run long, by
seed, through the real broker into `pilake stream`, beside a quiet leg with the same valid
episodes and no attack. Records the stream job's Python worker's peak resident memory (sampled
every 0.25 s), the bytes the sink held, how often each limit acted, the valid episodes'
freshness (their Delta commit time minus the broker's ack of their last message), and whether
the bound held: every case as its class says, every valid episode committed once bit-exact,
`pilake audit` clean, peak RSS under `--rss-bound-gb`.

    .venv/bin/python -m benchmarks.attack.run                      # 2,000 cases (~10 minutes)
    .venv/bin/python -m benchmarks.attack.run --cases 22 --valid 3 --flood-keys 5   # tiny

Writes OUT/attack.json and OUT/attack.png (OUT: benchmarks/attack/results); the committed
baseline is benchmarks/baselines/attack.json (copied unchanged). Exits 1 when the bound did not
hold.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pi_jobs.local.faults import AttackSize, FaultResult, wire_attack

from benchmarks._figures import spread
from benchmarks.faults.run import describe, machine

HERE = Path(__file__).resolve().parent
# The CI test's bound (tests/faults/test_wire_fuzz.py): ~0.8 GB measured there with the attack's
# limits; an unbounded case once took 19.6 GB.
DEFAULT_RSS_BOUND_GB = 1.5


def _leg(result: FaultResult, bound_bytes: int) -> dict[str, Any]:
    o = result.observed
    fresh = list(o["valid_freshness_s"])
    held = (
        not o["failures"]
        and bool(result.audit.get("ok"))
        and o["partitions_caught_up"]
        and o["stream_job_alive_after"]
        and o["flink_restarts"] == 0
        and 0 < o["peak_worker_rss_bytes"] < bound_bytes
        and o["peak_held_bytes"] <= o["limits"]["max_held_bytes"]
    )
    return {
        "bound_held": bool(held),
        "peak_worker_rss_bytes": o["peak_worker_rss_bytes"],
        "peak_held_bytes": o["peak_held_bytes"],
        "limits_acted": o["limits_acted"],
        # quarantines share group commits (format/SPEC.md 9.5): commits per row, not 1
        "quarantine_rows": o.get("quarantine_rows"),
        "quarantine_commits": o.get("quarantine_commits"),
        "freshness_s": spread(fresh, what="freshness").to_json() if len(fresh) >= 3 else {"values": fresh},
        "failures": o["failures"][:50],
        "failure_count": len(o["failures"]),
        "audit": {k: result.audit.get(k) for k in ("ok", "episodes_in", "visible", "quarantined", "missing")},
        "audit_unaccounted_records": result.audit.get("topic_records_unaccounted"),
        "flink_restarts": o["flink_restarts"],
        "size": o["size"],
        "cases_by_mutation": o["cases_by_mutation"],
        "by_mutation": o["by_mutation"],
        "send_s": o["send_s"],
        "drain_s": o["drain_s"],
        "elapsed_s": round(result.elapsed_s, 1),
        "rss_timeline": o["rss_timeline"],
    }


def _plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    bound_mb = doc["rss_bound_bytes"] / 1e6
    for name, leg in doc["legs"].items():
        t = [p[0] for p in leg["rss_timeline"]]
        left.plot(t, [p[1] / 1e6 for p in leg["rss_timeline"]], label=f"{name} worker RSS")
    left.axhline(bound_mb, color="#d22", linestyle="--", label=f"bound {bound_mb:.0f} MB")
    left.set_xlabel("s since the job started")
    left.set_ylabel("MB")
    left.legend()
    names = list(doc["legs"])
    values = [doc["legs"][n]["freshness_s"].get("values", []) for n in names]
    right.boxplot(values, tick_labels=names)
    right.set_ylabel("valid episodes' freshness (s)")
    fig.suptitle(f"wire attack, seed {doc['seed']}: {doc['legs']['attack']['size']['cases']} cases")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=3131)
    parser.add_argument("--cases", type=int, default=2000, help="mutation cases of the attack leg")
    parser.add_argument("--valid", type=int, default=30, help="valid episodes in each leg")
    parser.add_argument("--flood-keys", type=int, default=500, help="one-chunk episodes of the flood")
    parser.add_argument("--rss-bound-gb", type=float, default=DEFAULT_RSS_BOUND_GB)
    parser.add_argument("--drain-timeout-s", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--jars", type=Path, default=None, help="connector jar cache (default: OUT/jars)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    host = machine()
    print(f"machine: {describe(host)}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    jars = args.jars or args.out / "jars"
    bound = int(args.rss_bound_gb * 1e9)
    t0 = time.monotonic()
    sizes = {
        # the quiet leg: the same valid episodes, no mutation
        "quiet": AttackSize(
            cases=0, valid_episodes=args.valid, flood_keys=0, drain_timeout_s=args.drain_timeout_s
        ),
        "attack": AttackSize(
            cases=args.cases,
            valid_episodes=args.valid,
            flood_keys=args.flood_keys,
            drain_timeout_s=args.drain_timeout_s,
        ),
    }
    legs: dict[str, Any] = {}
    for name, size in sizes.items():
        home = args.out / "work" / name
        shutil.rmtree(home, ignore_errors=True)
        logging.info("leg %s: %s", name, size)
        legs[name] = _leg(wire_attack(home, jars, seed=args.seed, size=size), bound)
        shutil.rmtree(home, ignore_errors=True)  # the lake of a long attack is large
    attack = sizes["attack"]
    doc = {
        "benchmark": "attack",
        "machine": host,
        "seed": args.seed,
        "sizes": {name: asdict(size) for name, size in sizes.items()},
        "rss_bound_bytes": bound,
        "bound_claimed": (
            f"the stream job's Python worker stays under {args.rss_bound_gb:g} GB resident and the sink "
            f"holds at most max_held_bytes ({attack.max_held_mb:g} MB) while {args.cases} seeded hostile "
            "cases arrive; every valid episode commits once, bit-exact; audit clean"
        ),
        "bound_held": all(leg["bound_held"] for leg in legs.values()),
        "legs": legs,
        "wall_s": round(time.monotonic() - t0, 1),
        "note": "one run per leg (peak RSS and bound are per run); freshness spreads are over the "
        "valid episodes of a leg, not repeats",
    }
    (args.out / "attack.json").write_text(json.dumps(doc, indent=1, default=str))
    _plot(doc, args.out / "attack.png")
    print(f"\nmachine: {describe(host)}")
    print(f"{'leg':<8} {'cases':>6} {'messages':>9} {'MB':>7} {'peak RSS MB':>12} {'held MB':>8} "
          f"{'freshness s (median, min-max)':>30} {'failures':>9} {'audit':>6} {'bound':>6}")  # fmt: skip
    for name, leg in legs.items():
        f = leg["freshness_s"]
        fresh = f"{f['median']:.2f} ({f['min']:.2f}-{f['max']:.2f})" if "median" in f else str(f["values"])
        size = leg["size"]
        print(
            f"{name:<8} {size['cases']:>6} {size['messages']:>9} {size['megabytes']:>7.1f} "
            f"{leg['peak_worker_rss_bytes'] / 1e6:>12.0f} {leg['peak_held_bytes'] / 1e6:>8.1f} {fresh:>30} "
            f"{leg['failure_count']:>9} {'ok' if leg['audit']['ok'] else 'FAIL':>6} "
            f"{'held' if leg['bound_held'] else 'BROKEN':>6}"
        )
    print(f"limits acted (attack): {legs['attack']['limits_acted']}")
    print(f"bound held: {doc['bound_held']}  ({doc['wall_s']:.0f} s); wrote {args.out / 'attack.json'}")
    return 0 if doc["bound_held"] else 1


if __name__ == "__main__":
    sys.exit(main())
