"""`pi_loader.reading._camera_lists.CameraLists`: equal to the tuple of tuples it replaces for
seeded selections, pickled with its index out of band (what loader workers map instead of
copying), and refusing an index that does not fit its lists."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pyarrow as pa
import pytest
from pi_loader.reading._camera_lists import CameraLists
from pi_loader.selection._selection import _camera_lists

RIGS = [("front", "wrist"), ("front",), (), ("top", "front", "wrist")]


@pytest.mark.parametrize("seed", range(5))
def test_camera_lists_equal_each_rows_list(seed: int) -> None:
    rng = random.Random(seed)
    rows = [list(rng.choice(RIGS)) for _ in range(rng.randrange(1, 3000))]
    column = pa.chunked_array([rows[:7], rows[7:]] if len(rows) > 7 else [rows], pa.list_(pa.string()))
    lists = _camera_lists(column)
    expected = tuple(tuple(r) for r in rows)
    assert len(lists) == len(expected) and lists == expected and tuple(lists) == expected
    assert lists[len(rows) - 1] == expected[-1] and lists[-1] == expected[-1] and lists[1:4] == expected[1:4]
    assert lists.counts().tolist() == [len(r) for r in rows]
    assert len(lists.distinct) <= len(RIGS) and lists.indices.dtype == np.int32


def test_the_index_travels_out_of_band() -> None:
    lists = CameraLists(RIGS, np.arange(200_000, dtype=np.int32) % len(RIGS))
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(lists, protocol=5, buffer_callback=buffers.append)
    assert len(payload) < 2_000, "one pickle reference per episode is what this replaces"
    assert sum(b.raw().nbytes for b in buffers) == lists.indices.nbytes
    again = pickle.loads(payload, buffers=buffers)
    assert again == lists and again[199_999] == RIGS[199_999 % len(RIGS)]


@pytest.mark.parametrize(
    ("index", "match"),
    [
        (np.array([0, 4], np.int32), "must lie in"),
        (np.array([-1], np.int32), "must lie in"),
        (np.array([0], np.int64), "int32"),
        (np.zeros((2, 2), np.int32), "1-d"),
    ],
)
def test_an_index_that_does_not_fit_is_refused(index: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CameraLists(RIGS, index)
