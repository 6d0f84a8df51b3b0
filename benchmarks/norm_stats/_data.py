"""The benchmark's episodes: synthetic bimanual-arm data, their episodes-row statistics from the
stream job's featurize code, and a cache of both (see run.py's doc)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pi_format import EPISODES_SCHEMA
from pi_jobs.stream.featurize import _stats as featurize_stats

DIMS = 14  # per feature: 2 arms x (6 joints + gripper)


def episode(rng: np.random.Generator, steps: int, wild: bool) -> tuple[np.ndarray, np.ndarray]:
    """One episode's proprio and action, float32 [steps, 14] each (see the module doc)."""
    proprio = np.empty((steps, DIMS), dtype=np.float64)
    for arm in range(2):
        base = arm * 7
        pose = rng.normal([0.0, -0.6, 0.9, 0.0, 0.4, 0.0], 0.3)
        if wild:
            pose[1] += 1.2
        # smooth random walk: increments of 2-10 mrad per step, averaged over 20 steps
        noise = np.cumsum(rng.normal(0.0, rng.uniform(0.002, 0.01), (steps + 20, 6)), axis=0)
        vel = (noise[20:] - noise[:-20]) / 20.0 * 4.0
        proprio[:, base : base + 6] = pose + np.cumsum(vel, axis=0)
        # gripper: exactly open (1) or closed (0), a few switches
        switches = np.sort(rng.integers(0, steps, rng.integers(1, 5)))
        state = np.zeros(steps)
        for i, s in enumerate(switches):
            state[s:] = float((i + 1) % 2)
        proprio[:, base + 6] = state
    proprio[:, 5] = 1.5708 + rng.normal(0.0, 0.002, steps)  # a wrist that barely moves
    spikes = rng.random(steps) < 0.001  # rare sensor glitches on one joint
    proprio[spikes, 3] += rng.choice([-1, 1], spikes.sum()) * rng.uniform(1.0, 3.0, spikes.sum())
    proprio[:, 10] += rng.standard_t(2.0, steps) * 0.02  # heavy-tailed joint noise
    action = np.empty_like(proprio)
    action[:-1] = proprio[1:]
    action[-1] = proprio[-1]
    action += rng.normal(0.0, 0.005, action.shape)
    action[:, 6] = (rng.random(steps) < 0.5).astype(np.float64)  # binary gripper commands
    action[:, 13] = proprio[:, 13]
    return proprio.astype(np.float32), action.astype(np.float32)


def build(episodes: int, min_steps: int, max_steps: int, seed: int) -> dict[str, Any]:
    """Every episode's row statistics (through featurize), its exact values, per-episode
    quantiles (for the naive merge) and the time the statistics took per episode."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_steps, max_steps + 1, episodes)
    wild = rng.random(episodes) < 0.03
    total = int(lengths.sum())
    values = np.empty((2 * DIMS, total), dtype=np.float32)  # every step, dimension-major
    per_episode_q = np.empty((episodes, 2, 2 * DIMS))
    rows: list[dict[str, Any]] = []
    stats_s = 0.0
    at = 0
    for i, steps in enumerate(lengths):
        proprio, action = episode(rng, int(steps), bool(wild[i]))
        t0 = time.perf_counter()
        row = {
            "step_count": int(steps),
            **featurize_stats("proprio", proprio),
            **featurize_stats("action", action),
        }
        stats_s += time.perf_counter() - t0
        rows.append(row)
        both = np.concatenate([proprio, action], axis=1)
        values[:, at : at + steps] = both.T
        per_episode_q[i] = np.quantile(both, [0.01, 0.99], axis=0)
        at += int(steps)
        if (i + 1) % 1000 == 0:
            print(f"  built {i + 1}/{episodes} episodes", flush=True)
    fields = ["step_count"] + [n for n in EPISODES_SCHEMA.names if n.startswith(("proprio_", "action_"))]
    schema = pa.schema([EPISODES_SCHEMA.field(n) for n in fields])
    table = pa.Table.from_pylist(rows, schema=schema)
    return {
        "lengths": lengths,
        "values": values,
        "per_episode_q": per_episode_q,
        "table": table,
        "stats_ms_per_episode": 1e3 * stats_s / episodes,
    }


def cached_build(args: argparse.Namespace) -> dict[str, Any]:
    """`build`, or what an earlier run with the same arguments kept under --cache."""
    key = f"{args.episodes}-{args.min_steps}-{args.max_steps}-{args.seed}"
    where = None if args.cache is None else args.cache / key
    if where is not None and (where / "done").exists():
        print(f"  reusing {where}", flush=True)
        meta = json.loads((where / "meta.json").read_text())
        return {
            "lengths": np.load(where / "lengths.npy"),
            "values": np.load(where / "values.npy"),
            "per_episode_q": np.load(where / "per_episode_q.npy"),
            "table": pq.read_table(where / "episodes.parquet"),
            **meta,
        }
    built = build(args.episodes, args.min_steps, args.max_steps, args.seed)
    if where is not None:
        where.mkdir(parents=True, exist_ok=True)
        for name in ("lengths", "values", "per_episode_q"):
            np.save(where / f"{name}.npy", built[name])
        pq.write_table(built["table"], where / "episodes.parquet")
        (where / "meta.json").write_text(json.dumps({"stats_ms_per_episode": built["stats_ms_per_episode"]}))
        (where / "done").write_text("")
    return built
