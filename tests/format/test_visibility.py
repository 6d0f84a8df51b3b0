"""`pi_format.lake.visibility.latest_commits` against a plain-Python statement of the rule (the
newest commit of each episode wins, ties by attempt_id; deleted episodes left out; sorted by
episode_id) on seeded rows: retried episodes in any order, and rows already one per episode, sorted or
shuffled."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from pi_format.lake.visibility import latest_commits

Row = dict[str, Any]


def _reference(rows: list[Row], deleted: set[str]) -> list[Row]:
    best: dict[str, Row] = {}
    for row in rows:
        key = (row["committed_at_ns"], row["attempt_id"])
        held = best.get(row["episode_id"])
        if held is None or key > (held["committed_at_ns"], held["attempt_id"]):
            best[row["episode_id"]] = row
    return [best[e] for e in sorted(best) if e not in deleted]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shape", ["retried_shuffled", "one_per_episode_sorted", "one_per_episode_shuffled"])
def test_latest_commits_matches_the_rule(seed: int, shape: str) -> None:
    rng = random.Random(seed)
    episodes = [f"r{rng.randrange(3)}-{i:05d}" for i in range(rng.randrange(1, 300))]
    rows: list[Row] = []
    for n, episode in enumerate(episodes):
        attempts = 1 if shape != "retried_shuffled" else rng.randrange(1, 4)
        for a in range(attempts):
            rows.append(
                {
                    "episode_id": episode,
                    "attempt_id": f"{rng.randrange(16):x}{a}",
                    "committed_at_ns": rng.randrange(3) if attempts > 1 else n,
                    "payload": rng.random(),
                }
            )
    if shape == "one_per_episode_sorted":
        rows.sort(key=lambda r: r["episode_id"])
        episodes_unique = {r["episode_id"] for r in rows}
        assert len(episodes_unique) == len(rows)
    else:
        rng.shuffle(rows)
    deleted = set(rng.sample(episodes, k=min(len(episodes), rng.randrange(3))))
    table = pa.Table.from_pylist(rows)
    got = latest_commits(table, sorted(deleted)).to_pylist()
    assert got == _reference(rows, deleted)
    assert latest_commits(table).to_pylist() == _reference(rows, set())
