"""Order, block shuffle and sharding: pure functions, checked with hypothesis."""

from __future__ import annotations

import sys
import types
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pi_loader import ShardError, ShardSpec, block_order, sample_order, shard_order

lengths_st = st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(
    lengths=lengths_st,
    shard_count=st.integers(min_value=1, max_value=9),
    seed=st.integers(min_value=0, max_value=2**32),
    epoch=st.integers(min_value=0, max_value=5),
    block=st.one_of(st.none(), st.integers(min_value=1, max_value=8)),
)
def test_shards_cover_every_sample_once_with_equal_counts(
    lengths: list[int], shard_count: int, seed: int, epoch: int, block: int | None
) -> None:
    n = sum(lengths)
    order = (
        sample_order(n, seed=seed, epoch=epoch)
        if block is None
        else block_order(np.array(lengths), block_size=block, seed=seed, epoch=epoch)
    )
    assert sorted(order.tolist()) == list(range(n))  # a permutation
    shards = [
        shard_order(order, shard_index=i, shard_count=shard_count, drop_remainder=False)
        for i in range(shard_count)
    ]
    sizes = {len(s) for s in shards}
    assert sizes == {-(-n // shard_count)}  # equal counts
    counts = Counter(int(x) for s in shards for x in s)
    assert set(counts) == set(range(n))  # every sample covered
    extra = sum(counts.values()) - n
    assert extra == (-n) % shard_count  # only the padding repeats...
    assert max(counts.values()) <= -(-sum(counts.values()) // n)  # padding cycles through the order
    if n >= shard_count:
        assert all(c in (1, 2) for c in counts.values())
        dropped = [
            shard_order(order, shard_index=i, shard_count=shard_count, drop_remainder=True)
            for i in range(shard_count)
        ]
        flat = [int(x) for s in dropped for x in s]
        assert len(flat) == len(set(flat)) == (n // shard_count) * shard_count  # each at most once
        assert {len(s) for s in dropped} == {n // shard_count}


def test_block_order_keeps_runs_of_one_episode_together() -> None:
    lengths = np.array([10, 7, 3])
    order = block_order(lengths, block_size=4, seed=1, epoch=0)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    block_of = []
    for flat in order:
        e = int(np.searchsorted(offsets, flat, side="right")) - 1
        block_of.append((e, (int(flat) - int(offsets[e])) // 4))
    # each block appears as one contiguous run
    runs = [b for i, b in enumerate(block_of) if i == 0 or block_of[i - 1] != b]
    assert len(runs) == len(set(runs)) == 3 + 2 + 1
    assert block_order(lengths, block_size=4, seed=1, epoch=0).tolist() == order.tolist()
    assert block_order(lengths, block_size=4, seed=1, epoch=1).tolist() != order.tolist()


def test_golden_orders_do_not_drift() -> None:
    # Pinned values: a change here silently reshuffles every resumed training run.
    assert sample_order(8, seed=0, epoch=0).tolist() == [2, 4, 3, 6, 5, 0, 1, 7]
    assert block_order(np.array([3, 2]), block_size=2, seed=0, epoch=0).tolist() == [2, 3, 4, 0, 1]


def test_shard_errors_are_clear() -> None:
    with pytest.raises(ShardError, match=r"shard_index must be in \[0, 3\].*got 4"):
        ShardSpec(index=4, count=4)
    with pytest.raises(ShardError, match="shard_count must be >= 1"):
        ShardSpec(index=0, count=0)
    with pytest.raises(ShardError, match="must be an int"):
        ShardSpec(index=True, count=2)
    with pytest.raises(ShardError, match="cannot give each of 5 shards"):
        shard_order(np.arange(3), shard_index=0, shard_count=5, drop_remainder=True)


def _fake_module(name: str, **attributes: object) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


def test_shard_spec_auto_follows_the_running_framework(monkeypatch: pytest.MonkeyPatch) -> None:
    # The shard is an input of the order: auto() must pick this host's part as its docstring says.
    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    assert ShardSpec.auto() == ShardSpec(index=0, count=1)  # no framework: the whole epoch

    monkeypatch.setitem(
        sys.modules, "jax", _fake_module("jax", process_index=lambda: 2, process_count=lambda: 4)
    )
    assert ShardSpec.auto() == ShardSpec(index=2, count=4)  # JAX imported: its process index

    def torch_distributed(initialized: bool) -> types.ModuleType:
        return _fake_module(
            "torch.distributed",
            is_available=lambda: True,
            is_initialized=lambda: initialized,
            get_rank=lambda: 1,
            get_world_size=lambda: 3,
        )

    for initialized in (False, True):
        dist = torch_distributed(initialized)
        monkeypatch.setitem(sys.modules, "torch.distributed", dist)
        monkeypatch.setitem(sys.modules, "torch", _fake_module("torch", distributed=dist))
        if initialized:
            assert ShardSpec.auto() == ShardSpec(index=1, count=3)  # a process group wins over JAX
        else:
            assert ShardSpec.auto() == ShardSpec(index=2, count=4)  # torch imported, no process group
