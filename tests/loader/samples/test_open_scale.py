"""Opening a Dataset reads only the episodes rows of its selection, and what a worker receives
grows with the number of episodes, never with the number of samples (issue 11, items 2 and 3)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from pi_loader import Dataset, SampleSpec, SnapshotDataMissingError

from tests.fixtures.lake_factory import write_lake

SPEC = SampleSpec(cameras=("front",), action_horizon=2)


def _opened_files(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths of every Parquet file pyarrow opens from now on (footer, file or dataset)."""
    opened: list[str] = []
    read_metadata, parquet_init, dataset = pq.read_metadata, pq.ParquetFile.__init__, pads.dataset

    def record_metadata(where: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(where))
        return read_metadata(where, *args, **kwargs)

    def record_file(self: pq.ParquetFile, source: Any, *args: Any, **kwargs: Any) -> None:
        opened.append(str(source))
        parquet_init(self, source, *args, **kwargs)

    def record_dataset(source: Any, *args: Any, **kwargs: Any) -> Any:
        opened.extend(str(s) for s in (source if isinstance(source, list) else [source]))
        return dataset(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_metadata", record_metadata)
    monkeypatch.setattr(pq.ParquetFile, "__init__", record_file)
    monkeypatch.setattr(pads, "dataset", record_dataset)
    return opened


def test_open_reads_no_steps_or_video_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = write_lake(tmp_path / "lake", episodes=4, steps=6, cameras=("front",), size=(16, 16), group=2)
    opened = _opened_files(monkeypatch)
    ds = Dataset(lake.layout, spec=SPEC, seed=1)
    assert opened and all(Path(p).parent.name == "episodes" for p in opened), opened
    assert len(ds) == 4 * 6 and set(ds.table_versions) == {"episodes", "steps", "video"}
    # Stronger: with every steps and video data file deleted, opening still works (only the
    # Delta logs of those tables are read, for their versions); the first sample says what is gone.
    for table in ("steps", "video"):
        for data_file in (tmp_path / "lake" / table).glob("*.parquet"):
            data_file.unlink()
    again = Dataset(lake.layout, spec=SPEC, seed=1)
    assert again.snapshot.fingerprint == ds.snapshot.fingerprint
    assert len(again) == len(ds) and again.stats["action"].mean.tolist() == ds.stats["action"].mean.tolist()
    with pytest.raises(SnapshotDataMissingError, match="of the steps table at version"):
        again[0]


def _pickled_size(root: Path, *, episodes: int, steps: int) -> int:
    lake = write_lake(root, episodes=episodes, steps=steps, cameras=("front",), size=(16, 16), group=16)
    ds = Dataset(lake.layout, spec=SPEC, seed=0)
    ds.samples(list(range(0, len(ds), 7)))  # warm caches: they must not travel
    return len(pickle.dumps(ds))


def test_what_workers_receive_grows_per_episode_not_per_step(tmp_path: Path) -> None:
    few = _pickled_size(tmp_path / "few", episodes=5, steps=30)
    many = _pickled_size(tmp_path / "many", episodes=50, steps=30)
    long = _pickled_size(tmp_path / "long", episodes=5, steps=600)
    per_episode = (many - few) / 45
    # ids, attempt ids, a few int32/int64 entries and the camera tuple per episode: ~100-200 B;
    # the old per-step arrays were ~124 B per *sample*, i.e. 30 x 124 = 3.7 kB per episode here
    assert per_episode < 400, (few, many, per_episode)
    # 20x the steps per episode: the same pickle, give or take a few bytes of larger numbers
    assert abs(long - few) < 64, (few, long)
