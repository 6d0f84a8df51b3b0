"""Packed per-episode strings (pi_loader.reading._packed) and the Dataset image workers map
(pi_loader.delivery._shared_dataset): same values as the tuples they replace, shared rather than copied."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pi_loader import Dataset
from pi_loader.delivery._shared_dataset import SharedDatasetImage, SharedDatasetRef
from pi_loader.reading._packed import PackedStrings

names = st.lists(st.text(min_size=0, max_size=12), max_size=40)


@given(names)
def test_packed_strings_equal_the_tuple(values: list[str]) -> None:
    packed = PackedStrings.of(values)
    assert len(packed) == len(values) and list(packed) == values and packed == tuple(values)
    for i in range(-len(values), len(values)):
        assert packed[i] == values[i]
    assert packed[1:5] == tuple(values[1:5])
    assert pickle.loads(pickle.dumps(packed, protocol=5)) == packed


@given(names, st.integers(0, 10), st.integers(0, 10))
def test_packed_from_a_sliced_arrow_column(values: list[str], start: int, length: int) -> None:
    column = pa.array(values, pa.string()).slice(start, length)
    want = column.to_pylist()
    assert list(PackedStrings.from_arrow(column)) == want
    chunked = pa.chunked_array([pa.array(values[:3], pa.string()), pa.array(values[3:], pa.string())])
    assert list(PackedStrings.from_arrow(chunked)) == values


def test_packed_refuses_nulls_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="null"):
        PackedStrings.from_arrow(pa.array(["a", None]))
    with pytest.raises(IndexError, match="out of range"):
        PackedStrings.of(["a"])[1]
    assert PackedStrings.of(["é", "ü-1"])[1] == "ü-1"


def _load_and_read(ref: SharedDatasetRef, indices: list[int], out: Any) -> None:
    dataset = ref.load()
    offsets = dataset._index.offsets
    states = [dataset[i]["observation.state"] for i in indices]
    out.put((states, offsets.flags.writeable, dataset.episode_ids))


def test_workers_map_the_dataset_image_and_read_the_same_samples(loader_lake, monkeypatch) -> None:
    # every buffer out of band, however small (the fixture lake's arrays are tiny)
    monkeypatch.setattr("pi_loader.delivery._shared_dataset._OUT_OF_BAND_BYTES", 0)
    ds = Dataset(loader_lake.layout, action_horizon=3)
    image = SharedDatasetImage(ds)
    assert image.shared_bytes >= ds._index.offsets.nbytes
    try:
        indices = [0, len(ds) // 2, len(ds) - 1]
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        proc = ctx.Process(target=_load_and_read, args=(image.ref, indices, out))
        proc.start()
        states, writeable, episode_ids = out.get(timeout=300)
        proc.join(timeout=60)
        assert proc.exitcode == 0
        for i, state in zip(indices, states, strict=True):
            assert np.array_equal(state, np.asarray(ds[i]["observation.state"]))
        assert episode_ids == ds.episode_ids
        assert writeable is False, "the worker's sample index is a view of the shared map, not a copy"
    finally:
        image.close()


def test_large_arrays_travel_out_of_band_as_read_only_views() -> None:
    ids = PackedStrings.of(f"ep-{i}" for i in range(30_000))
    big: dict[str, Any] = {"offsets": np.arange(200_000, dtype=np.int64), "ids": ids}
    image = SharedDatasetImage(big)
    try:
        assert image.shared_bytes >= big["offsets"].nbytes
        assert len(image.ref.payload) < 10_000, "the large buffers are not in the pickle"
        loaded = image.ref.load()
        assert np.array_equal(loaded["offsets"], big["offsets"]) and not loaded["offsets"].flags.writeable
        assert loaded["ids"] == big["ids"] and loaded["ids"][29_999] == "ep-29999"
        if image.ref.path.startswith("/proc/"):
            assert os.path.exists(image.ref.path)
    finally:
        image.close()
    if not image.ref.path.startswith("/proc/"):
        assert not os.path.exists(image.ref.path), "the temp file is removed on close"
