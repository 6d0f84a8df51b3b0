"""Edits of a test lake that the catalog's rebuild must see through: a second attempt row of an
episode (a backfill superseding the first), rows of the `deletions` table, and a lake of only an
`episodes` table with thousands of rows (what a rebuild reads; no steps or video needed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from pi_catalog import Catalog
from pi_format import EPISODES_SCHEMA, LakeLayout
from pi_format.lake import ensure_lake_tables
from pi_format.lake.schemas import DELETIONS_SCHEMA

from tests.fixtures.lake_factory import FakeLake, episode_rows, make_episode, write_lake


def add_attempt(
    layout: LakeLayout, row: pa.Table, *, attempt_id: str, task: str, committed_at_ns: int
) -> None:
    """Append a copy of the one-row episodes table `row` as another attempt of its episode."""
    changed = {"attempt_id": attempt_id, "task": task, "committed_at_ns": committed_at_ns}
    for name, value in changed.items():
        i = row.schema.get_field_index(name)
        row = row.set_column(i, row.schema.field(i), pa.array([value], row.schema.field(i).type))
    write_deltalake(layout.episodes, row.cast(EPISODES_SCHEMA), mode="append")


_NEXT_DAY_NS = 86_400 * 10**9


def edited_lake_at(root: Path) -> FakeLake:
    """3 episodes through LakeWriter; then ep-001 gets a later attempt (a backfill: it wins,
    attempt "backfill-1", task "re-featurized"), ep-002 an earlier one (it loses), and ep-000
    is deleted (with an id never written)."""
    lake = write_lake(root, episodes=3, steps=3, cameras=["cam"], size=(16, 16))
    rows = DeltaTable(lake.layout.episodes).to_pyarrow_table()
    by_id = {e: rows.filter(pc.equal(rows.column("episode_id"), e)) for e in lake.episode_ids}
    later = by_id["ep-001"].column("committed_at_ns")[0].as_py() + _NEXT_DAY_NS
    add_attempt(
        lake.layout, by_id["ep-001"], attempt_id="backfill-1", task="re-featurized", committed_at_ns=later
    )
    earlier = by_id["ep-002"].column("committed_at_ns")[0].as_py() - _NEXT_DAY_NS
    add_attempt(lake.layout, by_id["ep-002"], attempt_id="zz-older", task="stale", committed_at_ns=earlier)
    delete_episodes(lake.layout, ["ep-000", "ep-never-written"])
    return lake


def delete_episodes(layout: LakeLayout, episode_ids: Sequence[str]) -> None:
    """Append `episode_ids` to the lake's `deletions` table (what `pilake episodes delete` does
    before it tells the catalog)."""
    ensure_lake_tables(layout)
    n = len(episode_ids)
    rows = pa.table(
        {
            "episode_id": list(episode_ids),
            "deletion_id": ["del-test"] * n,
            "reason": ["test"] * n,
            "selection": ["ids"] * n,
            "deleted_at_ns": [time.time_ns()] * n,
        },
        schema=DELETIONS_SCHEMA,
    )
    write_deltalake(layout.deletions, rows, mode="append")


def many_episodes_lake(root: str, count: int) -> LakeLayout:
    """A lake whose `episodes` table holds `count` committed episodes `ep-00000`... (one row
    each, copies of one template row with their own ids)."""
    layout = LakeLayout(root)
    ensure_lake_tables(layout)
    template = episode_rows([make_episode(0, steps=2, cameras=["cam"], size=(16, 16), seed=0)])
    rows = template.take(pa.array([0] * count))
    ids = pa.array([f"ep-{i:05d}" for i in range(count)], pa.string())
    attempts = pc.binary_join_element_wise(ids, pa.scalar("-a"), "")
    for name, values in (("episode_id", ids), ("attempt_id", attempts)):
        i = rows.schema.get_field_index(name)
        rows = rows.set_column(i, rows.schema.field(i), values)
    write_deltalake(layout.episodes, rows, mode="append")
    return layout


@dataclass
class CountWatcher:
    """Counts `episodes` through `catalog` in a loop, in its own thread, until stopped; each
    sample is (monotonic time, count)."""

    catalog: Catalog
    samples: list[tuple[float, int]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> CountWatcher:
        self._thread = threading.Thread(target=self._run, name="count-watcher", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                n = self.catalog.query_arrow("SELECT count() AS n FROM episodes").column("n")[0].as_py()
            except BaseException as err:  # reported by the test, not lost in the thread
                self.errors.append(err)
                return
            self.samples.append((time.monotonic(), int(n)))
            time.sleep(0.001)

    def between(self, start: float, end: float) -> list[int]:
        """The counts sampled from `start` to `end` (monotonic seconds)."""
        return [n for t, n in self.samples if start <= t <= end]
