"""Batches built a batch at a time (`Dataset.samples`) and carried in shared memory by workers."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from pi_loader import Dataset, Loader, SampleSpec, collate
from pi_loader.delivery._shared_batches import SlotPool, SlotTicket, SlotWriter, shared_memory_available

from tests.fixtures.lake_factory import FakeLake
from tests.loader.conftest import LOADER_CAMERAS, LOADER_EPISODES, LOADER_STEPS

N = LOADER_EPISODES * LOADER_STEPS
needs_shm = pytest.mark.skipif(not shared_memory_available(), reason="memfd and /proc are Linux-only")


def _assert_batches_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize(
    "spec",
    [
        SampleSpec(cameras=LOADER_CAMERAS, frame_history=2, frame_stride=3, action_horizon=6),
        SampleSpec(cameras=("wrist",), action_horizon=2, normalize="mean_std", crop=(2, 4, 24, 40)),
        SampleSpec(cameras=(), action_horizon=LOADER_STEPS, normalize="min_max"),
    ],
)
def test_batch_equals_collated_samples(loader_lake: FakeLake, spec: SampleSpec) -> None:
    ds = Dataset(loader_lake.layout, spec=spec, seed=3)
    # episode starts, ends and repeats, so history padding and action padding are both hit
    indices = [0, LOADER_STEPS - 1, LOADER_STEPS, 1, N - 1, 0, 2 * LOADER_STEPS + 5]
    _assert_batches_equal(ds.samples(indices), collate([ds.sample(i) for i in indices]))


def test_batch_rejects_bad_indices(loader_lake: FakeLake) -> None:
    ds = Dataset(loader_lake.layout, spec=SampleSpec(cameras=(), action_horizon=2), seed=3)
    with pytest.raises(IndexError, match=f"flat sample index {N} out of range"):
        ds.samples([0, N])
    with pytest.raises(IndexError, match="flat sample index -1"):
        ds.samples([-1])
    with pytest.raises(ValueError, match="no samples"):
        ds.samples([])


def test_batch_writes_images_where_the_allocator_says(loader_lake: FakeLake) -> None:
    ds = Dataset(loader_lake.layout, spec=SampleSpec(cameras=("front",), action_horizon=2), seed=3)
    given: dict[str, np.ndarray] = {}

    def allocate(key: str, shape: tuple[int, ...]) -> np.ndarray:
        given[key] = np.zeros(shape, np.uint8)
        return given[key]

    key = "observation.images.front"
    batch = ds.samples([4, 9], allocate=allocate)
    assert batch[key] is given[key] and given[key].shape == (2, *ds.image_shapes()[key])
    np.testing.assert_array_equal(batch[key][1], np.asarray(ds.sample(9)[key]))


@needs_shm
def test_worker_batches_in_shared_memory_equal_in_process_batches_and_stay_intact(
    loader_lake: FakeLake,
) -> None:
    spec = SampleSpec(cameras=LOADER_CAMERAS, frame_history=1, action_horizon=3)
    ds = Dataset(loader_lake.layout, spec=spec, seed=8)
    want = list(Loader(ds, batch_size=4, num_workers=0))
    with Loader(ds, batch_size=4, num_workers=2, prefetch_batches=2, mp_context="fork") as loader:
        kept = list(loader)  # every batch held while later ones are written: no slot reused early
        held = loader.stats()
        assert held.shared_memory_slots >= len(kept)
        image_bytes = sum(int(np.prod(s)) for s in ds.image_shapes().values())
        assert held.shared_memory_bytes >= held.shared_memory_slots * 4 * image_bytes
        assert len(kept) == len(want)
        for got, expected in zip(kept, want, strict=True):
            _assert_batches_equal(got, expected)
        del kept, got
        gc.collect()
        again = [b["step"].copy() for b in loader]  # each batch dropped before the next
        assert loader.stats().shared_memory_slots <= 2 + 2 + 1  # prefetch + 2 free, one in hand
        assert len(again) == len(want)
    with Loader(ds, batch_size=4, num_workers=1, shared_memory=False) as pickled:
        for got, expected in zip(pickled, want, strict=True):
            _assert_batches_equal(got, expected)
        assert pickled.stats().shared_memory_slots == 0


@needs_shm
def test_slot_returns_to_the_pool_only_when_every_view_is_gone() -> None:
    pool = SlotPool(1024, max_free_slots=1)
    slot = pool.acquire()
    allocate, placements = SlotWriter().allocator(slot.ticket)
    written = allocate("a", (4, 8))
    written[:] = np.arange(32, dtype=np.uint8).reshape(4, 8)
    allocate("b", (2,))[:] = 7
    arrays = pool.arrays(slot, placements)
    view = arrays["a"][1:3]
    del arrays, written
    gc.collect()
    assert pool.acquire() is not slot  # the view still holds the slot: a new one is made
    np.testing.assert_array_equal(view, np.arange(8, 24, dtype=np.uint8).reshape(2, 8))
    del view
    gc.collect()
    assert pool.acquire() is slot  # back in the pool, reused
    assert pool.slot_count == 2


def test_writer_falls_back_to_plain_arrays_when_the_slot_cannot_be_opened() -> None:
    allocate, placements = SlotWriter().allocator(SlotTicket(0, "/nonexistent/fd/99", 1024))
    array = allocate("a", (3, 3))
    assert array.shape == (3, 3) and placements == {}


@needs_shm
def test_writer_places_what_fits_and_hands_back_the_rest() -> None:
    pool = SlotPool(160)
    allocate, placements = SlotWriter().allocator(pool.acquire().ticket)
    allocate("first", (100,))  # takes bytes 0..127 (the next array starts cache-line aligned)
    allocate("too_big", (64,))  # 128 + 64 > 160: a plain array, pickled
    assert list(placements) == ["first"]


def test_a_batch_reads_each_chunk_once_even_with_tiny_caches(loader_lake: FakeLake) -> None:
    spec = SampleSpec(cameras=LOADER_CAMERAS, frame_history=1, action_horizon=2)
    ds = Dataset(loader_lake.layout, spec=spec, seed=3, episode_cache_size=1, chunk_cache_size=1)
    # samples of three episodes, interleaved: a sample-by-sample walk would re-read them all
    indices = [0, LOADER_STEPS, 2 * LOADER_STEPS, 1, LOADER_STEPS + 1, 2 * LOADER_STEPS + 1]
    batch = ds.samples(indices)
    # steps 0 and 1 show chunk 0 of both cameras: one row group per (episode, camera), one steps
    # row group per episode
    assert ds.read_stats["video_reads"] == 3 * len(LOADER_CAMERAS)
    assert ds.read_stats["steps_reads"] == 3
    reference = Dataset(loader_lake.layout, spec=spec, seed=3)
    _assert_batches_equal(batch, collate([reference.sample(i) for i in indices]))


@needs_shm
def test_a_batchs_large_numeric_arrays_travel_in_its_slot_too(
    loader_lake: FakeLake, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pi_loader.delivery import _workers
    from pi_loader.delivery._shared_batches import _SlotArray

    monkeypatch.setattr(_workers, "_SLOT_MIN_BYTES", 1)  # this lake's action chunks are small
    spec = SampleSpec(cameras=LOADER_CAMERAS, action_horizon=4, normalize="mean_std")
    ds = Dataset(loader_lake.layout, spec=spec, seed=2)
    want = list(Loader(ds, batch_size=5, num_workers=0))
    with Loader(ds, batch_size=5, num_workers=1, prefetch_batches=2, mp_context="fork") as loader:
        kept = list(loader)  # all held: a reused slot would show as changed earlier batches
        for got, expected in zip(kept, want, strict=True):
            _assert_batches_equal(got, expected)
            for key in ("action", "observation.state", "action_is_pad", "observation.images.front"):
                assert isinstance(got[key].base, _SlotArray), key  # in the slot, not pickled
            assert not isinstance(got["episode_id"].base, _SlotArray)  # strings are pickled
