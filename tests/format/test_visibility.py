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


def _table(ids: list[str], stamps: list[int], chunks: int = 1) -> pa.Table:
    table = pa.table(
        {
            "episode_id": pa.array(ids, pa.string()),
            "attempt_id": pa.array([f"a{i}" for i in range(len(ids))], pa.string()),
            "committed_at_ns": pa.array(stamps, pa.int64()),
            "payload": pa.array([[float(i)] * 3 for i in range(len(ids))], pa.list_(pa.float32())),
        }
    )
    step = max(1, len(ids) // chunks)
    return pa.concat_tables([table.slice(i, step) for i in range(0, len(ids), step)])


def test_rows_already_one_per_episode_in_order_come_back_as_they_are() -> None:
    # a compacted lake read in file order: no sort, no copy of the wide table
    rows = _table([f"r1-{i:06d}" for i in range(5_000)], list(range(5_000)), chunks=7)
    assert latest_commits(rows) is rows


@pytest.mark.parametrize("seed", range(4))
def test_sorted_looking_rows_with_a_repeat_at_a_chunk_edge_are_still_decided(seed: int) -> None:
    # in order everywhere but one id committed twice, the repeat placed at a chunk boundary:
    # the shortcut must not take it for one row per episode
    rng = random.Random(seed)
    n = 3_000
    ids = [f"r1-{i:06d}" for i in range(n)]
    at = rng.randrange(1, n)
    ids.insert(at, ids[at - 1])
    stamps = [rng.randrange(10**6) for _ in ids]
    rows = _table(ids, stamps, chunks=rng.choice([1, 3, 11]))
    out = latest_commits(rows)
    assert out.num_rows == n
    expected = _reference(rows.to_pylist(), set())
    assert out.column("attempt_id").to_pylist() == [r["attempt_id"] for r in expected]


def test_a_null_episode_id_is_not_taken_for_sorted_rows() -> None:
    rows = _table(["r1-000001", "r1-000002"], [1, 2]).set_column(
        0, "episode_id", pa.array([None, "r1-000002"], pa.string())
    )
    assert latest_commits(rows) is not rows
