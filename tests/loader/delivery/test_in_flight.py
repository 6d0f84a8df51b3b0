"""How much the Loader keeps in flight (pi_loader.delivery._in_flight) and what it reports:
every worker busy by default, bounded by memory, an idling setting warned about, and the order
the same whatever the depth (issue 23)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_loader import Dataset, IdleWorkersWarning, Loader, SampleSpec, ShardSpec, default_num_workers
from pi_loader.delivery._in_flight import (
    MAX_DEPTH_PER_WORKER,
    RESERVED_CORES,
    InFlightPlan,
    default_prefetch_bytes,
    plan_in_flight,
)

from tests.fixtures.lake_factory import FakeLake
from tests.loader.conftest import LOADER_EPISODES, LOADER_STEPS


def test_default_workers_follow_the_cores_leaving_the_trainer_its_share() -> None:
    assert default_num_workers(16) == 16 - RESERVED_CORES == 14
    assert default_num_workers(2) == 1 and default_num_workers(1) == 1
    assert default_num_workers() >= 1


def test_auto_depth_keeps_every_worker_busy_within_the_memory_budget() -> None:
    batch = 32 * 3 * 224 * 224 * 3  # 14.4 MB: the GPU host's batch
    plan = plan_in_flight(num_workers=14, batch_bytes=batch, prefetch_batches=None, prefetch_bytes=2**31)
    assert plan.initial == 28 and plan.maximum == MAX_DEPTH_PER_WORKER * 14 and plan.idle_workers == 0
    # a budget for 10 batches caps the depth and says which workers it idles, and how to fix it
    small = plan_in_flight(
        num_workers=14, batch_bytes=batch, prefetch_batches=None, prefetch_bytes=10 * batch
    )
    assert small.maximum == 10 and small.initial == 10 and small.idle_workers == 4
    assert "raise prefetch_bytes" in small.reason
    assert 64 * 2**20 <= default_prefetch_bytes() <= 2 * 2**30


def test_a_fixed_depth_below_the_workers_is_reported() -> None:
    plan = plan_in_flight(num_workers=14, batch_bytes=1, prefetch_batches=4, prefetch_bytes=None)
    assert (plan.initial, plan.maximum, plan.idle_workers) == (4, 4, 10)
    assert "only 4 of 14 workers" in plan.reason and "prefetch_batches=None" in plan.reason


@given(
    workers=st.integers(1, 64),
    batch_bytes=st.integers(1, 2**28),
    budget=st.integers(1, 2**33),
)
def test_plan_invariants(workers: int, batch_bytes: int, budget: int) -> None:
    plan = plan_in_flight(
        num_workers=workers, batch_bytes=batch_bytes, prefetch_batches=None, prefetch_bytes=budget
    )
    assert 1 <= plan.initial <= plan.maximum <= MAX_DEPTH_PER_WORKER * workers
    # never more bytes in flight than the budget, unless one batch alone is over it
    assert plan.maximum * batch_bytes <= budget or plan.maximum == 1
    assert plan.idle_workers == max(0, workers - plan.maximum)
    depth = plan.initial
    for _ in range(200):
        grown = plan.grow(depth)
        assert depth <= grown <= plan.maximum
        depth = grown
    assert depth == plan.maximum


def test_bad_settings_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="num_workers must be >= 1"):
        plan_in_flight(num_workers=0, batch_bytes=1, prefetch_batches=None, prefetch_bytes=None)
    with pytest.raises(ValueError, match="prefetch_bytes must be >= 1, got 0"):
        plan_in_flight(num_workers=2, batch_bytes=1, prefetch_batches=None, prefetch_bytes=0)
    with pytest.raises(ValueError, match="initial <= maximum"):
        InFlightPlan(initial=5, maximum=4, num_workers=2, idle_workers=0, reason="")


def _ids(loader: Loader) -> list[tuple[str, int]]:
    return [(str(e), int(s)) for b in loader for e, s in zip(b["episode_id"], b["step"], strict=True)]


def _dataset(lake: FakeLake) -> Dataset:
    return Dataset(lake.layout, spec=SampleSpec(cameras=("wrist",), action_horizon=3), seed=2)


def test_loader_defaults_use_workers_and_report_the_plan(loader_lake: FakeLake) -> None:
    ds = _dataset(loader_lake)
    with Loader(ds, batch_size=4, shard=ShardSpec(0, 1)) as loader:
        ids = _ids(loader)
        stats = loader.stats()
    assert stats.num_workers == default_num_workers() >= 1
    assert stats.in_flight_limit >= stats.in_flight_depth >= min(2 * stats.num_workers, stats.in_flight_limit)
    assert stats.idle_workers == 0
    # the same samples, in the same order, as building every batch in this thread
    assert ids == _ids(Loader(ds, batch_size=4, shard=ShardSpec(0, 1), num_workers=0))
    assert len(ids) == LOADER_EPISODES * LOADER_STEPS


def test_depth_changes_speed_never_the_batches(loader_lake: FakeLake) -> None:
    ds = _dataset(loader_lake)
    reference = _ids(Loader(ds, batch_size=3, shard=ShardSpec(0, 1), num_workers=0))
    for workers, depth in ((2, 1), (2, 7), (3, None)):
        with Loader(
            ds, batch_size=3, shard=ShardSpec(0, 1), num_workers=workers, prefetch_batches=depth
        ) as loader:
            assert _ids(loader) == reference, (workers, depth)


def test_an_idling_setting_warns_and_shows_in_stats(loader_lake: FakeLake) -> None:
    ds = _dataset(loader_lake)
    with pytest.warns(IdleWorkersWarning, match=r"only 1 of 3 workers can ever be busy"):
        loader = Loader(ds, batch_size=4, shard=ShardSpec(0, 1), num_workers=3, prefetch_batches=1)
    assert loader.stats().idle_workers == 2
    loader.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdleWorkersWarning)
        Loader(ds, batch_size=4, shard=ShardSpec(0, 1), num_workers=3).close()  # auto: no warning
    with pytest.raises(ValueError, match="prefetch_bytes must be an int >= 1"):
        Loader(ds, batch_size=4, shard=ShardSpec(0, 1), prefetch_bytes=0)


def test_a_tiny_memory_budget_bounds_the_depth(loader_lake: FakeLake) -> None:
    ds = _dataset(loader_lake)
    with pytest.warns(IdleWorkersWarning, match="memory budget"):
        loader = Loader(ds, batch_size=4, shard=ShardSpec(0, 1), num_workers=2, prefetch_bytes=1)
    with loader:
        batches = list(loader)
        assert loader.stats().in_flight_limit == 1
    assert sum(len(b["step"]) for b in batches) == LOADER_EPISODES * LOADER_STEPS
    assert np.all(np.concatenate([b["step"] for b in batches]) >= 0)


def test_workers_start_from_a_fresh_forkserver_after_its_socket_was_removed(loader_lake: FakeLake) -> None:
    import shutil
    from multiprocessing import process

    from pi_loader._processes import FORKSERVER, default_start_method, warm_forkserver

    if default_start_method() != FORKSERVER:
        pytest.skip("no forkserver on this platform")
    ds = _dataset(loader_lake)
    assert warm_forkserver()  # a Dataset open also warmed it
    before = _ids(Loader(ds, batch_size=4, shard=ShardSpec(0, 1), num_workers=1))
    # what a tmp cleaner (or a test runner's tmp_path teardown) does to multiprocessing's dir
    tempdir = getattr(process.current_process(), "_config").get("tempdir")  # noqa: B009
    assert tempdir is not None
    shutil.rmtree(tempdir)
    try:
        assert _ids(Loader(ds, batch_size=4, shard=ShardSpec(0, 1), num_workers=1)) == before
    finally:
        Path(tempdir).mkdir(exist_ok=True)  # for multiprocessing's own clean-up at exit
