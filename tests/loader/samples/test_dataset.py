"""pi_loader.Dataset over a small real Delta lake written by tests/fixtures/lake_factory.py."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pi_catalog import Catalog
from pi_loader import Dataset, PiLoaderError, UnknownCameraError, contact_sheet, sample_order

from tests.fixtures.lake_factory import (
    CHUNK_FRAMES,
    GARBAGE_ATTEMPT,
    UNCOMMITTED_EPISODE,
    FakeLake,
    write_lake,
)

CAMERAS = ("front", "wrist")
STEPS = 7
H = 4  # action horizon: the fixture's episodes are short
SIZE = (48, 32)  # width, height: not square, so a swapped axis shows


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> FakeLake:
    return write_lake(tmp_path_factory.mktemp("lake"), episodes=3, steps=STEPS, cameras=CAMERAS, size=SIZE)


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return 99.0 if mse == 0 else 10 * np.log10(255.0**2 / mse)


def _step(sample: dict[str, object]) -> int:
    step = sample["step"]
    assert isinstance(step, int)
    return step


def _arr(sample: dict[str, object], key: str) -> np.ndarray:
    value = sample[key]
    assert isinstance(value, np.ndarray), (key, type(value))
    return value


def _keys(ds: Dataset) -> list[tuple[str, int]]:
    return [ds.locate(i) for i in range(len(ds))]


def test_same_seed_same_order_other_seed_or_epoch_differs(lake: FakeLake) -> None:
    a = Dataset(lake.layout, seed=7, action_horizon=H)
    b = Dataset(lake.layout.root, seed=7, action_horizon=H)
    assert _keys(a) == _keys(b)
    other_seed = _keys(Dataset(lake.layout, seed=8, action_horizon=H))
    assert other_seed != _keys(a)
    first = _keys(a)
    a.set_epoch(1)
    assert a.epoch == 1
    assert _keys(a) != first
    a.set_epoch(0)
    assert _keys(a) == first
    # golden value: the order is a pure function of (n, seed, epoch) and must not drift
    assert (
        sample_order(6, seed=0, epoch=0).tolist()
        == np.random.default_rng(np.random.SeedSequence([0, 0])).permutation(6).tolist()
    )


def test_every_sample_exactly_once_per_epoch(lake: FakeLake) -> None:
    ds = Dataset(lake.layout, seed=3, epoch=2, cameras=[], action_horizon=H)
    expected = sorted((e, s) for e in lake.episode_ids for s in range(STEPS))
    assert len(ds) == len(expected)
    seen = [(s["episode_id"], s["step"]) for s in ds]
    assert sorted(seen) == expected
    assert len(set(seen)) == len(seen)
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ds)]
    assert ds[-1]["step"] == ds[len(ds) - 1]["step"]


def test_garbage_attempt_is_invisible(lake: FakeLake) -> None:
    ds = Dataset(lake.layout, action_horizon=H)
    assert ds.episode_ids == tuple(lake.episode_ids)
    assert UNCOMMITTED_EPISODE not in ds.episode_ids
    assert all(ds.episode(e).attempt_id != GARBAGE_ATTEMPT for e in ds.episode_ids)
    for sample in ds:
        ep = lake.episodes[str(sample["episode_id"])]
        np.testing.assert_array_equal(_arr(sample, "observation.state"), ep.proprio[_step(sample)])
    with pytest.raises(PiLoaderError, match="not committed"):
        Dataset(lake.layout, episode_ids=[UNCOMMITTED_EPISODE], action_horizon=H)


def test_frames_match_the_factory_frames(lake: FakeLake) -> None:
    ds = Dataset(lake.layout, seed=1, action_horizon=H)
    assert ds.cameras == CAMERAS
    for sample in ds:
        ep = lake.episodes[str(sample["episode_id"])]
        step = _step(sample)
        for k, camera in enumerate(CAMERAS):
            image = sample[f"observation.images.{camera}"]
            assert isinstance(image, np.ndarray)
            assert image.dtype == np.uint8 and image.shape == (SIZE[1], SIZE[0], 3)
            want = int(ep.camera_frame_index[step, k])
            scores = [_psnr(image, f) for f in ep.frames[camera]]
            assert scores[want] > 24.0, (sample["episode_id"], step, camera, scores)
            assert int(np.argmax(scores)) == want  # the right frame, not a neighbour
    # every chunk the samples touch was read (one row group) and decoded once, with caches
    # larger than the lake; each episode's steps were read once
    chunks = {
        (e, k, int(f) // CHUNK_FRAMES)
        for e, ep in lake.episodes.items()
        for k in range(len(CAMERAS))
        for f in ep.camera_frame_index[:, k]
    }
    stats = ds.read_stats
    assert stats["video_reads"] == stats["chunk_decodes"] == len(chunks)
    assert stats["steps_reads"] == len(lake.episodes)
    # one steps file and one video file (one group commit): the video footer once, to index it
    assert stats["footer_reads"] == 2


def test_state_action_padding_and_mask(lake: FakeLake) -> None:
    horizon = 4
    ds = Dataset(lake.layout, cameras=["wrist"], action_horizon=horizon)
    checked_end = False
    for sample in ds:
        ep = lake.episodes[str(sample["episode_id"])]
        step = _step(sample)
        action, pad = sample["action"], sample["action_is_pad"]
        assert isinstance(action, np.ndarray) and isinstance(pad, np.ndarray)
        assert action.dtype == np.float32 and action.shape == (horizon, ep.action.shape[1])
        assert pad.dtype == np.bool_ and pad.shape == (horizon,)
        for k in range(horizon):
            t = step + k
            assert pad[k] == (t >= STEPS)
            np.testing.assert_array_equal(action[k], ep.action[min(t, STEPS - 1)])
        state = sample["observation.state"]
        assert isinstance(state, np.ndarray) and state.dtype == np.float32
        if step == STEPS - 1:
            assert pad.tolist() == [False, True, True, True]
            checked_end = True
        assert "observation.images.front" not in sample
    assert checked_end


def test_argument_errors(lake: FakeLake) -> None:
    with pytest.raises(UnknownCameraError, match=r"unknown camera\(s\) \['top'\].*\['front', 'wrist'\]"):
        Dataset(lake.layout, cameras=["top"], action_horizon=H)
    with pytest.raises(ValueError, match="catalog is required with sql"):
        Dataset(lake.layout, sql="SELECT episode_id FROM episodes", action_horizon=H)
    with pytest.raises(ValueError, match="either sql or episode_ids"):
        Dataset(lake.layout, sql="SELECT 1", episode_ids=["a"], catalog="/tmp/c", action_horizon=H)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        Dataset(lake.layout, seed=-1, action_horizon=H)
    with pytest.raises(ValueError, match="action_horizon"):
        Dataset(lake.layout, action_horizon=0)
    with pytest.raises(TypeError, match="single str"):
        Dataset(lake.layout, episode_ids="ep-000", action_horizon=H)
    ds = Dataset(lake.layout, cameras=[], action_horizon=H)
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        ds.set_epoch(-1)


def test_missing_lake_is_a_loader_error(tmp_path: Path) -> None:
    with pytest.raises(PiLoaderError, match="cannot open the episodes table"):
        Dataset(tmp_path / "nowhere")  # type: ignore[arg-type]


def test_selection_by_sql_through_the_catalog(lake: FakeLake, tmp_path: Path) -> None:
    catalog = Catalog(str(tmp_path / "catalog"))
    assert catalog.rebuild_from_lake(lake.layout) == len(lake.episodes)
    ds = Dataset(
        lake.layout,
        sql="SELECT episode_id FROM episodes WHERE robot_id = 'robot-0'",
        catalog=catalog.location,
        cameras=["front"],
        action_horizon=H,
    )
    assert ds.episode_ids == ("ep-000", "ep-002")
    assert ds.sql is not None
    assert set(ds.table_versions) == {"episodes", "steps", "video"}


def test_sql_parameters_are_bound_not_pasted(lake: FakeLake, tmp_path: Path) -> None:
    catalog = Catalog(str(tmp_path / "catalog"))
    catalog.rebuild_from_lake(lake.layout)
    sql = "SELECT episode_id FROM episodes WHERE robot_id = {robot:String}"
    ds = Dataset(
        lake.layout, sql=sql, sql_parameters={"robot": "robot-0"}, catalog=catalog.location, action_horizon=H
    )
    assert ds.episode_ids == ("ep-000", "ep-002")
    hostile = "robot-0' OR '1'='1"
    with pytest.raises(PiLoaderError):  # no rows match the literal string: nothing to load
        Dataset(lake.layout, sql=sql, sql_parameters={"robot": hostile}, catalog=catalog.location)


def test_pickles_without_handles_and_gives_the_same_samples(lake: FakeLake) -> None:
    ds = Dataset(lake.layout, seed=5, action_horizon=H)
    before = ds[0]
    clone = pickle.loads(pickle.dumps(ds))
    after = clone[0]
    # fresh caches: one steps row group, one video chunk per camera; the steps and video files'
    # indexes were built by `ds` on this host, so the clone parses no footer at all
    assert clone.read_stats["video_reads"] == clone.read_stats["chunk_decodes"] == len(CAMERAS)
    assert clone.read_stats["steps_reads"] == clone.read_stats["steps_indexed_reads"] == 1
    assert clone.read_stats["footer_reads"] == 0
    clone_index, index = clone._gather.video._chunk_index, ds._gather.video._chunk_index
    assert clone_index is not None and index is not None
    assert clone_index.builds == 0 and index.builds == 1
    assert clone.read_stats["steps_index_builds"] == 0 and ds.read_stats["steps_index_builds"] == 1
    assert before["episode_id"] == after["episode_id"] and before["step"] == after["step"]
    for key in ("observation.images.front", "observation.state", "action"):
        np.testing.assert_array_equal(_arr(before, key), _arr(after, key))


def test_torch_dataloader_with_two_workers_matches_direct_indexing(lake: FakeLake) -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    ds = Dataset(lake.layout, seed=11, action_horizon=3)
    loader = torch_data.DataLoader(ds, batch_size=8, num_workers=2)
    got: list[tuple[str, int, np.ndarray, np.ndarray]] = []
    for batch in loader:
        for i in range(len(batch["episode_id"])):
            got.append(
                (
                    batch["episode_id"][i],
                    int(batch["step"][i]),
                    batch["observation.images.wrist"][i].numpy(),
                    batch["action"][i].numpy(),
                )
            )
    assert len(got) == len(ds)
    for i, (episode_id, step, image, action) in enumerate(got):
        want = ds[i]
        assert (episode_id, step) == (want["episode_id"], want["step"])
        np.testing.assert_array_equal(image, _arr(want, "observation.images.wrist"))
        np.testing.assert_array_equal(action, _arr(want, "action"))


def test_contact_sheet_writes_a_png(lake: FakeLake, tmp_path: Path) -> None:
    from PIL import Image

    ds = Dataset(lake.layout, action_horizon=H)
    samples = [ds[i] for i in range(3)]
    out = contact_sheet(samples, tmp_path / "sheets" / "sheet.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(out) as img:
        assert img.size[1] == 3 * (SIZE[1] + 14)
        assert img.size[0] >= 2 * SIZE[0]
    with pytest.raises(ValueError, match="must not be empty"):
        contact_sheet([], tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"has no 'observation\.images\.top'"):
        contact_sheet(samples, tmp_path / "x.png", cameras=["top"])


def test_import_stays_light() -> None:
    code = (
        "import sys, pi_loader; heavy = [m for m in ('torch', 'pyflink', 'confluent_kafka', 'chdb', "
        "'clickhouse_connect', 'PIL') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_getitems_is_the_samples_one_by_one_built_as_one_batch(lake: FakeLake) -> None:
    ds = Dataset(lake.layout, seed=3, action_horizon=H)
    positions = [5, 0, len(ds) - 1, 5, -1]  # repeats and a negative position, as indexing allows
    got = ds.__getitems__(positions)
    assert ds.read_stats["steps_lookups"] <= len({ds.locate(i)[0] for i in positions})  # one batch
    want = [Dataset(lake.layout, seed=3, action_horizon=H)[i] for i in positions]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        assert type(g["episode_id"]) is str and type(g["step"]) is int
        assert (g["episode_id"], g["step"]) == (w["episode_id"], w["step"])
        for key in g.keys() - {"episode_id", "step"}:
            np.testing.assert_array_equal(_arr(g, key), _arr(w, key))
            assert _arr(g, key).dtype == _arr(w, key).dtype
    with pytest.raises(IndexError, match="out of range"):
        ds.__getitems__([0, len(ds)])


def test_torch_collate_hands_out_the_batch_it_was_built_as(lake: FakeLake) -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    ds = Dataset(lake.layout, seed=4, action_horizon=H)
    positions = [3, 1, 4, 1, 5]
    rows = ds.__getitems__(positions)
    got = torch_data.default_collate(rows)
    plain = [dict(ds[i]) for i in positions]  # plain dicts: torch's own collate stacks them
    want = torch_data.default_collate(plain)
    assert got.keys() == want.keys()
    for key in want:
        if isinstance(want[key], list):
            assert got[key] == want[key] and all(type(v) is str for v in got[key])
        else:
            assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape, key
            assert bool((got[key] == want[key]).all()), key
    # the batch's own frames, not a stacked copy of them
    assert np.shares_memory(
        got["observation.images.wrist"].numpy(), _arr(rows[0], "observation.images.wrist")
    )
    # rows that are not one whole batch in order (a subset, reordered, or mixed with another
    # batch's) are collated as torch collates any samples
    other = ds.__getitems__([0, 2])
    for mixed in (rows[1:], rows[::-1], [*rows[:2], *other]):
        out = torch_data.default_collate(mixed)
        expect = torch_data.default_collate([dict(r) for r in mixed])
        for key in expect:
            if isinstance(expect[key], list):
                assert out[key] == expect[key]
            else:
                assert bool((out[key] == expect[key]).all()) and out[key].dtype == expect[key].dtype
        assert not np.shares_memory(
            out["observation.images.wrist"].numpy(), _arr(mixed[0], "observation.images.wrist")
        )
