"""pi_loader.Loader and SampleSpec over a real Delta lake (tests/fixtures/lake_factory.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pi_loader import (
    Dataset,
    HorizonTooLongError,
    Loader,
    LoaderStateError,
    SampleSpec,
    ShardError,
    ShardSpec,
    UnknownCameraError,
    sample_order,
)

from tests.fixtures.lake_factory import FakeLake
from tests.loader.conftest import LOADER_CAMERAS, LOADER_EPISODES, LOADER_STEPS

N = LOADER_EPISODES * LOADER_STEPS


def _ids(batches: list[dict[str, np.ndarray]]) -> list[tuple[str, int]]:
    return [(str(e), int(s)) for b in batches for e, s in zip(b["episode_id"], b["step"], strict=True)]


def _dataset(lake: FakeLake, **kwargs: object) -> Dataset:
    spec = kwargs.pop("spec", SampleSpec(cameras=("wrist",), action_horizon=3))
    return Dataset(lake.layout, spec=spec, seed=kwargs.pop("seed", 5), **kwargs)  # type: ignore[arg-type]


def test_order_is_a_function_of_seed_epoch_and_shard_only(loader_lake: FakeLake) -> None:
    ds = _dataset(loader_lake)
    a = _ids(list(Loader(ds, batch_size=4, shard=ShardSpec(0, 1))))
    b = _ids(list(Loader(_dataset(loader_lake), batch_size=7, shard=ShardSpec(0, 1))))
    assert a == b  # batch size changes the cut, not the order
    assert sorted(a) == sorted((e, s) for e in loader_lake.episode_ids for s in range(LOADER_STEPS))
    flat = sample_order(N, seed=5, epoch=0)
    assert a == [ds.locate(i) for i in range(N)] and len(flat) == N
    other = _ids(list(Loader(_dataset(loader_lake, seed=6), batch_size=4, shard=ShardSpec(0, 1))))
    assert other != a and sorted(other) == sorted(a)


def test_epochs_advance_and_differ(loader_lake: FakeLake) -> None:
    loader = Loader(_dataset(loader_lake, spec=SampleSpec(cameras=(), action_horizon=2)), batch_size=8)
    first = _ids(list(loader))
    assert loader.epoch == 1 and loader.get_state()["position"] == 0
    second = _ids(list(loader))
    assert second != first and sorted(second) == sorted(first)
    loader.set_epoch(0)
    assert _ids(list(loader)) == first


@pytest.mark.parametrize("block_size", [None, 4])
def test_order_does_not_depend_on_worker_count(loader_lake: FakeLake, block_size: int | None) -> None:
    ds = _dataset(loader_lake)
    runs = {}
    for workers in (0, 1, 3):
        with Loader(
            ds,
            batch_size=5,
            num_workers=workers,
            prefetch_batches=2,
            block_size=block_size,
            shard=ShardSpec(1, 2),
        ) as loader:
            batches = list(loader)
        runs[workers] = batches
    for workers in (1, 3):
        assert _ids(runs[workers]) == _ids(runs[0])
        for x, y in zip(runs[workers], runs[0], strict=True):
            assert x.keys() == y.keys()
            for key in x:
                np.testing.assert_array_equal(x[key], y[key])


def test_shards_split_an_epoch_into_equal_parts(loader_lake: FakeLake) -> None:
    ds = _dataset(loader_lake, spec=SampleSpec(cameras=(), action_horizon=2))
    parts = [_ids(list(Loader(ds, batch_size=4, shard=ShardSpec(i, 4)))) for i in range(4)]
    assert {len(p) for p in parts} == {-(-N // 4)}
    everything = [x for p in parts for x in p]
    assert set(everything) == set(_ids(list(Loader(ds, batch_size=4, shard=ShardSpec(0, 1)))))
    assert len(everything) - N == (-N) % 4
    dropped = [
        _ids(list(Loader(ds, batch_size=4, shard=ShardSpec(i, 4), drop_remainder=True))) for i in range(4)
    ]
    flat = [x for p in dropped for x in p]
    assert len(flat) == len(set(flat)) == (N // 4) * 4


def test_drop_last_and_state_roundtrip_mid_epoch(loader_lake: FakeLake) -> None:
    ds = _dataset(loader_lake)
    full = Loader(ds, batch_size=4, drop_last=True)
    assert full.batches_per_epoch == N // 4
    everything = list(full)
    assert all(len(b["step"]) == 4 for b in everything) and len(everything) == N // 4
    loader = Loader(ds, batch_size=4, drop_last=True)
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    state = json.loads(json.dumps(loader.get_state()))
    resumed = Loader(_dataset(loader_lake), batch_size=4, drop_last=True)
    resumed.set_state(state)
    assert _ids(head) + _ids(list(resumed)) == _ids(everything)
    assert resumed.epoch == 1
    with pytest.raises(LoaderStateError, match="seed"):
        Loader(_dataset(loader_lake, seed=9), batch_size=4).set_state(state)
    with pytest.raises(LoaderStateError, match="shard_count"):
        Loader(ds, batch_size=4, shard=ShardSpec(0, 2)).set_state(state)
    with pytest.raises(LoaderStateError, match="block_size"):
        Loader(ds, batch_size=4, block_size=3).set_state(state)
    with pytest.raises(LoaderStateError, match="not a pi_loader loader state"):
        loader.set_state({"epoch": 0})


@pytest.mark.parametrize("lake_name", ["loader_lake", "loader_lake_small_groups"])
def test_padding_and_masks_at_episode_ends_and_starts(lake_name: str, request: pytest.FixtureRequest) -> None:
    loader_lake: FakeLake = request.getfixturevalue(lake_name)
    horizon, history, stride = 5, 2, 3
    ds = _dataset(
        loader_lake,
        spec=SampleSpec(
            cameras=LOADER_CAMERAS, frame_history=history, frame_stride=stride, action_horizon=horizon
        ),
    )
    for batch in Loader(ds, batch_size=6):
        for i, (eid, step) in enumerate(zip(batch["episode_id"], batch["step"], strict=True)):
            ep = loader_lake.episodes[str(eid)]
            want_rows = np.minimum(np.arange(step, step + horizon), LOADER_STEPS - 1)
            np.testing.assert_array_equal(batch["action"][i], ep.action[want_rows])
            np.testing.assert_array_equal(batch["observation.state"][i], ep.proprio[step])
            np.testing.assert_array_equal(
                batch["action_is_pad"][i], np.arange(step, step + horizon) >= LOADER_STEPS
            )
            hist_steps = step - stride * np.arange(history, -1, -1)
            np.testing.assert_array_equal(batch["observation.images_is_pad"][i], hist_steps < 0)
            for k, camera in enumerate(LOADER_CAMERAS):
                images = batch[f"observation.images.{camera}"][i]
                assert images.shape == (history + 1, 32, 48, 3)
                for h, s in enumerate(np.maximum(hist_steps, 0)):
                    want = int(ep.camera_frame_index[s, k])
                    errors = [np.abs(images[h].astype(int) - f.astype(int)).mean() for f in ep.frames[camera]]
                    assert int(np.argmin(errors)) == want, (eid, step, camera, h)


def test_normalization_uses_pooled_episode_stats(loader_lake: FakeLake) -> None:
    raw = _dataset(loader_lake, spec=SampleSpec(cameras=(), action_horizon=1))
    norm = _dataset(loader_lake, spec=SampleSpec(cameras=(), action_horizon=1, normalize="mean_std"))
    mm = _dataset(loader_lake, spec=SampleSpec(cameras=(), action_horizon=1, normalize="min_max"))
    proprio = np.concatenate([ep.proprio for ep in loader_lake.episodes.values()])
    stats = norm.stats["observation.state"]
    np.testing.assert_allclose(stats.mean, proprio.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats.std, proprio.std(0), rtol=1e-4, atol=1e-5)
    states: np.ndarray = np.stack([np.asarray(norm.sample(i)["observation.state"]) for i in range(N)])
    np.testing.assert_allclose(states.mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(states.std(0), 1, atol=1e-3)
    scaled: np.ndarray = np.stack([np.asarray(mm.sample(i)["observation.state"]) for i in range(N)])
    np.testing.assert_allclose(scaled.min(0), -1, atol=1e-5)
    np.testing.assert_allclose(scaled.max(0), 1, atol=1e-5)
    np.testing.assert_array_equal(raw.sample(0)["observation.state"], proprio[0])  # type: ignore[arg-type]


def test_crop_and_resize(loader_lake: FakeLake) -> None:
    base = _dataset(loader_lake, spec=SampleSpec(cameras=("front",), action_horizon=1))
    cropped = _dataset(
        loader_lake, spec=SampleSpec(cameras=("front",), action_horizon=1, crop=(2, 4, 16, 20))
    )
    resized = _dataset(loader_lake, spec=SampleSpec(cameras=("front",), action_horizon=1, resize=(48, 64)))
    full = base.sample(3)["observation.images.front"]
    part = cropped.sample(3)["observation.images.front"]
    big = resized.sample(3)["observation.images.front"]
    assert isinstance(full, np.ndarray) and isinstance(part, np.ndarray) and isinstance(big, np.ndarray)
    np.testing.assert_array_equal(part, full[2:18, 4:24])
    assert big.shape == (48, 64, 3) and big.dtype == np.uint8
    assert abs(float(big.mean()) - float(full.mean())) < 3.0
    with pytest.raises(ValueError, match=r"crop=\(30, 0, 10, 10\).*does not fit"):
        _dataset(loader_lake, spec=SampleSpec(cameras=("front",), action_horizon=1, crop=(30, 0, 10, 10)))


def test_bad_input_raises_clear_errors(loader_lake: FakeLake) -> None:
    with pytest.raises(UnknownCameraError, match=r"unknown camera\(s\) \['top'\]"):
        _dataset(loader_lake, spec=SampleSpec(cameras=("top",), action_horizon=2))
    with pytest.raises(
        HorizonTooLongError, match=rf"action_horizon=12 is longer than episode ep-000 \({LOADER_STEPS} steps"
    ):
        _dataset(loader_lake, spec=SampleSpec(cameras=(), action_horizon=12))
    ds = _dataset(loader_lake)
    with pytest.raises(ShardError, match=r"shard_index must be in \[0, 1\] for shard_count=2, got 2"):
        Loader(ds, batch_size=2, shard_index=2, shard_count=2)
    with pytest.raises(ShardError, match="cannot give each of 100 shards"):
        Loader(ds, batch_size=2, shard=ShardSpec(0, 100), drop_remainder=True)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        Loader(ds, batch_size=0)
    with pytest.raises(ValueError, match="block_size"):
        Loader(ds, batch_size=2, block_size=0)
    for kwargs, match in (
        ({"frame_history": -1}, "frame_history must be an int >= 0"),
        ({"frame_stride": 0}, "frame_stride must be an int >= 1"),
        ({"normalize": "zscore"}, "normalize must be None or one of"),
        ({"resize": (0, 4)}, "resize must be"),
        ({"crop": (0, 0, 0, 4)}, "crop must be"),
    ):
        with pytest.raises(ValueError, match=match):
            SampleSpec(**kwargs)
    with pytest.raises(TypeError, match="single str"):
        SampleSpec(cameras="front")  # type: ignore[arg-type]


def test_block_shuffle_decodes_fewer_chunks_per_sample(loader_lake: FakeLake) -> None:
    figures = {}
    for block in (None, 8):
        ds = Dataset(
            loader_lake.layout,
            spec=SampleSpec(cameras=("front",), action_horizon=2),
            seed=1,
            chunk_cache_size=2,
        )
        loader = Loader(ds, batch_size=8, block_size=block)
        list(loader)
        figures[block] = loader.stats().decoded_chunks_per_sample
        assert loader.stats().samples == N
    assert figures[8] < figures[None] * 0.6, figures


def test_worker_error_reaches_the_caller(loader_lake: FakeLake, tmp_path: object) -> None:
    ds = _dataset(loader_lake)
    # a broken video locator: every video read in the worker fails with a clear error
    locators = ds._gather.video._locators
    object.__setattr__(locators, "video_files", tuple("/nonexistent/x.parquet" for _ in locators.video_files))
    broken = Dataset.__new__(Dataset)
    broken.__dict__.update(ds.__dict__)
    with (
        pytest.raises(Exception, match=r"nonexistent|gone"),
        Loader(broken, batch_size=4, num_workers=1) as loader,
    ):
        list(loader)


def test_workers_exit_by_themselves_when_closed_with_batches_unread(loader_lake: FakeLake) -> None:
    # prefetched batches nobody reads must not keep a worker from exiting (it used to hang on
    # flushing them until close() terminated it)
    # pickled batches (no shared memory) of ~75 kB each: more than a pipe buffer holds
    loader = Loader(
        _dataset(loader_lake), batch_size=16, num_workers=2, prefetch_batches=6, shared_memory=False
    )
    iterator = iter(loader)
    next(iterator)
    workers = list(loader._worker_pool._workers)
    assert len(workers) == 2
    loader.close()
    assert [w.exitcode for w in workers] == [0, 0]
