"""An unpinned open (the whole lake, or ids, at the latest versions) is served from this host's
open cache while the tables' versions (and the deletions table's) are unchanged: no Delta log
load, no episodes rows read (issue 32 item 3: each open re-read 1.0-1.5 MB). A commit or a
deletion since makes it a miss that sees the change.
"""

from __future__ import annotations

from pathlib import Path

from pi_jobs.maintenance.deletion import delete_episodes
from pi_loader import CacheConfig, Dataset
from pi_loader.reading._counts import storage_counts

from tests.fixtures.lake_factory import append_episodes, make_episode, write_lake


def _open(root: Path, cache: Path, ids: list[str] | None = None) -> Dataset:
    return Dataset(str(root), episode_ids=ids, seed=1, action_horizon=2, cache=CacheConfig(cache, 10**8))


def test_unpinned_open_reuses_the_cached_rows_until_a_commit_or_deletion(tmp_path: Path) -> None:
    lake = write_lake(tmp_path / "lake", episodes=3, steps=8, cameras=("front",), size=(32, 24))
    root, cache = tmp_path / "lake", tmp_path / "cache"
    first = _open(root, cache)
    assert list(first.episode_ids) == lake.episode_ids

    before = storage_counts()
    second = _open(root, cache)
    after = storage_counts()
    assert after["delta_log_loads"] == before["delta_log_loads"]  # no log loaded
    assert after["open_cache_hits"] == before["open_cache_hits"] + 1
    assert second.episode_ids == first.episode_ids
    assert second.snapshot.table_versions == first.snapshot.table_versions
    for i in range(len(first)):
        assert first[i]["episode_id"] == second[i]["episode_id"]
    # a selection of ids is its own entry (a miss first, then a hit)
    some = lake.episode_ids[:2]
    assert list(_open(root, cache, some).episode_ids) == some
    before = storage_counts()
    assert list(_open(root, cache, some).episode_ids) == some
    assert storage_counts()["delta_log_loads"] == before["delta_log_loads"]

    # a new commit: a miss that sees the new episode
    append_episodes(
        lake.layout, [make_episode(9, steps=8, cameras=("front",), size=lake.size, seed=2)], lake.size
    )
    before = storage_counts()
    third = _open(root, cache)
    assert storage_counts()["delta_log_loads"] > before["delta_log_loads"]
    assert len(third.episode_ids) == 4

    # a deletion (its own table's version): a miss that leaves the episode out
    delete_episodes(lake.layout, [lake.episode_ids[0]], reason="test", selection="ids")
    fourth = _open(root, cache)
    assert lake.episode_ids[0] not in fourth.episode_ids and len(fourth.episode_ids) == 3
    assert list(_open(root, cache).episode_ids) == list(fourth.episode_ids)


def test_a_lake_written_again_at_the_same_root_is_not_served_from_the_cache(tmp_path: Path) -> None:
    import shutil

    import numpy as np

    root, cache = tmp_path / "lake", tmp_path / "cache"
    write_lake(root, episodes=2, steps=6, cameras=("front",), size=(32, 24), seed=0)
    old = _open(root, cache)
    shutil.rmtree(root)
    write_lake(root, episodes=2, steps=6, cameras=("front",), size=(32, 24), seed=7)
    new = _open(root, cache)  # same versions, other commits: a miss
    fresh = _open(root, tmp_path / "other-cache")
    assert new.snapshot.table_versions == old.snapshot.table_versions
    assert new.snapshot.attempt_ids == fresh.snapshot.attempt_ids
    for key, value in fresh[0].items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(np.asarray(new[0][key]), np.asarray(value), err_msg=key)
