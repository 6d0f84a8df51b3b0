"""A batch reads its frames' chunks a run at a time before decoding them
(pi_loader.samples._gather.READ_AHEAD): the same pixels, the same reads and the same chunk-cache
traffic as one read per decode, and a damaged chunk in a run refuses the batch as before while
the batches beside it still read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pi_format.video import ChunkDecoder
from pi_loader import CorruptDataError, Dataset, SampleSpec
from pi_loader.reading._chunk_index import OFFSET, SIZE
from pi_loader.reading._video import VideoFrames
from pi_loader.samples import _gather

from tests.fixtures.lake_factory import FakeLake, write_lake
from tests.loader.conftest import LOADER_CAMERAS

SPECS = (
    SampleSpec(cameras=LOADER_CAMERAS, action_horizon=2),
    SampleSpec(cameras=LOADER_CAMERAS, action_horizon=2, frame_history=2, frame_stride=3),
    SampleSpec(cameras=LOADER_CAMERAS, action_horizon=2, crop=(2, 4, 24, 30), resize=(20, 26)),
)


def _batches(lake: FakeLake, spec: SampleSpec, cache: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    ds = Dataset(lake.layout, spec=spec, seed=5, chunk_cache_size=cache)
    order = np.random.default_rng(5).permutation(len(ds))
    batches = [ds.samples(order[i : i + 7]) for i in range(0, len(ds), 7)]
    return batches, {k: v for k, v in ds.read_stats.items() if k in ("video_reads", "chunk_decodes")}


@pytest.mark.parametrize("spec", SPECS, ids=["direct", "history", "crop_resize"])
def test_runs_of_any_length_give_the_same_batches_and_reads(
    loader_lake: FakeLake, spec: SampleSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    for cache in (1, 64):
        monkeypatch.setattr(_gather, "READ_AHEAD", 1)  # one read, then its decode: the old order
        want, want_reads = _batches(loader_lake, spec, cache)
        for run in (3, 32):  # runs that split a chunk's frames, and whole batches
            monkeypatch.setattr(_gather, "READ_AHEAD", run)
            got, reads = _batches(loader_lake, spec, cache)
            assert reads == want_reads  # the chunk cache saw the same gets and puts
            for g, w in zip(got, want, strict=True):
                assert g.keys() == w.keys()
                for key in w:
                    np.testing.assert_array_equal(g[key], w[key], err_msg=f"{key} cache={cache} run={run}")


def test_a_run_reads_its_chunks_before_decoding_them(
    loader_lake: FakeLake, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    read, rgb = VideoFrames._chunk, ChunkDecoder.rgb

    def reading(self: VideoFrames, *args: Any) -> Any:
        events.append("r")
        return read(self, *args)

    def decoding(self: ChunkDecoder, *args: Any) -> Any:
        events.append("d")
        return rgb(self, *args)

    monkeypatch.setattr(VideoFrames, "_chunk", reading)
    monkeypatch.setattr(ChunkDecoder, "rgb", decoding)
    monkeypatch.setattr(_gather, "READ_AHEAD", 4)
    ds = Dataset(loader_lake.layout, spec=SPECS[0], seed=5)
    ds.samples(np.arange(5))  # 5 samples x 2 cameras: 10 frames, runs of 4, 4 and 2
    assert "".join(events) == "rrrrdddd" + "rrrrdddd" + "rrdd"


def test_a_damaged_chunk_in_a_run_refuses_its_batch_and_the_others_read(tmp_path: Path) -> None:
    lake = write_lake(
        tmp_path / "lake", episodes=2, steps=11, cameras=LOADER_CAMERAS, size=(32, 32), garbage_attempt=False
    )
    spec = SampleSpec(cameras=LOADER_CAMERAS, action_horizon=2)
    ds = Dataset(lake.layout, spec=spec, seed=5, chunk_cache_size=1)
    everything = np.arange(len(ds))
    want = ds.samples(everything)
    index = ds._gather.video.chunk_index
    assert index is not None
    (path,) = sorted(Path(lake.layout.table("video")).glob("*.parquet"))
    video = ds._gather.video
    (uri,) = video._locators.video_files
    local = video._reader.local_path(uri, table="video", version=video._version)
    assert Path(local).resolve() == path.resolve()
    entries = np.asarray(index.entries(video._reader, uri, local))  # the file's chunk index
    offset, size = int(entries[0, OFFSET]), int(entries[0, SIZE])  # the file's first chunk
    data = path.read_bytes()
    damaged = bytearray(data)
    damaged[offset + size // 2] ^= 0xFF
    episodes, _ = ds._gather._index.locate_many(everything)
    refused = []
    path.write_bytes(bytes(damaged))
    try:
        with pytest.raises(CorruptDataError, match=rf"{path.name}, row group 0"):
            ds.samples(everything)  # the damaged chunk sits inside a run of the batch's reads
        for e in (0, 1):  # one episode's samples need the damaged chunk; the other's read
            rows = np.flatnonzero(episodes == e)
            try:
                got = ds.samples(everything[rows])
            except CorruptDataError as err:
                assert f"{path.name}, row group 0" in str(err)
                refused.append(e)
                continue
            for key in want:
                np.testing.assert_array_equal(got[key], want[key][rows])
    finally:
        path.write_bytes(data)
    assert len(refused) == 1
    again = ds.samples(everything)
    for key in want:
        np.testing.assert_array_equal(again[key], want[key])
