"""A loader worker reads a Dataset's per-episode arrays from the one file the main process shares
(`pi_loader.delivery._shared_dataset`), never from a copy of its own: every such array it holds
(sample index, locators, packed ids, video sizes) is a read-only view of that mapping, whatever
the selection's size. What a copy would cost: ~110 bytes per selected episode in every worker,
110 MB each at 1,000,000 episodes (benchmarks/scale/read_side.py measures USS and PSS).
A Dataset's own Loader workers now get no per-episode array at all (test_batch_episodes); the
shared file still carries a Mixture's and the nvdec builder's."""

from __future__ import annotations

import mmap
import multiprocessing as mp
from typing import Any

import numpy as np
from pi_loader import Dataset
from pi_loader.delivery._shared_dataset import SharedDatasetImage, SharedDatasetRef


def _per_episode_arrays(dataset: Any) -> dict[str, np.ndarray]:
    gather = dataset._gather
    locators = gather._locators
    ids, attempts = dataset._packed_ids
    arrays = {
        "index.lengths": dataset._index.lengths,
        "index.offsets": dataset._index.offsets,
        "video_sizes": gather._sizes,
        "episode_cameras.indices": gather._episode_cameras.indices,
        "episode_ids.data": ids._data,
        "episode_ids.offsets": ids._offsets,
        "attempt_ids.data": attempts._data,
        "attempt_ids.offsets": attempts._offsets,
    }
    for name in (
        "steps_file",
        "steps_row_group",
        "video_file",
        "video_row_group",
        "camera_column",
        "chunk_frames",
    ):
        arrays[f"locators.{name}"] = getattr(locators, name)
    return arrays


def _mapped_from(array: np.ndarray) -> str:
    """What the array's memory belongs to: "map" (a view of an mmap), else the base's type."""
    base: Any = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    if isinstance(base, mmap.mmap):
        return "map"
    return type(base).__name__


def _report(ref: SharedDatasetRef, out: Any) -> None:
    dataset = ref.load()
    arrays = _per_episode_arrays(dataset)
    out.put(
        {
            name: (_mapped_from(a), bool(a.flags.writeable), a.tobytes())
            for name, a in arrays.items()
            if a.nbytes  # an empty array (no cameras) has nothing to share
        }
    )


def test_workers_hold_the_per_episode_arrays_as_views_of_the_shared_file(loader_lake, monkeypatch) -> None:
    # every buffer out of band, however small (the fixture lake's arrays are tiny; at 1,000
    # episodes and up they are over the 64 kB threshold anyway)
    monkeypatch.setattr("pi_loader.delivery._shared_dataset._OUT_OF_BAND_BYTES", 0)
    ds = Dataset(loader_lake.layout, action_horizon=3)
    mine = _per_episode_arrays(ds)
    image = SharedDatasetImage(ds)
    try:
        assert image.shared_bytes >= sum(a.nbytes for a in mine.values())
        ctx = mp.get_context("forkserver")
        out = ctx.Queue()
        proc = ctx.Process(target=_report, args=(image.ref, out))
        proc.start()
        seen = out.get(timeout=300)
        proc.join(timeout=60)
        assert proc.exitcode == 0
    finally:
        image.close()
    assert seen, "no per-episode array reached the worker"
    for name, (owner, writeable, data) in seen.items():
        assert owner == "map", (
            f"{name} is a private copy in the worker ({owner}), not a view of the shared file"
        )
        assert not writeable, f"{name} is writeable in the worker: not the read-only shared map"
        assert data == mine[name].tobytes(), f"{name} differs from the main process's"
