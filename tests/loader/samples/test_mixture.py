"""`Mixture`: the weighted order is a pure function of (sources, weights, seed, epoch), realised
shares within ±1% of the weights over an epoch, each source shown in full before any repeat,
shards that cover the epoch as a Dataset's do, an exact resume through Loader.get_state /
set_state, and sources of other cameras and dimensions mapped to one spec with masks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_format import LakeLayout
from pi_format.lake import LakeWriter
from pi_loader import Dataset, Loader, Mixture, SampleSpec, ShardSpec, shard_order
from pi_loader.samples._mixture import mixture_order, split_counts

from tests.fixtures import lake_factory
from tests.fixtures.lake_factory import FakeLake, lake_rows, make_episode, write_lake
from tests.loader.samples.test_norm_stats import _with_sketches

lengths_st = st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=5)


@settings(max_examples=120, deadline=None)
@given(
    weights=st.lists(st.floats(min_value=0.01, max_value=100.0), min_size=1, max_size=6),
    total=st.integers(min_value=1, max_value=5000),
)
def test_split_counts_add_up_and_stay_within_one(weights: list[float], total: int) -> None:
    counts = split_counts(weights, total)
    exact = total * np.asarray(weights) / sum(weights)
    assert counts.sum() == total and (np.abs(counts - exact) < 1.0).all() and (counts >= 0).all()
    if total >= 100:  # the realised share of an epoch is within ±1% of the weight
        assert (np.abs(counts / total - np.asarray(weights) / sum(weights)) <= 0.01).all()


@settings(max_examples=100, deadline=None)
@given(
    lengths=lengths_st,
    data=st.data(),
    seed=st.integers(min_value=0, max_value=2**32),
    epoch=st.integers(min_value=0, max_value=6),
)
def test_the_order_is_pure_and_has_the_epochs_counts(
    lengths: list[int], data: st.DataObject, seed: int, epoch: int
) -> None:
    counts = data.draw(
        st.lists(st.integers(min_value=0, max_value=60), min_size=len(lengths), max_size=len(lengths))
    )
    if sum(counts) == 0:
        counts[0] = 1
    src, local = mixture_order(lengths, counts, seed=seed, epoch=epoch)
    again = mixture_order(lengths, counts, seed=seed, epoch=epoch)
    assert np.array_equal(src, again[0]) and np.array_equal(local, again[1])  # a pure function
    assert np.bincount(src, minlength=len(lengths)).tolist() == counts
    for i, n in enumerate(lengths):
        assert ((local[src == i] >= 0) & (local[src == i] < n)).all()


def test_the_order_is_pinned() -> None:
    # golden values: a change of the order breaks every saved loader state of a mixture
    assert [x.tolist() for x in mixture_order([4, 3], [5, 2], seed=0, epoch=0)] == [
        [1, 0, 1, 0, 0, 0, 0],
        [2, 1, 1, 2, 0, 3, 3],
    ]
    assert [x.tolist() for x in mixture_order([4, 3], [5, 2], seed=0, epoch=1)] == [
        [1, 1, 0, 0, 0, 0, 0],
        [0, 1, 2, 1, 0, 1, 2],
    ]


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(min_value=1, max_value=30),
    n=st.integers(min_value=1, max_value=45),
    seed=st.integers(min_value=0, max_value=2**20),
)
def test_a_source_shows_everything_before_it_repeats(length: int, n: int, seed: int) -> None:
    # the source's samples in consumption order over several epochs: whole permutations
    stream = []
    for epoch in range(4):
        src, local = mixture_order([length, 3], [n, 2], seed=seed, epoch=epoch)
        stream.extend(local[src == 0].tolist())
    for start in range(0, len(stream) - length + 1, length):
        assert sorted(stream[start : start + length]) == list(range(length))


@pytest.fixture(scope="module")
def two_lakes(tmp_path_factory: pytest.TempPathFactory) -> tuple[FakeLake, FakeLake]:
    a = write_lake(tmp_path_factory.mktemp("mix_a"), episodes=3, steps=8, cameras=("front",), size=(16, 16))
    patch = pytest.MonkeyPatch()
    patch.setattr(lake_factory, "PROPRIO_DIM", 5)  # a robot with other dimensions and cameras
    patch.setattr(lake_factory, "ACTION_DIM", 4)
    try:
        b = write_lake(
            tmp_path_factory.mktemp("mix_b"),
            episodes=2,
            steps=10,
            cameras=("front", "wrist"),
            size=(16, 16),
            seed=7,
        )
    finally:
        patch.undo()
    return a, b


def _mixture(lakes: tuple[FakeLake, FakeLake], **kwargs: Any) -> Mixture:
    spec = SampleSpec(action_horizon=2)
    a, b = lakes
    return Mixture(
        [(Dataset(a.layout, spec=spec), 0.7), (Dataset(b.layout, spec=spec), 0.3)], names=["a", "b"], **kwargs
    )


def test_sources_of_other_cameras_and_dims_share_one_spec(two_lakes: tuple[FakeLake, FakeLake]) -> None:
    a, b = two_lakes
    mix = _mixture(two_lakes, seed=3)
    assert (
        mix.cameras == ("front", "wrist") and len(mix) == 3 * 8 + 2 * 10 and mix.counts == {"a": 31, "b": 13}
    )
    batch = mix.samples(mix.epoch_order(0))
    src = batch["source"]
    assert Counter(src.tolist()) == {0: 31, 1: 13}
    assert batch["observation.state"].shape == (44, 5) and batch["action"].shape == (44, 2, 4)
    assert batch["observation.state_dim_is_pad"][src == 0].tolist() == [[False] * 3 + [True] * 2] * 31
    assert not batch["action_dim_is_pad"][src == 1].any()
    assert batch["observation.images.wrist_is_pad"].tolist() == (src == 0).tolist()
    assert not batch["observation.images.front_is_pad"].any()
    assert (batch["observation.images.wrist"][src == 0] == 0).all()
    # values are the sources' own
    for row in np.flatnonzero(src == 1)[:3]:
        episode = b.episodes[str(batch["episode_id"][row])]
        step = int(batch["step"][row])
        assert np.array_equal(batch["observation.state"][row], episode.proprio[step])
    for row in np.flatnonzero(src == 0)[:3]:
        episode = a.episodes[str(batch["episode_id"][row])]
        assert np.array_equal(batch["observation.state"][row, :3], episode.proprio[int(batch["step"][row])])
    # string keys of different widths per source keep every character
    from pi_format.lake import Annotation, AnnotationStore

    for lake, text in ((a, "go"), (b, "a much longer instruction")):
        AnnotationStore(lake.layout).append(
            [Annotation("ep-000", lake.episodes["ep-000"].attempt_id, 0, 8, "instruction", text, source="t")]
        )
    a_ds = Dataset(a.layout, spec=SampleSpec(action_horizon=2, annotations=("instruction",)))
    b_ds = Dataset(b.layout, spec=SampleSpec(action_horizon=2, annotations=("instruction",)))
    texts = Mixture([(a_ds, 1.0), (b_ds, 1.0)]).samples(np.arange(44))
    assert texts["annotation.instruction"].dtype.kind == "U"
    assert set(texts["annotation.instruction"].tolist()) == {"", "go", "a much longer instruction"}
    merged = mix.norm_stats()["action"]
    per = mix.source_norm_stats()
    # weights, not sizes: a's 24 steps count 0.7, b's 20 count 0.3
    want = 0.7 * per["a"]["action"].mean[:2] + 0.3 * per["b"]["action"].mean[:2]
    assert np.allclose(merged.mean[:2], want) and np.allclose(merged.mean[2:], per["b"]["action"].mean[2:])
    assert (
        merged.max.tolist()
        == np.maximum(
            np.pad(per["a"]["action"].max, (0, 2), constant_values=-np.inf), per["b"]["action"].max
        ).tolist()
    )


def _weighted_rank_error(values: list[np.ndarray], shares: list[float], x: float, q: float) -> float:
    """Distance of q from [G(< x), G(<= x)], G the exact CDF of the weighted sample: each value
    of source i weighs shares[i] / len(values[i])."""
    below = sum(s * float((v < x).mean()) for v, s in zip(values, shares, strict=True))
    upto = sum(s * float((v <= x).mean()) for v, s in zip(values, shares, strict=True))
    return max(0.0, below - q, q - upto)


def _sketched_lake(
    root: Path, *, episodes: int, seed: int, dims: tuple[int, int]
) -> tuple[LakeLayout, list[Any]]:
    """A lake whose episodes rows carry the featurizer's statistics columns (sketches), with
    `dims` (state, action) and episodes of 20 + 7i steps."""
    patch = pytest.MonkeyPatch()
    patch.setattr(lake_factory, "PROPRIO_DIM", dims[0])
    patch.setattr(lake_factory, "ACTION_DIM", dims[1])
    try:
        fakes = [
            make_episode(i, steps=20 + 7 * i, cameras=("front",), size=(16, 16), seed=seed)
            for i in range(episodes)
        ]
        rows = [
            _with_sketches(r, f.proprio, f.action)
            for r, f in zip(lake_rows(fakes, (16, 16)), fakes, strict=True)
        ]
    finally:
        patch.undo()
    layout = LakeLayout(str(root))
    LakeWriter(layout, writer_id="test").commit_episodes(rows)
    return layout, fakes


@pytest.fixture(scope="module")
def sketched_lakes(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[LakeLayout, list[Any]]]:
    # a: 6 episodes (195 steps) of one robot; b: 2 episodes (47 steps) of a wider one
    return [
        _sketched_lake(tmp_path_factory.mktemp("sk_a"), episodes=6, seed=3, dims=(3, 2)),
        _sketched_lake(tmp_path_factory.mktemp("sk_b"), episodes=2, seed=9, dims=(5, 4)),
    ]


@pytest.mark.parametrize("weights", [(0.7, 0.3), (0.05, 0.95), (1.0, 1.0)])
def test_merged_quantiles_are_those_of_the_weighted_mixture(
    sketched_lakes: list[tuple[LakeLayout, list[Any]]], weights: tuple[float, float]
) -> None:
    spec = SampleSpec(cameras=("front",), action_horizon=2)
    mix = Mixture(
        [(Dataset(layout, spec=spec), w) for (layout, _), w in zip(sketched_lakes, weights, strict=True)]
    )
    shares = [w / sum(weights) for w in weights]
    for key, field in (("observation.state", "proprio"), ("action", "action")):
        stats = mix.norm_stats()[key]
        q01, q99 = stats.require_quantiles()
        assert stats.rank_error_bound is not None and 0 < stats.rank_error_bound < 0.5
        values = [np.concatenate([getattr(e, field) for e in fakes]) for _, fakes in sketched_lakes]
        for d in range(len(q01)):
            have = [i for i, v in enumerate(values) if v.shape[1] > d]  # b's extra dims: b alone
            cols = [values[i][:, d] for i in have]
            mine = [shares[i] / sum(shares[j] for j in have) for i in have]
            for x, q in ((q01[d], 0.01), (q99[d], 0.99)):
                assert _weighted_rank_error(cols, mine, float(x), q) <= stats.rank_error_bound + 1e-12
        # the merged moments are those of the same weighted sample
        for d in range(len(q01)):
            have = [i for i, v in enumerate(values) if v.shape[1] > d]
            mine = [shares[i] / sum(shares[j] for j in have) for i in have]
            mean = sum(m * values[i][:, d].astype(np.float64).mean() for i, m in zip(have, mine, strict=True))
            assert stats.mean[d] == pytest.approx(mean, rel=1e-6, abs=1e-9)
    # the trainer's quantile normalization takes a mixture's statistics
    from pi_train._normalize import normalization_stats

    norm = normalization_stats(mix, "quantile")
    assert norm.action_std.shape == (4,) and np.isfinite(norm.action_std).all()


def _ids(batches: list[dict[str, np.ndarray]]) -> list[tuple[int, str, int]]:
    return [
        (int(s), str(e), int(t))
        for b in batches
        for s, e, t in zip(b["source"], b["episode_id"], b["step"], strict=True)
    ]


@pytest.mark.parametrize("workers", [0, 1])
def test_shards_agree_and_a_saved_state_resumes_exactly(
    two_lakes: tuple[FakeLake, FakeLake], workers: int
) -> None:
    mix = _mixture(two_lakes, seed=5)
    whole = _ids(list(Loader(mix, batch_size=4, shard=ShardSpec(0, 1), num_workers=workers)))
    expected = mix.samples(mix.epoch_order(0))
    assert whole == _ids([expected])
    shards = [
        _ids(list(Loader(_mixture(two_lakes, seed=5), batch_size=4, shard=ShardSpec(i, 3), num_workers=0)))
        for i in range(3)
    ]
    want = [
        _ids(
            [mix.samples(shard_order(mix.epoch_order(0), shard_index=i, shard_count=3, drop_remainder=False))]
        )
        for i in range(3)
    ]
    assert shards == want and sum(len(s) for s in shards) >= len(mix)
    first = Loader(mix, batch_size=4, shard=ShardSpec(0, 1), num_workers=workers)
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = first.get_state()
    resumed = Loader(_mixture(two_lakes, seed=5), batch_size=4, shard=ShardSpec(0, 1), num_workers=workers)
    resumed.set_state(state)
    assert _ids(head) + _ids(list(resumed)) == whole
    # the next epoch is another order of the same shares; another seed another order
    mix.set_epoch(1)
    assert mix.epoch_order(1).tolist() != mix.epoch_order(0).tolist()
    assert (
        _mixture(two_lakes, seed=6).epoch_order(0).tolist()
        != _mixture(two_lakes, seed=5).epoch_order(0).tolist()
    )
    with pytest.raises(Exception, match="fingerprint"):
        Loader(
            _mixture(two_lakes, seed=5, samples_per_epoch=50),
            batch_size=4,
            shard=ShardSpec(0, 1),
            num_workers=0,
        ).set_state(state)


def test_pin_names_open_from_the_lake_and_bad_sources_are_refused(
    two_lakes: tuple[FakeLake, FakeLake],
) -> None:
    from pi_jobs.maintenance.datasets import create_dataset

    a, _ = two_lakes
    create_dataset(a.layout, "mix-a", episode_ids=a.episode_ids[:2])
    mix = Mixture([("mix-a", 1.0)], lake=a.layout.root, spec=SampleSpec(action_horizon=2), seed=0)
    assert mix.names == ("mix-a",) and len(mix) == 16
    with pytest.raises(ValueError, match="weight must be a number > 0"):
        Mixture([("mix-a", 0.0)], lake=a.layout.root)
    with pytest.raises(ValueError, match="pass lake="):
        Mixture([("mix-a", 1.0)])
    with pytest.raises(ValueError, match="block_size must be None"):
        mix.epoch_order(0, block_size=0)


@pytest.mark.parametrize("workers", [0, 1])
def test_block_shuffle_keeps_shares_blocks_shards_and_resume(
    two_lakes: tuple[FakeLake, FakeLake], workers: int
) -> None:
    block = 3
    mix = _mixture(two_lakes, seed=5)
    order = mix.epoch_order(0, block_size=block)
    assert order.tolist() == _mixture(two_lakes, seed=5).epoch_order(0, block_size=block).tolist()  # pure
    assert sorted(order.tolist()) != order.tolist() and order.tolist() != mix.epoch_order(0).tolist()
    batch = mix.samples(order)
    src = batch["source"].tolist()
    assert Counter(src) == {0: 31, 1: 13}  # the global shuffle's counts: shares within 1/N
    # runs of one (source, episode, step // block) are at most a block long, and a block is one
    # run unless its source's epoch crosses into another round
    keys = [
        (s, str(e), int(t) // block) for s, e, t in zip(src, batch["episode_id"], batch["step"], strict=True)
    ]
    runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
    assert len(runs) < len(keys) and max(Counter(runs).values()) <= 2
    whole = _ids(
        list(Loader(mix, batch_size=4, shard=ShardSpec(0, 1), num_workers=workers, block_size=block))
    )
    assert whole == _ids([batch])
    # shards: contiguous slices of that order, as for a Dataset (hosts agree)
    for i in range(3):
        loader = Loader(
            _mixture(two_lakes, seed=5), batch_size=4, shard=ShardSpec(i, 3), num_workers=0, block_size=block
        )
        want = shard_order(order, shard_index=i, shard_count=3, drop_remainder=False)
        assert _ids(list(loader)) == _ids([mix.samples(want)])
    # an exact resume, in any epoch
    first = Loader(mix, batch_size=4, shard=ShardSpec(0, 1), num_workers=workers, block_size=block)
    first.set_epoch(2)
    it = iter(first)
    head = [next(it) for _ in range(5)]
    state = first.get_state()
    resumed = Loader(
        _mixture(two_lakes, seed=5),
        batch_size=4,
        shard=ShardSpec(0, 1),
        num_workers=workers,
        block_size=block,
    )
    resumed.set_state(state)
    assert _ids(head) + _ids(list(resumed)) == _ids([mix.samples(mix.epoch_order(2, block_size=block))])
    # a state of another shuffle mode is refused
    with pytest.raises(Exception, match="block_size"):
        Loader(_mixture(two_lakes, seed=5), batch_size=4, shard=ShardSpec(0, 1), num_workers=0).set_state(
            state
        )
