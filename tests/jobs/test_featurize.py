"""Unit tests of pi_jobs.stream.featurize: alignment, stats, bit-exact steps, chunked video."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from pi_format import CameraSpec, CameraVideo, Episode, EpisodeMeta, ProtocolError, QuarantineReason
from pi_format.video import decode_chunk_rgb, encode_mp4
from pi_jobs.stream.featurize import FeaturizeConfig, align_frames, featurize

CAM_W, CAM_H = 160, 120
CONFIG = FeaturizeConfig(video_width=64, video_height=48, chunk_frames=4, crf=18)
# PSNR of the lake's chunk frames against the originals resized to the training size: two
# lossy H.264 passes (robot CRF 18, lake CRF 18) on smooth synthetic frames stay far above 30 dB;
# a wrong frame order or a colour mix-up lands well below 20 dB.
MIN_PSNR_DB = 30.0


def _frame(i: int, cam: int) -> np.ndarray:
    yy, xx = np.mgrid[0:CAM_H, 0:CAM_W].astype(np.float32)
    img = np.empty((CAM_H, CAM_W, 3), np.float32)
    img[..., 0] = 30 + 180 * xx / (CAM_W - 1)
    img[..., 1] = 30 + 180 * yy / (CAM_H - 1)
    img[..., 2] = 80 + 60 * cam
    x0 = 8 + 6 * i
    img[40:80, x0 : x0 + 40] = (230, 200, 40)
    return np.clip(img, 0, 255).astype(np.uint8)


def _camera(
    name: str, cam: int, frames: int, fps: float, t0_ns: int = 0
) -> tuple[CameraVideo, list[np.ndarray]]:
    rgb = [_frame(i, cam) for i in range(frames)]
    data = encode_mp4(rgb, fps=fps, width=CAM_W, height=CAM_H, crf=18, keyframe_interval=frames)
    ts = (t0_ns + np.arange(frames, dtype=np.int64) * int(1e9 / fps)).astype(np.int64)
    spec = CameraSpec(name=name, codec="h264", container="mp4", width=CAM_W, height=CAM_H, fps=fps)
    return CameraVideo(spec, ts, data), rgb


def _episode(
    *, steps: int = 20, rate: float = 20.0, cameras: tuple[CameraVideo, ...] = (), seed: int = 0
) -> Episode:
    rng = np.random.default_rng(seed)
    meta = EpisodeMeta(
        episode_id=f"r1-{seed:06d}",
        robot_id="r1",
        robot_type="aloha",
        task="stack",
        start_time_ns=1_000,
        control_rate_hz=rate,
        success=True,
        tags=("sim",),
    )
    ts = (np.arange(steps, dtype=np.int64) * int(1e9 / rate)).astype(np.int64)
    proprio = rng.standard_normal((steps, 5)).astype(np.float32)
    action = rng.standard_normal((steps, 3)).astype(np.float32)
    proprio[0, 0] = np.float32(1e-40)  # a subnormal: must survive bit-exact
    return Episode(meta, ts, proprio, action, cameras)


def _featurize(ep: Episode, config: FeaturizeConfig = CONFIG):  # -> FeaturizedEpisode
    return featurize(
        ep, attempt_id="att-1", received_at_ns=5, raw_size_bytes=123, committed_at_ns=9, config=config
    )


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * np.log10(255.0**2 / mse)


# -- align_frames ------------------------------------------------------------------------------
def test_align_frames_latest_frame_at_or_before_step() -> None:
    frames = np.array([100, 200, 300], dtype=np.int64)
    steps = np.array([0, 99, 100, 150, 199, 200, 299, 300, 10_000], dtype=np.int64)
    got = align_frames(steps, frames)
    assert got.dtype == np.int32
    # before the first frame -> 0; exactly equal -> that frame; in between -> the earlier one
    assert got.tolist() == [0, 0, 0, 0, 0, 1, 1, 2, 2]


def test_align_frames_matches_brute_force() -> None:
    rng = np.random.default_rng(3)
    frames = np.sort(rng.integers(0, 1000, 40)).astype(np.int64)
    steps = rng.integers(-50, 1100, 200).astype(np.int64)
    expected = [max([i for i, f in enumerate(frames) if f <= s], default=0) for s in steps]
    assert align_frames(steps, frames).tolist() == expected


def test_align_frames_rejects_bad_frames() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        align_frames(np.array([1]), np.array([], dtype=np.int64))
    with pytest.raises(ValueError, match="non-decreasing"):
        align_frames(np.array([1]), np.array([5, 3]))


# -- config ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"video_width": 63}, "video_width"),
        ({"video_height": 0}, "video_height"),
        ({"chunk_frames": 0}, "chunk_frames"),
        ({"crf": 52}, "crf"),
        ({"chunk_frames": 10, "keyframe_interval": 4}, "keyframe_interval must be >= 1 and divide"),
        ({"keyframe_interval": 0}, "keyframe_interval must be >= 1 and divide"),
        ({"transcode_threads": 0}, "transcode_threads"),
    ],
)
def test_config_validation(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FeaturizeConfig(**kwargs)


# -- featurize ---------------------------------------------------------------------------------
def test_steps_bit_exact_and_stats() -> None:
    cam, _ = _camera("cam_high", 0, 10, 10.0, t0_ns=30_000_000)
    ep = _episode(cameras=(cam,))
    f = _featurize(ep)
    steps = f.steps
    assert steps.num_rows == ep.step_count
    proprio = np.array(steps.column("proprio").to_pylist(), dtype=np.float32)
    action = np.array(steps.column("action").to_pylist(), dtype=np.float32)
    assert proprio.view(np.uint32).tolist() == ep.proprio.view(np.uint32).tolist()
    assert action.view(np.uint32).tolist() == ep.action.view(np.uint32).tolist()
    assert steps.column("step_index").to_pylist() == list(range(ep.step_count))
    assert steps.column("timestamp_ns").to_pylist() == ep.timestamps_ns.tolist()
    cfi = np.array(steps.column("camera_frame_index").to_pylist())
    assert cfi[:, 0].tolist() == align_frames(ep.timestamps_ns, cam.frame_timestamps_ns).tolist()

    row = f.episode.to_pylist()[0]
    for name, arr in (("proprio", ep.proprio), ("action", ep.action)):
        np.testing.assert_allclose(
            row[f"{name}_mean"], arr.mean(axis=0, dtype=np.float64), rtol=1e-6, atol=1e-7
        )
        np.testing.assert_allclose(
            row[f"{name}_std"], arr.std(axis=0, dtype=np.float64), rtol=1e-6, atol=1e-7
        )
        assert row[f"{name}_min"] == arr.min(axis=0).tolist()
        assert row[f"{name}_max"] == arr.max(axis=0).tolist()
    assert row["episode_id"] == ep.episode_id
    assert row["attempt_id"] == "att-1"
    assert row["step_count"] == ep.step_count
    assert row["cameras"] == ["cam_high"]
    assert (row["video_width"], row["video_height"], row["video_chunk_frames"]) == (64, 48, 4)
    assert (row["raw_size_bytes"], row["received_at_ns"], row["committed_at_ns"]) == (123, 5, 9)
    assert row["duration_s"] == pytest.approx(ep.step_count / ep.meta.control_rate_hz)


def test_video_chunks_decode_to_resized_frames() -> None:
    import av

    cam_a, rgb_a = _camera("cam_a", 0, 10, 10.0)
    cam_b, rgb_b = _camera("cam_b", 1, 7, 5.0)
    ep = _episode(cameras=(cam_a, cam_b))
    f = _featurize(ep)
    video = f.video.to_pylist()
    for cam, rgb in ((cam_a, rgb_a), (cam_b, rgb_b)):
        rows = sorted((r for r in video if r["camera"] == cam.spec.name), key=lambda r: r["chunk_index"])
        n = len(rgb)
        assert [r["chunk_index"] for r in rows] == list(range(-(-n // CONFIG.chunk_frames)))
        assert sum(r["frame_count"] for r in rows) == n
        ts: list[int] = []
        for r in rows:
            assert r["first_frame"] == r["chunk_index"] * CONFIG.chunk_frames
            assert (r["width"], r["height"], r["codec"]) == (64, 48, "h264")
            frames = decode_chunk_rgb(r["data"], height=48, width=64)  # each chunk decodes alone
            assert len(frames) == r["frame_count"]
            for k, got in enumerate(frames):
                src = av.VideoFrame.from_ndarray(rgb[r["first_frame"] + k], format="rgb24")
                want = src.reformat(width=64, height=48).to_ndarray()
                assert got.shape == (48, 64, 3)
                assert _psnr(got, want) > MIN_PSNR_DB
            ts.extend(r["frame_timestamps_ns"])
        assert ts == cam.frame_timestamps_ns.tolist()
    cfi = np.array(f.steps.column("camera_frame_index").to_pylist())
    assert cfi.shape == (ep.step_count, 2)
    assert cfi[:, 1].tolist() == align_frames(ep.timestamps_ns, cam_b.frame_timestamps_ns).tolist()


def test_no_cameras() -> None:
    f = _featurize(_episode())
    assert f.video.num_rows == 0
    assert f.steps.column("camera_frame_index").to_pylist()[0] == []


def test_frame_count_mismatch_is_bad_video() -> None:
    cam, _ = _camera("cam_high", 0, 6, 10.0)
    wrong = CameraVideo(cam.spec, np.arange(8, dtype=np.int64), cam.data)  # declares 8, holds 6
    with pytest.raises(ProtocolError, match="6 frames, 8 frame timestamps") as info:
        _featurize(_episode(cameras=(wrong,)))
    assert info.value.reason is QuarantineReason.BAD_VIDEO
    fewer = CameraVideo(cam.spec, np.arange(4, dtype=np.int64), cam.data)  # declares 4, holds 6
    with pytest.raises(ProtocolError, match="more than 4") as info:
        _featurize(_episode(cameras=(fewer,)))
    assert info.value.reason is QuarantineReason.BAD_VIDEO


def test_undecodable_video_is_bad_video() -> None:
    cam, _ = _camera("cam_high", 0, 4, 10.0)
    junk = CameraVideo(cam.spec, cam.frame_timestamps_ns, b"\x00not a video" * 50)
    with pytest.raises(ProtocolError) as info:
        _featurize(_episode(cameras=(junk,)))
    assert info.value.reason is QuarantineReason.BAD_VIDEO


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_bad_values(bad: float) -> None:
    ep = _episode()
    ep.action[7, 1] = bad
    with pytest.raises(ProtocolError, match="action is not finite at step 7") as info:
        _featurize(ep)
    assert info.value.reason is QuarantineReason.BAD_VALUES


def test_unordered_frame_timestamps_are_bad_values() -> None:
    cam, _ = _camera("cam_high", 0, 4, 10.0)
    back = CameraVideo(cam.spec, np.array([0, 200, 100, 300], dtype=np.int64), cam.data)
    with pytest.raises(ProtocolError, match="non-decreasing") as info:
        _featurize(_episode(cameras=(back,)))
    assert info.value.reason is QuarantineReason.BAD_VALUES


@pytest.mark.parametrize(("keyframe_interval", "intra"), [(None, True), (2, False), (4, False)])
def test_video_keyframe_interval(keyframe_interval: int | None, intra: bool) -> None:
    from dataclasses import replace

    from pi_format.video import ChunkDecoder
    from pi_format.video.reader import split_access_units

    config = CONFIG if keyframe_interval is None else replace(CONFIG, keyframe_interval=keyframe_interval)
    cam, _ = _camera("cam_a", 0, 10, 10.0)
    video = _featurize(_episode(cameras=(cam,)), config).video.to_pylist()
    for row in video:
        units = split_access_units(row["data"])
        assert units is not None
        assert [key for _, key in units] == [i % config.keyframe_interval == 0 for i in range(len(units))]
        assert ChunkDecoder(row["data"]).intra_only == intra


def test_cameras_transcoded_at_once_give_the_same_rows() -> None:
    """Cameras re-encoded on threads give the rows of one-after-the-other, bit for bit."""
    cams = tuple(_camera(f"cam_{k}", k, 12, 10.0)[0] for k in range(3))
    ep = _episode(steps=24, cameras=cams)
    serial = _featurize(ep, dataclasses.replace(CONFIG, transcode_threads=1))
    threaded = _featurize(ep, dataclasses.replace(CONFIG, transcode_threads=3))
    assert threaded.video.equals(serial.video)
    assert threaded.video.column("camera").to_pylist()[:: serial.video.num_rows // 3] == [
        "cam_0",
        "cam_1",
        "cam_2",
    ]


def test_first_failing_camera_in_order_is_reported_with_threads() -> None:
    good, _ = _camera("cam_a", 0, 6, 10.0)
    bad_b = CameraVideo(
        CameraSpec(name="cam_b", codec="h264", container="mp4", width=CAM_W, height=CAM_H, fps=10.0),
        good.frame_timestamps_ns,
        b"\x00not a video" * 50,
    )
    bad_c = CameraVideo(
        CameraSpec(name="cam_c", codec="h264", container="mp4", width=CAM_W, height=CAM_H, fps=10.0),
        np.arange(9, dtype=np.int64),
        good.data,
    )
    config = dataclasses.replace(CONFIG, transcode_threads=3)
    with pytest.raises(ProtocolError, match="camera 'cam_b'") as info:
        _featurize(_episode(cameras=(good, bad_b, bad_c)), config)
    assert info.value.reason is QuarantineReason.BAD_VIDEO


def _chunks(width: int, height: int, frames: int = 6) -> list[Any]:
    from pi_format.video import ChunkedVideoEncoder

    encoder = ChunkedVideoEncoder(
        width=width, height=height, fps=10.0, chunk_frames=3, crf=20, keyframe_interval=1
    )
    out = []
    for i in range(frames):
        out.extend(encoder.add(np.full((height, width, 3), 20 * i, np.uint8)))
    return out + encoder.close()


def _flip(data: bytes, at: int) -> bytes:
    at %= len(data)
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def _first_unit_not_idr(data: bytes) -> bytes:
    """The chunk with its first IDR slice's NAL type changed to a non-IDR slice (1)."""
    from pi_format.video.reader import access_unit_bounds

    units = access_unit_bounds(data)
    assert units is not None
    at = data.index(b"\x00\x00\x01\x65") + 3  # nal_ref_idc 3, type 5: x264's IDR slice
    return data[:at] + bytes([(data[at] & 0xE0) | 1]) + data[at + 1 :]


def test_every_training_chunk_is_decoded_and_checked() -> None:
    from pi_jobs.stream.featurize import _verify_chunks

    config = FeaturizeConfig(video_width=64, video_height=48, chunk_frames=3)
    good = _chunks(64, 48)
    _verify_chunks("e", "cam", good, config)  # the right size and count: no error
    bad = {
        "another size": _chunks(32, 32),
        "fewer frames than claimed": [dataclasses.replace(good[0], frame_count=4)],
        "truncated": [dataclasses.replace(good[0], data=good[0].data[: len(good[0].data) // 3])],
        "garbage": [dataclasses.replace(good[0], data=bytes(range(256)) * 8)],
        # FFmpeg conceals these and returns every frame unless the check asks it not to
        "one byte short": [dataclasses.replace(good[0], data=good[0].data[:-1])],
        "a flipped byte in a slice": [dataclasses.replace(good[0], data=_flip(good[0].data, -5))],
        "a zeroed tail": [dataclasses.replace(good[0], data=good[0].data[:-30] + bytes(30))],
        "a frame that is not an IDR": [dataclasses.replace(good[0], data=_first_unit_not_idr(good[0].data))],
    }
    for what, chunks in bad.items():
        with pytest.raises(ProtocolError) as caught:
            _verify_chunks("e", "cam", chunks, config)
        assert caught.value.reason is QuarantineReason.BAD_VIDEO, what
        assert "training chunk 0" in str(caught.value), what
