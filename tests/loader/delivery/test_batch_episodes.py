"""A loader worker holds no per-episode array of the selection: each task carries the rows of its
batch's episodes (`pi_loader.delivery._batch_episodes`), so a worker's memory does not grow with
the selection, not even in pages of a shared map (issue 33 item 3: worker peak RSS 2.15x the
1,000-episode lake's on 1,005,000 episodes when workers mapped the 117 MB of per-episode arrays).
Batches stay identical to the ones built in the main process."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import numpy as np
import pytest
from pi_loader import Dataset, Loader, SampleSpec, ShardSpec
from pi_loader._errors import PiLoaderError
from pi_loader.delivery._batch_episodes import BatchEpisodes, EpisodeRows, EpisodeTable
from pi_loader.delivery._shared_dataset import SharedDatasetImage, SharedDatasetRef
from pi_loader.reading._packed import PackedStrings
from pi_loader.samples._sample_index import SampleIndex

from tests.fixtures.lake_factory import FakeLake
from tests.loader.delivery.test_shared_dataset_arrays import _per_episode_arrays


def _per_episode_objects(dataset: Any) -> dict[str, Any]:
    """Every per-episode object a worker's Dataset would reach, by where it sits."""
    gather = dataset._gather
    objects: dict[str, Any] = {
        "index": dataset._index,
        "index.lengths": dataset._index.lengths,
        "video_sizes": gather._sizes,
        "episode_cameras.indices": gather._episode_cameras.indices,
        "episode_ids": gather._episode_ids,
        "attempt_ids": gather._attempt_ids,
        "steps.lengths": gather.steps._lengths,
        "steps.camera_counts": gather.steps._camera_counts,
        "steps.episode_ids": gather.steps._episode_ids,
        "video.episode_ids": gather.video._episode_ids,
        "snapshot.episode_ids": dataset.__getstate__()["_snapshot"].episode_ids,
    }
    for name in (
        "steps_file",
        "steps_row_group",
        "video_file",
        "video_row_group",
        "camera_column",
        "chunk_frames",
    ):
        objects[f"locators.{name}"] = getattr(gather._locators, name)
        objects[f"steps.locators.{name}"] = getattr(gather.steps._locators, name)
        objects[f"video.locators.{name}"] = getattr(gather.video._locators, name)
    for name in ("steps_files", "video_files"):
        objects[f"locators.{name}"] = getattr(gather._locators, name)
    return objects


def _report_kinds(ref: SharedDatasetRef, out: Any) -> None:
    dataset, _ = ref.load_per_batch()
    out.put({name: type(obj).__name__ for name, obj in _per_episode_objects(dataset).items()})


def test_a_worker_loads_the_dataset_without_its_per_episode_arrays(
    loader_lake: FakeLake, monkeypatch
) -> None:
    # every buffer out of band, however small: whatever per-episode array were still pickled
    # would land in the shared file a worker maps
    monkeypatch.setattr("pi_loader.delivery._shared_dataset._OUT_OF_BAND_BYTES", 0)
    ds = Dataset(loader_lake.layout, action_horizon=3)
    whole = SharedDatasetImage(ds)
    table = EpisodeTable(ds)
    image = SharedDatasetImage(ds, episodes=table)
    try:
        arrays = _per_episode_arrays(ds)
        spans = len(whole.ref.spans) - len(image.ref.spans)
        # the file shrank by every per-episode array (each span starts 64-byte aligned)
        assert whole.shared_bytes - image.shared_bytes >= sum(a.nbytes for a in arrays.values()) - 64 * spans
        with pytest.raises(PiLoaderError, match="load_per_batch"):
            image.ref.load()
        ctx = mp.get_context("forkserver")
        out = ctx.Queue()
        proc = ctx.Process(target=_report_kinds, args=(image.ref, out))
        proc.start()
        kinds = out.get(timeout=300)
        proc.join(timeout=60)
        assert proc.exitcode == 0
    finally:
        image.close()
        whole.close()
    held = {
        name: kind
        for name, kind in kinds.items()
        if kind in ("ndarray", "PackedStrings", "SampleIndex", "tuple")
    }
    assert not held, f"a worker's Dataset holds per-episode arrays of the whole selection: {held}"


def test_proxies_answer_for_the_batch_exactly_as_the_arrays(loader_lake: FakeLake) -> None:
    ds = Dataset(loader_lake.layout, action_horizon=3)
    table = EpisodeTable(ds)
    episodes = BatchEpisodes()
    objects = _per_episode_objects(ds)
    proxies = {name: episodes.proxy(table.persistent_id(obj)) for name, obj in objects.items()}
    rng = np.random.default_rng(7)
    for _ in range(50):  # seeded batches of 1..12 flat samples, repeats and all
        flat = rng.integers(0, len(ds), size=int(rng.integers(1, 13)))
        episodes.install(table.rows(flat))
        want_e, want_s = ds._index.locate_many(flat)
        got_e, got_s = proxies["index"].locate_many(flat)
        assert np.array_equal(got_e, want_e) and np.array_equal(got_s, want_s)
        assert got_e.dtype == want_e.dtype and got_s.dtype == want_s.dtype
        locators = ds._gather._locators
        for files, column in (("steps_files", "steps_file"), ("video_files", "video_file")):
            proxy = proxies[f"locators.{files}"]
            numbers = getattr(locators, column)[want_e]
            assert len(proxy) == len(getattr(locators, files))
            assert [proxy[n] for n in numbers] == [getattr(locators, files)[n] for n in numbers]
        for name, obj in objects.items():
            if isinstance(obj, SampleIndex | tuple):
                continue
            proxy = proxies[name]
            assert len(proxy) == len(obj)
            for e in [*want_e.tolist(), *want_e]:  # Python and numpy ints
                want = obj[e]
                assert (
                    (want == proxy[e]) if isinstance(obj, PackedStrings) else np.array_equal(proxy[e], want)
                )
            if isinstance(obj, np.ndarray):
                assert np.array_equal(proxy[want_e], obj[want_e])


def test_an_episode_outside_the_batch_is_refused(loader_lake: FakeLake) -> None:
    ds = Dataset(loader_lake.layout, action_horizon=3)
    table = EpisodeTable(ds)
    episodes = BatchEpisodes()
    lengths = episodes.proxy(table.persistent_id(ds._index.lengths))
    ids = episodes.proxy(table.persistent_id(ds._gather._episode_ids))
    index = episodes.proxy(table.persistent_id(ds._index))
    with pytest.raises(PiLoaderError, match="not among the 0 episodes"):
        lengths[0]  # nothing installed yet
    episodes.install(table.rows(np.array([0, 1])))  # samples 0 and 1: episode 0
    assert ids[0] == ds.episode_ids[0]
    for bad in (1, -1, 10**9, "0", None):
        with pytest.raises(PiLoaderError, match="not among the 1 episodes"):
            lengths[bad]
        with pytest.raises(PiLoaderError, match="not among the 1 episodes"):
            ids[bad]
    with pytest.raises(PiLoaderError, match="not among the 1 episodes"):
        lengths[np.array([0, 2])]
    # (episode, camera) keys and file numbers, through the per-frame lookups
    locators = ds._gather._locators
    groups = episodes.proxy(table.persistent_id(locators.video_row_group))
    files = episodes.proxy(table.persistent_id(locators.video_files))
    assert groups[0, 0] == locators.video_row_group[0, 0]
    assert groups[np.int64(0), 0] == locators.video_row_group[0, 0]
    for key in ((1, 0), (-1, 0), (10**9, 0), ("0", 0), (None, 0), ([0, 1], 0)):
        with pytest.raises(PiLoaderError, match="not among the 1 episodes"):
            groups[key]
    number = int(locators.video_file[0])
    assert files[number] == files[number] == locators.video_files[number]  # decoded, then memoised
    for file in (number + 1, -1, "0", None, [number]):
        with pytest.raises(PiLoaderError, match="not one of the files of the batch"):
            files[file]
    episodes.install(table.rows(np.array([len(ds) - 1])))  # another batch: nothing of the last served
    with pytest.raises(PiLoaderError, match="not among the 1 episodes"):
        groups[0, 0]
    with pytest.raises(PiLoaderError, match="not all of the episodes"):
        index.locate_many(np.array([0, len(ds) - 1]))
    with pytest.raises(PiLoaderError, match="offsets: a loader worker holds"):
        index.offsets  # noqa: B018


@pytest.mark.parametrize("lake_name", ["loader_lake", "loader_lake_small_groups"])
def test_worker_batches_from_per_batch_rows_are_identical(
    lake_name: str, request: pytest.FixtureRequest
) -> None:
    lake: FakeLake = request.getfixturevalue(lake_name)
    spec = SampleSpec(action_horizon=4, frame_history=1, frame_stride=2)
    ds = Dataset(lake.layout, spec=spec, seed=5)
    got: dict[int, list[dict[str, np.ndarray]]] = {}
    for workers in (0, 2):
        with Loader(ds, batch_size=7, shard=ShardSpec(index=0, count=1), num_workers=workers) as loader:
            got[workers] = list(loader)
            if workers:  # the workers got the image without the per-episode arrays
                image = loader._worker_pool._image
                assert image is not None and image.ref.per_batch
    assert len(got[0]) == len(got[2]) > 1
    for a, b in zip(got[0], got[2], strict=True):
        assert list(a) == list(b)
        for key in a:
            assert np.array_equal(np.asarray(a[key]), np.asarray(b[key])), key


def test_rows_that_do_not_fit_their_layout_are_refused_and_good_rows_still_serve(
    loader_lake: FakeLake,
) -> None:
    ds = Dataset(loader_lake.layout, action_horizon=3)
    table = EpisodeTable(ds)
    episodes = BatchEpisodes()
    lengths = episodes.proxy(table.persistent_id(ds._index.lengths))
    good = table.rows(np.arange(len(ds)))
    rng = np.random.default_rng(11)
    bad: list[EpisodeRows] = [
        EpisodeRows(good.count, good.layout, good.text_bytes, good.data[:-1]),  # cut short
        EpisodeRows(good.count, good.layout, good.text_bytes, good.data + b"\0"),  # grown
        EpisodeRows(good.count + 1, good.layout, good.text_bytes, good.data),
        EpisodeRows(good.count, good.layout, (), good.data),
        EpisodeRows(good.count, (("keys", "int64", ()), ("offsets", "bogus", ())), (), good.data),
        EpisodeRows(
            2, (("keys", "int64", ()), ("offsets", "int64", ())), (), np.array([3, 1, 0, 0]).tobytes()
        ),
    ]
    for _ in range(20):  # seeded garbage of the right size, and of random sizes
        size = len(good.data) if rng.random() < 0.5 else int(rng.integers(0, 2 * len(good.data)))
        garbage = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        bad.append(EpisodeRows(good.count, good.layout, good.text_bytes, garbage))
    refused = 0
    for rows in bad:
        try:
            episodes.install(rows)
        except PiLoaderError as err:
            assert "do not fit their layout" in str(err)
            refused += 1
    assert refused >= 6  # the hand-made ones; right-sized garbage may well parse (keys sorted)
    episodes.install(good)
    assert [int(lengths[e]) for e in range(len(ds.episode_ids))] == ds.lengths.tolist()
