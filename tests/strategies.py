"""Hypothesis strategies shared by the project's tests (house style 10).

The wire layer treats camera `data` as opaque bytes, so `episodes()` draws arbitrary bytes
there; tests that need decodable video build it with `pi_format.video.encode_mp4` instead.

Example:
    >>> from hypothesis import given
    >>> @given(episodes(max_steps=8))
    ... def test_something(ep: Episode) -> None: ...
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from pi_format import CameraSpec, CameraVideo, Episode, EpisodeMeta

__all__ = [
    "assert_episodes_identical",
    "camera_specs",
    "episode_metas",
    "episodes",
    "names",
    "payload_sizes",
]

_NAME_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_NAME_REST = _NAME_FIRST + "_.-"

# Edge values that a byte-exact round trip must keep: signed zeros, subnormals, extremes, and
# NaN/inf (arrays are carried bit for bit; value checks belong to the stream job, not the wire).
_F32_EDGES = np.array(
    [0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38, -3.4028235e38, np.inf, -np.inf, np.nan],
    dtype=np.float32,
)
_I64_EDGES = [0, -1, 1, 2**63 - 1, -(2**63)]


def names(max_size: int = 24) -> st.SearchStrategy[str]:
    """Identifiers accepted by `pi_format.episode.check_name` (ids, robot types, cameras)."""
    return st.builds(
        lambda first, rest: first + rest,
        st.sampled_from(_NAME_FIRST),
        st.text(alphabet=_NAME_REST, max_size=max_size - 1),
    )


def episode_metas(episode_id: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[EpisodeMeta]:
    """Valid `EpisodeMeta`s with free-text tasks and tags (no lone surrogates: not UTF-8)."""
    text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
    return st.builds(
        EpisodeMeta,
        episode_id=episode_id if episode_id is not None else names(),
        robot_id=names(12),
        robot_type=names(12),
        task=text,
        start_time_ns=st.integers(min_value=-(2**63), max_value=2**63 - 1),
        control_rate_hz=st.floats(min_value=1e-3, max_value=1e5, allow_nan=False, allow_infinity=False),
        success=st.booleans(),
        tags=st.lists(text, max_size=3).map(tuple),
    )


def camera_specs(name: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[CameraSpec]:
    """Valid `CameraSpec`s (even sizes, finite positive fps)."""
    return st.builds(
        CameraSpec,
        name=name if name is not None else names(12),
        codec=st.sampled_from(["h264", "hevc", "av1"]),
        container=st.sampled_from(["mp4", "mkv"]),
        width=st.integers(1, 960).map(lambda v: 2 * v),
        height=st.integers(1, 540).map(lambda v: 2 * v),
        fps=st.floats(min_value=0.5, max_value=240.0, allow_nan=False),
    )


def _f32_arrays(rows: int, cols: int) -> st.SearchStrategy[np.ndarray]:
    elements = st.one_of(
        st.sampled_from(list(_F32_EDGES)),
        st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True),
    )
    return st.lists(elements, min_size=rows * cols, max_size=rows * cols).map(
        lambda xs: np.array(xs, dtype=np.float32).reshape(rows, cols)
    )


def _i64_vectors(size: int) -> st.SearchStrategy[np.ndarray]:
    elements = st.one_of(st.sampled_from(_I64_EDGES), st.integers(-(2**63), 2**63 - 1))
    return st.lists(elements, min_size=size, max_size=size).map(lambda xs: np.array(xs, dtype=np.int64))


@st.composite
def _camera_videos(draw: st.DrawFn, name: str, max_frames: int) -> CameraVideo:
    spec = draw(camera_specs(st.just(name)))
    frames = draw(st.integers(0, max_frames))
    return CameraVideo(spec, draw(_i64_vectors(frames)), draw(st.binary(max_size=2048)))


@st.composite
def episodes(
    draw: st.DrawFn, *, max_steps: int = 12, max_dim: int = 6, max_cameras: int = 2, max_frames: int = 8
) -> Episode:
    """Small valid `Episode`s; arrays hold edge values, camera `data` is arbitrary bytes.

    Timestamps are arbitrary int64 (not sorted): the wire carries them bit for bit and the
    ordering rule is checked downstream, so the round trip must not depend on it.
    """
    steps = draw(st.integers(1, max_steps))
    proprio_dim = draw(st.integers(0, max_dim))
    action_dim = draw(st.integers(0, max_dim))
    cam_names = draw(st.lists(names(12), max_size=max_cameras, unique=True))
    return Episode(
        meta=draw(episode_metas()),
        timestamps_ns=draw(_i64_vectors(steps)),
        proprio=draw(_f32_arrays(steps, proprio_dim)),
        action=draw(_f32_arrays(steps, action_dim)),
        cameras=tuple(draw(_camera_videos(n, max_frames)) for n in cam_names),
    )


def payload_sizes() -> st.SearchStrategy[int]:
    """`payload_bytes` for `encode_episode`: tiny (many chunks, empty tails) up to the default."""
    return st.one_of(st.integers(1, 64), st.integers(65, 4096), st.just(512 * 1024))


def assert_episodes_identical(got: Episode, want: Episode) -> None:
    """Assert two episodes are equal field by field, arrays bit for bit (NaN payloads, -0.0)."""
    assert got.meta == want.meta
    for field in ("timestamps_ns", "proprio", "action"):
        a, b = getattr(got, field), getattr(want, field)
        assert (a.dtype, a.shape) == (b.dtype, b.shape), field
        assert a.tobytes() == b.tobytes(), field
    assert got.camera_names == want.camera_names
    for cg, cw in zip(got.cameras, want.cameras, strict=True):
        assert cg.spec == cw.spec
        assert cg.frame_timestamps_ns.dtype == np.int64
        assert cg.frame_timestamps_ns.tobytes() == cw.frame_timestamps_ns.tobytes()
        assert cg.data == cw.data
