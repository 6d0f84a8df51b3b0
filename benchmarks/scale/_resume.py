"""Resuming the million-episode growth (`python -m benchmarks.scale.million --resume`): the lake an
earlier run grew (and stopped, by hand, SIGTERM/SIGKILL, low disk or --grow-until) grows on
from exactly the episodes it holds, toward the sizes its progress file planned.

Before growing, the lake is checked exact: its episodes rows are `scale-0000000` ..
`scale-{n-1}`, each once (a kill inside a group commit leaves that group's steps/video rows
invisible, never an episodes row: `LakeWriter` commits the markers last, and `pilake gc`
removes the rest); the catalog is brought to the same ids (a kill between the Delta commit and
`Catalog.record_episodes` leaves the catalog one group short: those rows are recorded again,
idempotent). The growth then stops itself, between group commits, on SIGTERM/SIGINT, when free
disk drops under `--min-free-gb`, or after `--grow-until`; it writes the progress file every
15 s and at the stop, with each leg's episodes and seconds under `legs` and their sum under
`grow_s_total` (a SIGKILL loses at most the last 15 s of a leg's time, never episodes).
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from benchmarks.scale import _grow

PROGRESS_EVERY_S = 15.0


def episode_ids(lake: Path) -> tuple[list[str], int]:
    """The episodes table's episode ids (sorted) and its Delta version."""
    from deltalake import DeltaTable

    table = DeltaTable(str(lake / "episodes"))
    ids = table.to_pyarrow_table(columns=["episode_id"]).column("episode_id").to_pylist()
    return sorted(ids), table.version()


def check_exact(lake: Path) -> int:
    """The episodes the lake holds, raising if they are not exactly scale-0 .. scale-(n-1) once
    each (lost or duplicated episodes)."""
    ids, _ = episode_ids(lake)
    distinct = len(set(ids))
    expected = [f"scale-{i:07d}" for i in range(len(ids))]
    if distinct != len(ids) or ids != expected:
        missing = len(set(expected) - set(ids))
        raise RuntimeError(
            f"the lake at {lake} is not resumable: {len(ids):,} episodes rows, {distinct:,} distinct ids, "
            f"{missing:,} of scale-0000000..scale-{len(ids) - 1:07d} missing; grow a fresh lake "
            "(python -m benchmarks.scale.million without --resume)"
        )
    return len(ids)


def reconcile_catalog(lake: Path, catalog_dir: Path) -> int:
    """Record in the catalog the lake's episodes it lacks (a kill between the two commits);
    returns how many were recorded."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from pi_catalog import Catalog

    catalog = Catalog(str(catalog_dir))
    catalog.ensure_schema()
    indexed = set(catalog.episode_ids("SELECT DISTINCT episode_id FROM episodes"))
    ids, version = episode_ids(lake)
    missing = sorted(set(ids) - indexed)
    if missing:
        rows = DeltaTable(str(lake / "episodes")).to_pyarrow_table()
        rows = rows.filter(pc.is_in(rows.column("episode_id"), value_set=pa.array(missing)))
        catalog.record_episodes(rows, episodes_version=version)
    catalog.close()
    return len(missing)


def config_from(state: dict[str, Any], sizes: tuple[int, ...]) -> _grow.GrowConfig:
    """The GrowConfig the earlier run used (same template episode), for the sizes left."""
    if not state.get("config"):
        raise RuntimeError(
            "the progress file keeps no `config` (a run before it was recorded): resuming with other "
            "defaults would grow other episodes; add the first run's GrowConfig there as `config`"
        )
    names = {f.name for f in fields(_grow.GrowConfig)} - {"sizes"}
    kept = {k: v for k, v in state["config"].items() if k in names}
    return _grow.GrowConfig(sizes=sizes, **kept)


def first_legs(state: dict[str, Any], held: int) -> list[dict[str, Any]]:
    """The growth before resumes were recorded: the first run's measured time to its last size
    on the way (the episodes after it, grown before a hand stop, were not timed: said so)."""
    sizes = state.get("sizes") or []
    if not sizes:
        return []
    last = sizes[-1]
    untimed = held - int(last["episodes"])
    return [
        {
            "from": 0,
            "to": int(last["episodes"]),
            "grow_s": float(last.get("elapsed_at_size_s") or last.get("build_s") or 0.0),
            "note": f"the first run, to its last size measured on the way; the {untimed:,} episodes after "
            "it (grown before a hand stop and a --measure-only timing) are not in grow_s_total",
        }
    ]


class Stopper:
    """Why the growth should stop now, asked after every group commit; writes the progress file
    every PROGRESS_EVERY_S on the way."""

    def __init__(self, home: Path, min_free_gb: float, grow_until: float | None, tick: Any) -> None:
        self.home, self.min_free_gb, self.grow_until, self.tick = home, min_free_gb, grow_until, tick
        self.signal: str | None = None
        self.last = time.monotonic()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.signal = signal.Signals(signum).name

    def __call__(self, count: int) -> str | None:
        if time.monotonic() - self.last > PROGRESS_EVERY_S:
            self.last = time.monotonic()
            self.tick(count)
        free = shutil.disk_usage(self.home).free / 2**30
        if self.signal is not None:
            return f"{self.signal} received: stopped between group commits at {count:,} episodes"
        if free < self.min_free_gb:
            return f"under {self.min_free_gb} GB of disk free ({free:.1f} GB) at {count:,} episodes"
        if self.grow_until is not None and time.time() > self.grow_until:
            return f"--grow-until passed at {count:,} episodes"
        return None


def resume(
    home: Path, out: Path, *, min_free_gb: float, grow_until: float | None, sizes: tuple[int, ...] | None
) -> int:
    """Grow the lake under `home` on from the episodes it holds; returns the episodes reached."""
    from benchmarks.scale.million import write_progress

    lake, catalog = home / "lake", home / "catalog"
    state = json.loads((out / "million-progress.json").read_text())
    held = check_exact(lake)
    recorded = reconcile_catalog(lake, catalog)
    planned = tuple(sizes or state.get("sizes_planned") or (1_000_000,))
    left = tuple(s for s in sorted(planned) if s > held)
    config = config_from(state, left or (held,))  # before anything is written: a refusal changes nothing
    legs: list[dict[str, Any]] = state.get("legs") or first_legs(state, held)
    leg: dict[str, Any] = {
        "from": held,
        "to": held,
        "grow_s": 0.0,
        "started_at_unix": round(time.time(), 1),
        "catalog_rows_recorded_again": recorded,
        "stopped": None,
    }
    legs.append(leg)
    started = time.monotonic()

    def tick(count: int) -> None:
        leg["to"], leg["grow_s"] = count, round(time.monotonic() - started, 1)
        state["legs"] = legs
        state["grow_s_total"] = round(sum(float(x["grow_s"]) for x in legs), 1)
        state["episodes"] = count
        state["free_gb"] = round(shutil.disk_usage(home).free / 2**30, 1)
        write_progress(out, state)

    print(
        f"resuming at {held:,} episodes (exact; {recorded} catalog rows recorded again), "
        f"toward {left[-1] if left else held:,}; stop: SIGTERM, < {min_free_gb} GB free",
        flush=True,
    )
    tick(held)
    if not left:
        return held
    stopper = Stopper(home, min_free_gb, grow_until, tick)
    count = held
    for size, figures in _grow.grow(lake, catalog, config, start=held, stop=stopper):
        count = size
        before = sum(float(x["grow_s"]) for x in legs[:-1])
        figures["elapsed_at_size_s"] = round(before + time.monotonic() - started, 1)
        # build_s as the first run's sizes have it (time growing to this size), over all legs
        figures["build_s_leg"] = figures["build_s"]
        figures["build_s"] = round(before + figures["build_s"], 1)
        figures["resumed_from"] = held
        state.setdefault("sizes", []).append(figures)
        leg["stopped"] = figures.get("stopped")
        tick(count)
        print(f"  at {count:,}: {figures.get('stopped') or 'size reached'}", flush=True)
    if leg["stopped"] is None:
        leg["stopped"] = f"all planned sizes reached ({count:,})"
    state["stopped"] = leg["stopped"]
    tick(count)
    print(f"growth stopped: {leg['stopped']}; grown {state['grow_s_total']} s in all", flush=True)
    return count
