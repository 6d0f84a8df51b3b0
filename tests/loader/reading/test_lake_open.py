"""The open path's shortcuts at scale keep its results: the episodes files are listed in episode-id
order (so a compacted lake's rows read already sorted and `latest_commits` copies nothing), and
`pooled_stats` as matrix-vector products equals the count-weighted moments computed plainly on
seeded per-episode statistics; vectors of different lengths are still refused by name."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pi_loader._errors import PiLoaderError
from pi_loader.reading._lake import make_storage, pooled_stats, read_committed_episodes, resolve_tables

from tests.fixtures.lake_factory import write_lake


def test_episodes_files_are_listed_in_episode_order_and_read_sorted(tmp_path: Path) -> None:
    lake = write_lake(tmp_path / "lake", episodes=8, steps=3, cameras=("front",), size=(16, 16), group=1)
    files, _ = resolve_tables(lake.layout, None, None)
    assert len(files.uris) >= 8  # one episodes file per group commit (and the garbage attempt's)
    lows = [lo for lo in files.min_episode if lo is not None]
    assert lows == sorted(lows)
    rows = read_committed_episodes(files, make_storage(lake.layout.root, None, None), None)
    assert rows.column("episode_id").to_pylist() == sorted(lake.episodes)


def _reference(counts: np.ndarray, mats: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    w = counts.astype(np.float64)
    mean = (w[:, None] * mats["mean"].astype(np.float64)).sum(0) / w.sum()
    second = (w[:, None] * (mats["std"].astype(np.float64) ** 2 + mats["mean"].astype(np.float64) ** 2)).sum(
        0
    ) / w.sum()
    return {
        "mean": mean,
        "std": np.sqrt(np.maximum(second - mean**2, 0.0)),
        "min": mats["min"].min(0),
        "max": mats["max"].max(0),
    }


@pytest.mark.parametrize("seed", range(5))
def test_pooled_stats_equal_the_plain_weighted_moments(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, dim = int(rng.integers(1, 400)), int(rng.integers(1, 9))
    counts = rng.integers(1, 500, n).astype(np.int32)
    mats = {s: rng.normal(size=(n, dim)).astype(np.float32) for s in ("mean", "std", "min", "max")}
    mats["std"] = np.abs(mats["std"])
    columns: dict[str, pa.Array] = {"step_count": pa.array(counts)}
    for stat, m in mats.items():
        columns[f"proprio_{stat}"] = pa.array(list(m), pa.list_(pa.float32()))
    table = pa.table(columns)
    chunks = random.Random(seed).choice([1, 2, 5])
    step = max(1, n // chunks)
    table = pa.concat_tables([table.slice(i, step) for i in range(0, n, step)])
    got, want = pooled_stats(table, "proprio"), _reference(counts, mats)
    for stat in ("mean", "std", "min", "max"):
        np.testing.assert_allclose(getattr(got, stat), want[stat], rtol=1e-5, atol=1e-6)
        assert getattr(got, stat).dtype == np.float32


def test_pooled_stats_refuse_vectors_of_different_lengths() -> None:
    table = pa.table(
        {
            "step_count": pa.array([3, 4], pa.int32()),
            **{
                f"action_{s}": pa.array([[1.0, 2.0], [1.0]], pa.list_(pa.float32()))
                for s in ("mean", "std", "min", "max")
            },
        }
    )
    with pytest.raises(PiLoaderError, match=r"differ in length.*\[1, 2\]"):
        pooled_stats(table, "action")


@pytest.mark.parametrize("seed", range(4))
def test_camera_columns_find_each_camera_in_each_episodes_own_list(seed: int) -> None:
    from pi_loader.reading._locators import _camera_columns

    rng = random.Random(seed)
    cameras = ["cam_high", "cam_left_wrist", "cam_right_wrist", "extra"]
    lists = [rng.sample(cameras, k=len(cameras)) for _ in range(300)]
    rows = pa.table({"episode_id": [f"e{i}" for i in range(300)], "cameras": lists})
    rows = pa.concat_tables([rows.slice(0, 100), rows.slice(100)]).slice(7)  # chunked, offsets not at 0
    wanted = cameras[:3]
    got = _camera_columns(rows, wanted)
    assert got.tolist() == [[own.index(c) for c in wanted] for own in lists[7:]]


def test_camera_columns_name_an_episode_lacking_a_camera() -> None:
    from pi_loader.reading._locators import _camera_columns

    rows = pa.table({"episode_id": ["e0", "e1"], "cameras": [["a", "b"], ["b"]]})
    with pytest.raises(PiLoaderError, match=r"episode e1 lacks one of the cameras \('a', 'b'\)"):
        _camera_columns(rows, ("a", "b"))
