"""A saved file index read a row at a time (pi_loader.reading._host_index.IndexRows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pi_loader.reading._host_index import IndexRows


def test_rows_read_back_equal_the_saved_array(tmp_path: Path) -> None:
    entries = np.arange(40 * 8, dtype=np.int64).reshape(40, 8) * 7919
    path = tmp_path / "index.npy"
    np.save(path, entries, allow_pickle=False)
    rows = IndexRows.open(str(path))
    assert rows.shape == (40, 8) and len(rows) == 40
    for i in (0, 17, 39):
        assert np.array_equal(rows[i], entries[i])
        assert rows[i, 3] == entries[i, 3]
    with pytest.raises(IndexError, match="row 40"):
        rows[40]


@pytest.mark.parametrize(
    "array, message",
    [
        (np.zeros((3, 8), np.int32), "not an index"),
        (np.zeros(8, np.int64), "not an index"),
        (np.asfortranarray(np.zeros((3, 8), np.int64)), "not an index"),
    ],
)
def test_what_is_not_an_index_is_refused(tmp_path: Path, array: np.ndarray, message: str) -> None:
    path = tmp_path / "bad.npy"
    np.save(path, array, allow_pickle=False)
    with pytest.raises(ValueError, match=message):
        IndexRows.open(str(path))


def test_a_truncated_index_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "short.npy"
    np.save(path, np.ones((10, 8), np.int64), allow_pickle=False)
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(ValueError, match="too short"):
        IndexRows.open(str(path))
