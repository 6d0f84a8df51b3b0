"""A mixture's block-shuffled order (`mixture_block_order`): a pure function of (sources'
episode lengths, counts, block size, seed, epoch) with each source's count exactly (so the
shares of `split_counts`, within ±1% of the weights), runs of up to `block_size` neighbouring
steps of one episode kept together, and every source moving through its samples across epochs
without repeating any before it has shown all."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_loader.order._mixture import mixture_block_order

sources_st = st.lists(
    st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=6), min_size=1, max_size=4
)


def _keys(episode_lengths: list[list[int]], src: np.ndarray, local: np.ndarray, block: int) -> list[tuple]:
    """(source, episode, step // block) of each sample of an order."""
    out = []
    for s, flat in zip(src.tolist(), local.tolist(), strict=True):
        offsets = np.concatenate([[0], np.cumsum(episode_lengths[s])])
        e = int(np.searchsorted(offsets, flat, side="right") - 1)
        out.append((s, e, (flat - int(offsets[e])) // block))
    return out


def _runs(keys: list[tuple], local: np.ndarray) -> list[tuple[tuple, int]]:
    """Maximal stretches of one key without a repeated sample: (key, length). (Two runs of one
    block from consecutive rounds of a small source may meet: the repeat tells them apart.)"""
    runs: list[tuple[tuple, int]] = []
    seen: set[int] = set()
    for k, x in zip(keys, local.tolist(), strict=True):
        if runs and runs[-1][0] == k and x not in seen:
            runs[-1] = (k, runs[-1][1] + 1)
            seen.add(x)
        else:
            runs.append((k, 1))
            seen = {x}
    return runs


@settings(max_examples=150, deadline=None)
@given(
    sources=sources_st,
    data=st.data(),
    block=st.integers(min_value=1, max_value=8),
    seed=st.integers(min_value=0, max_value=2**32),
    epoch=st.integers(min_value=0, max_value=5),
)
def test_pure_with_the_counts_and_blocks_kept_together(
    sources: list[list[int]], data: st.DataObject, block: int, seed: int, epoch: int
) -> None:
    counts = data.draw(st.lists(st.integers(0, 60), min_size=len(sources), max_size=len(sources)))
    if sum(counts) == 0:
        counts[0] = 1
    src, local = mixture_block_order(sources, counts, block_size=block, seed=seed, epoch=epoch)
    again = mixture_block_order(sources, counts, block_size=block, seed=seed, epoch=epoch)
    assert np.array_equal(src, again[0]) and np.array_equal(local, again[1])  # a pure function
    assert np.bincount(src, minlength=len(sources)).tolist() == counts  # the shares, exactly
    for i, lengths in enumerate(sources):
        assert ((local[src == i] >= 0) & (local[src == i] < sum(lengths))).all()
    runs = _runs(_keys(sources, src, local, block), local)
    assert all(n <= block for _, n in runs)  # a run is one block, or part of one
    # a block is split only where the epoch's slice of its source crosses into another round
    per_key = Counter(k for k, _ in runs)
    for (s, _, _), n in per_key.items():
        total, c = sum(sources[s]), counts[s]
        rounds = (epoch * c + c - 1) // total - (epoch * c) // total + 1
        assert n <= rounds


@settings(max_examples=60, deadline=None)
@given(sources=sources_st, block=st.integers(1, 8), seed=st.integers(0, 2**20))
def test_an_epoch_of_every_sample_shows_each_block_whole_once(
    sources: list[list[int]], block: int, seed: int
) -> None:
    counts = [sum(s) for s in sources]  # each source's epoch is one whole round
    src, local = mixture_block_order(sources, counts, block_size=block, seed=seed, epoch=0)
    runs = _runs(_keys(sources, src, local, block), local)
    keys = [k for k, _ in runs]
    assert len(keys) == len(set(keys))  # each block one contiguous run
    for (s, e, b), n in runs:
        assert n == min(block, sources[s][e] - b * block)  # whole
    for i in range(len(sources)):
        assert sorted(local[src == i].tolist()) == list(range(counts[i]))


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    n=st.integers(1, 45),
    block=st.integers(1, 5),
    seed=st.integers(0, 2**20),
)
def test_a_source_shows_everything_before_it_repeats(
    lengths: list[int], n: int, block: int, seed: int
) -> None:
    seen: Counter[int] = Counter()
    for epoch in range(4):
        src, local = mixture_block_order([lengths, [3]], [n, 2], block_size=block, seed=seed, epoch=epoch)
        seen.update(local[src == 0].tolist())
        # after e + 1 epochs the source has consumed (e + 1)·n samples of whole rounds: no sample
        # twice more than another
        if len(seen) == sum(lengths):
            assert max(seen.values()) - min(seen.values()) <= 1
        else:
            assert max(seen.values()) == 1


def test_the_block_order_is_pinned() -> None:
    # golden values: a change breaks every saved loader state of a block-shuffled mixture
    src, local = mixture_block_order([[4, 3], [5]], [5, 3], block_size=2, seed=0, epoch=0)
    assert (src.tolist(), local.tolist()) == GOLDEN_0
    src, local = mixture_block_order([[4, 3], [5]], [5, 3], block_size=2, seed=0, epoch=1)
    assert (src.tolist(), local.tolist()) == GOLDEN_1


# source 0: episodes of 4 and 3 steps (blocks {0,1} {2,3} {4,5} {6}), source 1: one of 5; epoch 1
# takes the rest of source 0's first round ({2,3}) before its second round starts
GOLDEN_0 = ([1, 0, 1, 1, 0, 0, 0, 0], [4, 6, 3, 2, 4, 5, 1, 0])
GOLDEN_1 = ([0, 1, 1, 1, 0, 0, 0, 0], [6, 1, 0, 0, 3, 2, 5, 4])


def test_bad_block_sizes_are_refused() -> None:
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match="block_size must be an int >= 1"):
            mixture_block_order([[3]], [3], block_size=bad, seed=0, epoch=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="2 counts for 1 sources"):
        mixture_block_order([[3]], [3, 1], block_size=2, seed=0, epoch=0)
