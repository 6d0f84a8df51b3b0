"""A torch DataLoader worker's reused shared-memory slots (pi_loader.samples._slots).

The property that matters: a slot is reused only when nothing of its batch lives anywhere, so a
batch a trainer holds (or one a custom collate sends as numpy) is never overwritten by a later
one, and the tensors the main process gets hold the same values as direct indexing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pi_loader import Dataset
from pi_loader.samples import _slots

from tests.fixtures.lake_factory import FakeLake, write_lake

torch = pytest.importorskip("torch")
torch_data = pytest.importorskip("torch.utils.data")

pytestmark = pytest.mark.skipif(_slots.pool() is None, reason="needs memfd and /proc (Linux)")

CAMERAS = ("front", "wrist")
H = 3
BATCH = 4


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    # 4 episodes x 12 steps = 48 samples: 12 batches of 4, more than MAX_SLOTS
    return write_lake(tmp_path_factory.mktemp("lake"), episodes=4, steps=12, cameras=CAMERAS, size=(40, 24))


KEYS = ("observation.images.front", "observation.images.wrist", "observation.state", "action")


def _check(ds: Dataset, batches: list[dict[str, Any]]) -> None:
    got = [
        (episode_id, int(batch["step"][i]), *(np.asarray(batch[key][i]) for key in KEYS))
        for batch in batches
        for i, episode_id in enumerate(batch["episode_id"])
    ]
    assert len(got) == len(ds)
    for i, (episode_id, step, *arrays) in enumerate(got):
        want = ds[i]
        assert (episode_id, step) == (want["episode_id"], want["step"])
        for key, value in zip(KEYS, arrays, strict=True):
            np.testing.assert_array_equal(value, np.asarray(want[key]), err_msg=f"sample {i} {key}")


def test_held_batches_are_never_overwritten(lake: FakeLake) -> None:
    ds = Dataset(lake.layout, seed=5, action_horizon=H)
    loader = torch_data.DataLoader(ds, batch_size=BATCH, num_workers=1)
    held = list(loader)  # every batch kept: more than the worker's slots
    assert len(held) > _slots.MAX_SLOTS
    in_slots = sum(not batch["observation.images.front"].is_shared() for batch in held)
    assert 0 < in_slots <= _slots.MAX_SLOTS  # the rest took torch's own shared memory
    _check(ds, held)


def test_released_slots_are_reused_and_hold_the_right_values(lake: FakeLake) -> None:
    ds = Dataset(lake.layout, seed=6, action_horizon=H)
    loader = torch_data.DataLoader(ds, batch_size=BATCH, num_workers=1, persistent_workers=True)
    for _ in range(2):  # two epochs, each batch dropped before the next: slots come back
        seen: list[dict[str, Any]] = []
        shared = 0
        for batch in loader:
            shared += sum(value.is_shared() for value in batch.values() if isinstance(value, torch.Tensor))
            # a copy of what the test checks, so the batch itself is released
            seen.append(
                {"episode_id": batch["episode_id"], "step": batch["step"].clone()}
                | {key: batch[key].clone() for key in KEYS}
            )
            del batch
        assert shared == 0  # every tensor came through a slot, none through torch's path
        _check(ds, seen)


def test_a_view_keeps_its_batch(lake: FakeLake) -> None:
    ds = Dataset(lake.layout, seed=7, action_horizon=H)
    loader = torch_data.DataLoader(ds, batch_size=BATCH, num_workers=1)
    views: list[Any] = []
    for batch in loader:
        views.append(batch["observation.images.front"][1:])  # only a view: the tensor is gone
    got = [v for view in views for v in view]
    want = [ds[i]["observation.images.front"] for i in range(len(ds)) if i % BATCH]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.numpy(), np.asarray(w))


def _as_numpy(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [dict(r) for r in rows]  # the rows' arrays (views of the slot), pickled by torch later


def test_a_custom_collate_sending_numpy_views_gets_its_own_values(lake: FakeLake) -> None:
    ds = Dataset(lake.layout, seed=8, action_horizon=H)
    loader = torch_data.DataLoader(ds, batch_size=BATCH, num_workers=1, collate_fn=_as_numpy)
    rows = [row for batch in loader for row in batch]
    assert len(rows) == len(ds)
    for i, row in enumerate(rows):
        want = ds[i]
        for key in KEYS:
            np.testing.assert_array_equal(row[key], np.asarray(want[key]), err_msg=f"sample {i} {key}")


def test_slot_arrays_do_not_overlap_and_refuse_what_does_not_fit() -> None:
    pool = _slots.SlotPool()
    slot = pool.acquire(4096)
    assert slot is not None
    a = slot.array((10, 10), np.dtype(np.uint8))
    b = slot.array((3,), np.dtype(np.float32))
    assert a is not None and b is not None
    assert not np.shares_memory(a[0], b[0]) and b[1] % 64 == 0 and a[1] >= _slots.HEADER
    assert slot.array((4096,), np.dtype(np.uint8)) is None  # past the end: torch's path
    # the slot is held while its arrays live in this process, free once they are gone
    slot.end()
    assert pool.acquire(4096) is not slot
    del a, b
    assert slot.free()
