"""Fleet simulator: deterministic, realistic-looking robot episodes for tests, demos and benchmarks.

Sits at the very start of the data flow, where a real robot would be: it produces `Episode`s
(smooth joint trajectories, commanded actions, H.264 MP4 camera streams) and can write them as
bundle files that `pilake upload` sends. Every episode is a pure function of
(seed, robot_index, episode_index), so any episode can be regenerated to check what the lake
stored against what was sent.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pi_format.episode import CameraSpec, CameraVideo, Episode, EpisodeMeta, check_name

from pi_ingest import _scene

logger = logging.getLogger("pi_ingest")

# 2026-01-01T00:00:00Z: simulated episodes start after it, so their times look like real data.
_EPOCH_2026_NS = 1_767_225_600 * 1_000_000_000
_DAY_NS = 86_400 * 1_000_000_000

TASKS = (
    "pick up the red cube and put it in the bowl",
    "open the drawer and take out the sponge",
    "stack the blue block on the green block",
    "hand the cup from the left arm to the right arm",
    "push the toy car to the edge of the table",
    "fold the towel in half",
)


@dataclass(frozen=True, slots=True)
class SimulationConfig:
    """What the simulated fleet records.

    Defaults mimic a small ALOHA fleet: two 7-DoF arms (14 joints incl. grippers) controlled at
    50 Hz, three 30 fps cameras, 4 s episodes kept short so a laptop renders one in ~1 s.

    Example:
        >>> cfg = SimulationConfig(robots=1, episodes_per_robot=1, duration_s=1.0)
        >>> ep = simulate_episode(cfg, 0, 0)
        >>> ep.episode.episode_id
        'sim0-r000-e00000'
    """

    robots: int = 2
    episodes_per_robot: int = 2
    duration_s: float = 4.0
    control_rate_hz: float = 50.0  # ALOHA's control loop rate
    camera_fps: float = 30.0  # what the RealSense/webcams on such robots deliver
    camera_width: int = 320
    camera_height: int = 240
    cameras: tuple[str, ...] = ("cam_high", "cam_left_wrist", "cam_right_wrist")
    proprio_dim: int = 14
    action_dim: int = 14
    robot_type: str = "aloha"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("robots", "episodes_per_robot"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.robots > 1000:
            raise ValueError(f"robots must be <= 1000 (ids use 3 digits), got {self.robots}")
        if self.episodes_per_robot > 100_000:
            raise ValueError(
                f"episodes_per_robot must be <= 100000 (ids use 5 digits), got {self.episodes_per_robot}"
            )
        for name in ("duration_s", "control_rate_hz", "camera_fps"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if math.floor(self.duration_s * self.camera_fps) < 1:
            raise ValueError(
                f"duration_s * camera_fps must give at least one frame, got {self.duration_s} s at "
                f"{self.camera_fps} fps; raise duration_s"
            )
        if math.floor(self.duration_s * self.control_rate_hz) < 2:
            raise ValueError(
                f"duration_s * control_rate_hz must give at least two steps, got {self.duration_s} s "
                f"at {self.control_rate_hz} Hz; raise duration_s"
            )
        for name in ("camera_width", "camera_height"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 16 or value % 2:
                raise ValueError(f"{name} must be an even integer >= 16 (H.264 4:2:0), got {value!r}")
        if not isinstance(self.cameras, tuple):
            raise TypeError(f"cameras must be a tuple of names, got {type(self.cameras).__name__}")
        for cam in self.cameras:
            check_name("camera name", cam)
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"cameras must be unique, got {self.cameras}")
        if (
            isinstance(self.proprio_dim, bool)
            or not isinstance(self.proprio_dim, int)
            or self.proprio_dim < 3
        ):
            raise ValueError(
                f"proprio_dim must be an integer >= 3 (two arm joints, a gripper), got {self.proprio_dim!r}"
            )
        if isinstance(self.action_dim, bool) or not isinstance(self.action_dim, int) or self.action_dim < 1:
            raise ValueError(f"action_dim must be an integer >= 1, got {self.action_dim!r}")
        check_name("robot_type", self.robot_type)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")

    @property
    def step_count(self) -> int:
        return math.floor(self.duration_s * self.control_rate_hz + 1e-9)

    @property
    def frame_count(self) -> int:
        return math.floor(self.duration_s * self.camera_fps + 1e-9)


@dataclass(frozen=True, slots=True, eq=False)
class SimulatedEpisode:
    """A simulated episode and the frames its videos were encoded from.

    `frames` maps camera name to the original uint8 RGB frames [F, H, W, 3], so a test can
    measure what compression (and the lake's re-encoding) did to them.
    """

    episode: Episode
    frames: dict[str, np.ndarray]


@dataclass(frozen=True, slots=True, eq=False)
class _Trajectory:
    """Joint targets as sums of low-frequency sines; grippers as smooth open/close cycles."""

    offset: np.ndarray  # [D]
    amp: np.ndarray  # [D, K]
    freq_hz: np.ndarray  # [D, K]
    phase: np.ndarray  # [D, K]
    gripper: np.ndarray  # bool [D]
    command_phase: np.ndarray  # [A]

    def __call__(self, t: np.ndarray) -> np.ndarray:
        """Joint positions [len(t), D] at times t (seconds)."""
        arg = 2 * np.pi * self.freq_hz[None] * t[:, None, None] + self.phase[None]
        q = self.offset[None] + (self.amp[None] * np.sin(arg)).sum(axis=2)
        # A gripper opens and closes: a squashed sine stays near 0 or 1 and moves smoothly.
        g = 0.5 + 0.5 * np.tanh(2.5 * np.sin(arg[:, :, 0]))
        return np.where(self.gripper[None], g, q)


def _trajectory(rng: np.random.Generator, proprio_dim: int, action_dim: int) -> _Trajectory:
    arms, per = _scene.arm_layout(proprio_dim)
    k = 3
    gripper = np.zeros(proprio_dim, dtype=bool)
    for a in range(arms):
        gripper[a * per + per - 1] = True
    amp = rng.uniform(0.05, 0.45, size=(proprio_dim, k)) / np.arange(1, k + 1)
    freq = rng.uniform(0.05, 0.6, size=(proprio_dim, k))
    freq[gripper, 0] = rng.uniform(0.2, 0.5, size=int(gripper.sum()))
    return _Trajectory(
        offset=rng.uniform(-0.3, 0.3, size=proprio_dim),
        amp=amp,
        freq_hz=freq,
        phase=rng.uniform(0, 2 * np.pi, size=(proprio_dim, k)),
        gripper=gripper,
        command_phase=rng.uniform(0, 2 * np.pi, size=action_dim),
    )


# The commanded target leads the measured position, as a position controller's setpoint does.
_COMMAND_LEAD_S = 0.08


def _views(config: SimulationConfig, arms: int) -> list[tuple[str, _scene._View, int]]:
    """(camera, view, arm) for each camera: names with 'wrist' ride on an arm, others look down."""
    out: list[tuple[str, _scene._View, int]] = []
    w, h = config.camera_width, config.camera_height
    overhead = 0
    wrist = 0
    for name in config.cameras:
        if "wrist" in name:
            if "right" in name and arms > 1:
                arm = 1
            elif "left" in name:
                arm = 0
            else:
                arm = wrist % arms
            wrist += 1
            out.append((name, _scene.WristView(w, h, span=0.42), arm))
        else:
            # Several fixed cameras get different heights, so their views differ.
            out.append((name, _scene.OverheadView(w, h, horizon=0.28 + 0.1 * (overhead % 3)), -1))
            overhead += 1
    return out


def render_frames(
    config: SimulationConfig, rng: np.random.Generator, proprio_at_frames: np.ndarray
) -> dict[str, np.ndarray]:
    """Render every camera of an episode: name -> uint8 RGB [F, H, W, 3]."""
    arms, _ = _scene.arm_layout(config.proprio_dim)
    scene = _scene.random_scene(rng, arms)
    grips, openings = _scene.gripper_tracks(proprio_at_frames, scene)
    objects = _scene.object_tracks(scene, grips, openings)
    frame_count = proprio_at_frames.shape[0]
    out: dict[str, np.ndarray] = {}
    for name, view, arm in _views(config, arms):
        frames = np.empty((frame_count, config.camera_height, config.camera_width, 3), dtype=np.uint8)
        if isinstance(view, _scene.OverheadView):
            background = _scene.overhead_background(scene, view)
            for f in range(frame_count):
                frames[f] = _scene.render_overhead(scene, view, background, objects, grips, openings, f)
        elif isinstance(view, _scene.WristView):
            for f in range(frame_count):
                frames[f] = _scene.render_wrist(scene, view, arm, objects, grips, openings, f)
        out[name] = frames
    return out


def simulate_episode(config: SimulationConfig, robot_index: int, episode_index: int) -> SimulatedEpisode:
    """Simulate one episode of one robot; the same arguments always give the same bytes.

    Args:
        config: the fleet's configuration.
        robot_index: 0 <= robot_index < config.robots.
        episode_index: 0 <= episode_index < config.episodes_per_robot.

    Returns:
        The episode (cameras as H.264 MP4) and the original rendered frames.

    Raises:
        ValueError: an index is out of range.

    Example:
        >>> sim = simulate_episode(SimulationConfig(duration_s=1.0), 0, 1)
        >>> sim.episode.step_count, sim.frames["cam_high"].shape
        (50, (30, 240, 320, 3))
    """
    from pi_format.video import encode_mp4  # PyAV: only when video is made

    if not 0 <= robot_index < config.robots:
        raise ValueError(f"robot_index must be in [0, {config.robots}), got {robot_index}")
    if not 0 <= episode_index < config.episodes_per_robot:
        raise ValueError(f"episode_index must be in [0, {config.episodes_per_robot}), got {episode_index}")
    # Independent streams per (seed, robot, episode); never the global RNG.
    seq = np.random.SeedSequence([config.seed, robot_index, episode_index])
    traj_rng, scene_rng, meta_rng = (np.random.default_rng(s) for s in seq.spawn(3))

    robot_id = f"sim{config.seed}-r{robot_index:03d}"
    episode_id = f"{robot_id}-e{episode_index:05d}"
    # Each robot records on its own day; episodes follow each other with a few minutes between.
    start_ns = (
        _EPOCH_2026_NS
        + (config.seed % 365) * _DAY_NS
        + robot_index * 3_600_000_000_000
        + episode_index * (int(config.duration_s * 1e9) + 180_000_000_000)
        + int(meta_rng.integers(0, 60_000_000_000))
    )

    traj = _trajectory(traj_rng, config.proprio_dim, config.action_dim)
    steps = config.step_count
    t = np.arange(steps) / config.control_rate_hz
    timestamps = start_ns + np.round(np.arange(steps) * 1e9 / config.control_rate_hz).astype(np.int64)
    proprio = traj(t).astype(np.float32)
    ahead = traj(t + _COMMAND_LEAD_S)
    cols = np.arange(config.action_dim) % config.proprio_dim
    action = ahead[:, cols] + 0.01 * np.sin(2 * np.pi * 0.3 * t[:, None] + traj.command_phase[None])
    action = action.astype(np.float32)

    frame_count = config.frame_count
    frame_t = np.arange(frame_count) / config.camera_fps
    frame_ts = start_ns + np.round(np.arange(frame_count) * 1e9 / config.camera_fps).astype(np.int64)
    # The scene follows the recorded proprio, interpolated at each frame's time.
    at_frames = np.stack([np.interp(frame_t, t, proprio[:, j]) for j in range(config.proprio_dim)], axis=1)
    frames = render_frames(config, scene_rng, at_frames.astype(np.float32))

    cameras = []
    for name in config.cameras:
        data = encode_mp4(
            frames[name], fps=config.camera_fps, width=config.camera_width, height=config.camera_height
        )
        spec = CameraSpec(
            name=name,
            codec="h264",
            container="mp4",
            width=config.camera_width,
            height=config.camera_height,
            fps=float(config.camera_fps),
        )
        cameras.append(CameraVideo(spec, frame_ts.copy(), data))

    meta = EpisodeMeta(
        episode_id=episode_id,
        robot_id=robot_id,
        robot_type=config.robot_type,
        task=TASKS[int(meta_rng.integers(len(TASKS)))],
        start_time_ns=int(start_ns),
        control_rate_hz=float(config.control_rate_hz),
        success=bool(meta_rng.random() < 0.8),  # most teleoperated demos succeed
        tags=("sim", config.robot_type),
    )
    episode = Episode(
        meta=meta, timestamps_ns=timestamps, proprio=proprio, action=action, cameras=tuple(cameras)
    )
    return SimulatedEpisode(episode=episode, frames=frames)


def simulate_fleet(config: SimulationConfig) -> Iterator[SimulatedEpisode]:
    """Yield every episode of the fleet, robot by robot, lazily (one episode in memory at a time).

    Example:
        >>> ids = [s.episode.episode_id for s in simulate_fleet(SimulationConfig(robots=1))]
        >>> ids
        ['sim0-r000-e00000', 'sim0-r000-e00001']
    """
    for robot in range(config.robots):
        for episode in range(config.episodes_per_robot):
            yield simulate_episode(config, robot, episode)


def write_fleet(config: SimulationConfig, out_dir: Path, *, progress: bool = True) -> list[Path]:
    """Simulate the fleet and write one bundle file per episode into `out_dir`.

    Returns:
        The bundle paths, in fleet order.

    Example:
        >>> paths = write_fleet(SimulationConfig(robots=1), Path("bundles"))
        >>> paths[0].name
        'sim0-r000-e00000.piep'
    """
    from pi_format.wire import BUNDLE_SUFFIX, encode_episode, write_bundle
    from tqdm import tqdm

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    total = config.robots * config.episodes_per_robot
    with tqdm(total=total, unit="episode", desc="simulate", disable=not progress) as bar:
        for sim in simulate_fleet(config):
            ep = sim.episode
            paths.append(write_bundle(out / f"{ep.episode_id}{BUNDLE_SUFFIX}", encode_episode(ep)))
            bar.update(1)
    logger.info("wrote %d simulated episodes to %s", len(paths), out)
    return paths
