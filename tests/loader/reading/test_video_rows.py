"""Per-sample reads: the steps row groups holding a sample's steps and one video row group per
camera per sample, found through the episodes rows' locators
(pi_loader.reading._row_groups, _steps, _video)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from pi_loader import Dataset, Loader, PiLoaderError, SampleSpec
from pi_loader.reading._row_groups import RowGroupReader

from tests.fixtures.lake_factory import (
    CHUNK_FRAMES,
    FakeLake,
    _rows,
    episode_rows,
    make_episode,
)
from tests.loader.conftest import LOADER_CAMERAS, LOADER_STEPS


def _record_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, tuple[str, ...]]]:
    """Every row group pyarrow reads from now on: (file, row group, columns); whole-file reads fail."""
    reads: list[tuple[str, int, tuple[str, ...]]] = []
    read_row_group = pq.ParquetFile.read_row_group

    def recording(self: pq.ParquetFile, i: int, columns: Any = None, **kwargs: Any) -> Any:
        reads.append((self._path, i, tuple(columns or ())))
        return read_row_group(self, i, columns=columns, **kwargs)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a whole-file or multi-row-group read")

    init = pq.ParquetFile.__init__

    def remember_path(self: pq.ParquetFile, source: Any, *args: Any, **kwargs: Any) -> None:
        self._path = str(source)
        init(self, source, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "__init__", remember_path)
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", recording)
    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", refuse)
    monkeypatch.setattr(pq.ParquetFile, "read", refuse)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", refuse)
    return reads


def _locator(lake: FakeLake, episode_id: str) -> dict[str, Any]:
    from pi_format.lake import read_committed

    rows = read_committed(lake.layout, ["steps_file", "steps_row_group", "video_file", "video_row_groups"])
    return next(r for r in rows.to_pylist() if r["episode_id"] == episode_id)


def _record_ranges(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Every ranged read of a chunk from now on: (file, offset, size)."""
    ranges: list[tuple[str, int, int]] = []
    read_range = RowGroupReader.read_range

    def recording(self: RowGroupReader, uri: str, path: str, offset: int, size: int, **kw: Any) -> bytes:
        ranges.append((path, offset, size))
        return read_range(self, uri, path, offset, size, **kw)

    monkeypatch.setattr(RowGroupReader, "read_range", recording)
    return ranges


def test_an_uncached_sample_reads_one_steps_row_group_and_one_video_chunk_per_camera(
    loader_lake: FakeLake, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SampleSpec(cameras=LOADER_CAMERAS, action_horizon=3)
    # another process of the host indexed the steps and video files
    Dataset(loader_lake.layout, spec=spec).sample(0)
    ds = Dataset(loader_lake.layout, spec=spec, seed=1)
    reads = _record_reads(monkeypatch)
    ranges = _record_ranges(monkeypatch)
    flat = 2 * LOADER_STEPS + 9  # episode 2, step 9: chunk 2 of "front", chunk 1 of "wrist"
    sample = ds.sample(flat)
    episode_id, step = "ep-002", 9
    assert (sample["episode_id"], sample["step"]) == (episode_id, step)
    loc = _locator(loader_lake, episode_id)
    ep = loader_lake.episodes[episode_id]
    assert reads == []  # no row group through pyarrow: the steps are read footer-free too
    # the steps: one range, from the first list column chunk of the locator's row group to the
    # end of the last (apart only by pyarrow's inline copies of each chunk's metadata)
    (steps_file,) = {path for path, _, _ in ranges if Path(path).parent.name == "steps"}
    steps = pq.read_metadata(steps_file).row_group(loc["steps_row_group"])
    lists = [
        steps.column(j)
        for j in range(steps.num_columns)
        if steps.column(j).path_in_schema.split(".")[0] in {"proprio", "action", "camera_frame_index"}
    ]
    first = min(c.data_page_offset for c in lists)
    steps_range = (first, max(c.data_page_offset + c.total_compressed_size for c in lists) - first)
    assert steps_range[1] - sum(c.total_compressed_size for c in lists) < 200
    assert [(o, n) for path, o, n in ranges if path == steps_file] == [steps_range]
    # the video chunks: exactly the `data` column chunks of the row groups the locator names
    (video_file,) = {path for path, _, _ in ranges if path != steps_file}
    video = pq.read_metadata(video_file)
    data = video.schema.names.index("data")
    chunks = {
        (c.data_page_offset, c.total_compressed_size)
        for c in (
            video.row_group(g).column(data)
            for g in (
                loc["video_row_groups"][k] + int(ep.camera_frame_index[step, k]) // CHUNK_FRAMES
                for k in range(len(LOADER_CAMERAS))
            )
        )
    }
    assert {(offset, size) for path, offset, size in ranges if path == video_file} == chunks
    assert len(ranges) == 3
    stats = ds.read_stats
    assert (stats["steps_reads"], stats["video_reads"], stats["footer_reads"]) == (1, 2, 0)
    # bytes = the steps list column chunks + the two video chunks, no footer
    assert stats["bytes_read"] == steps_range[1] + sum(size for _, size in chunks)
    # another episode's sample in the same files: one steps range and two chunks again
    ds.sample(4 * LOADER_STEPS)
    assert ds.read_stats["footer_reads"] == 0 and reads == [] and len(ranges) == 6


def test_loader_reports_bytes_read_per_sample(loader_lake: FakeLake) -> None:
    ds = Dataset(loader_lake.layout, spec=SampleSpec(cameras=("front",), action_horizon=2), seed=4)
    loader = Loader(ds, batch_size=8, num_workers=0)  # read here: the Dataset's own counters match
    list(loader)
    stats = loader.stats()
    assert stats.samples == len(ds)
    assert stats.steps_reads == len(ds.episode_ids) and stats.footer_reads == 2
    assert stats.video_reads == stats.chunk_decodes
    assert stats.bytes_read == ds.read_stats["bytes_read"] > 0
    assert stats.bytes_read_per_sample == pytest.approx(stats.bytes_read / len(ds))


def test_a_locator_that_does_not_fit_the_file_is_a_clear_error(loader_lake: FakeLake) -> None:
    ds = Dataset(loader_lake.layout, spec=SampleSpec(cameras=("front",), action_horizon=2))
    locators = ds._gather.video._locators
    locators.video_row_group[0, 0] += 1  # chunk 0 of episode 0 now points at its chunk 1
    with pytest.raises(PiLoaderError, match=r"should hold chunk 0 of this camera.*ep-000.*'front', 1\)"):
        ds.sample(0)
    locators.video_row_group[0, 0] -= 1
    ds.sample(0)
    with pytest.raises(PiLoaderError, match="past the camera's last chunk"):
        ds._gather.video.frame(0, 0, 10 * CHUNK_FRAMES)
    steps = ds._gather.steps._locators
    steps.steps_row_group[1] += 1
    with pytest.raises(PiLoaderError, match=r"not exactly steps 0\.\.10 of this attempt's 11"):
        ds.sample(LOADER_STEPS)
    steps.steps_row_group[1] += 100
    with pytest.raises(PiLoaderError, match="names row group 102"):
        ds.sample(LOADER_STEPS)


def test_a_lake_without_locators_is_refused_by_name(tmp_path: Path) -> None:
    # A lake written the way it was before locators existed (write_deltalake, no locators).
    ep = make_episode(0, steps=4, cameras=("front",), size=(16, 16), seed=0)
    steps, video = _rows(
        ep.episode_id, ep.attempt_id, ep.proprio, ep.action, ep.camera_frame_index, ep.frames, (16, 16)
    )
    root = tmp_path / "old"
    write_deltalake(str(root / "steps"), steps)
    write_deltalake(str(root / "video"), video)
    write_deltalake(str(root / "episodes"), episode_rows([ep], (16, 16)).drop_columns(
        ["steps_file", "steps_row_group", "video_file", "video_row_groups"]
    ))  # fmt: skip
    with pytest.raises(PiLoaderError, match=r"episode ep-000 .*predates format locators"):
        Dataset(str(root), action_horizon=2)
    assert np.array_equal(ep.camera_frame_index[:, 0], np.arange(4))
