"""The ingest contract: value, timestamp, rate and registry checks of one assembled episode.

Sits in the stream job between the assembler (which has already checked the protocol: version,
counts, checksums, shapes) and featurize (which decodes the video and checks it). Pure
functions, no I/O except `load_registry`, which reads the robot registry file at the edge.
Each rule yields `Violation`s carrying a `pi_format.QuarantineReason`; `check_episode` raises a
`ProtocolError` with the first one's reason and all of them in its message. See
format/SPEC.md section 9.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from pi_format import Episode, ProtocolError, QuarantineReason

from pi_jobs.errors import PiJobsError

# Relative error of the mean rate accepted when the registry sets none: loops jitter by a few
# percent, a declared rate that is 5% off is wrong metadata or dropped data.
DEFAULT_RATE_TOLERANCE = 0.05
# A single interval longer than this many nominal periods is a stall or a gap, not jitter.
DEFAULT_MAX_GAP_PERIODS = 5.0
# The registry shipped with pi_jobs (package data), used when no path is configured.
PACKAGED_REGISTRY = "robots.toml"


class RegistryError(PiJobsError):
    """The robot registry file cannot be read or an entry is invalid."""


@dataclass(frozen=True, slots=True)
class RobotType:
    """What one robot type may send.

    Example:
        >>> RobotType("aloha", proprio_range=(-6.3, 6.3), action_range=(-6.3, 6.3),
        ...           control_rate_hz=(10.0, 200.0), camera_fps=(5.0, 120.0))
    """

    name: str
    proprio_range: tuple[float, float]
    action_range: tuple[float, float]
    control_rate_hz: tuple[float, float]
    camera_fps: tuple[float, float]
    proprio_dim: int | None = None  # None: any dimension
    action_dim: int | None = None
    rate_tolerance: float = DEFAULT_RATE_TOLERANCE
    max_gap_periods: float = DEFAULT_MAX_GAP_PERIODS
    # what each dimension is (joint names): shown by `pilake ui`, checked by nothing else; ()
    # when the registry does not say (the UI then shows proprio[0], ...)
    proprio_names: tuple[str, ...] = ()
    action_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for label in ("proprio_names", "action_names"):
            names, dim = getattr(self, label), getattr(self, label.replace("_names", "_dim"))
            if not all(isinstance(n, str) and 0 < len(n) <= 128 for n in names):
                raise ValueError(f"robot type {self.name!r}: {label} must be names of 1-128 characters")
            if names and dim is not None and len(names) != dim:
                raise ValueError(f"robot type {self.name!r}: {len(names)} {label} for {dim} dimensions")
        for label in ("proprio_range", "action_range", "control_rate_hz", "camera_fps"):
            low, high = getattr(self, label)
            if not (math.isfinite(low) and math.isfinite(high) and low <= high):
                raise ValueError(
                    f"robot type {self.name!r}: {label} must be [low, high] with finite low <= high, "
                    f"got [{low}, {high}]"
                )
        for label in ("proprio_dim", "action_dim"):
            dim = getattr(self, label)
            if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 0):
                raise ValueError(f"robot type {self.name!r}: {label} must be an integer >= 0, got {dim!r}")
        if not 0 < self.rate_tolerance < 1:
            raise ValueError(
                f"robot type {self.name!r}: rate_tolerance must be in (0, 1), got {self.rate_tolerance}"
            )
        if not self.max_gap_periods > 1:
            raise ValueError(
                f"robot type {self.name!r}: max_gap_periods must be > 1, got {self.max_gap_periods}"
            )


@dataclass(frozen=True, slots=True)
class RobotRegistry:
    """The robot types the lake accepts; picklable (it travels into the Flink worker).

    Example:
        >>> registry = load_registry(None)
        >>> registry.get("aloha").control_rate_hz
        (10.0, 200.0)
    """

    robot_types: tuple[RobotType, ...]
    source: str = ""  # the file it was read from, for messages
    _by_name: Mapping[str, RobotType] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {t.name: t for t in self.robot_types}
        if len(by_name) != len(self.robot_types):
            raise ValueError(f"robot types named twice in {self.source or 'the registry'}")
        object.__setattr__(self, "_by_name", by_name)

    def get(self, robot_type: str) -> RobotType | None:
        """The entry of `robot_type`, or None when the registry does not know it."""
        return self._by_name.get(robot_type)

    @property
    def names(self) -> list[str]:
        return sorted(self._by_name)


def _pair(doc: Mapping[str, Any], key: str, where: str) -> tuple[float, float]:
    value = doc.get(key)
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        raise RegistryError(f"{where}: {key} must be a list [low, high] of two numbers, got {value!r}")
    return float(value[0]), float(value[1])


def _names(doc: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise RegistryError(f"{where}: {key} must be a list of names, got {value!r}")
    return tuple(value)


def parse_registry(doc: Mapping[str, Any], *, source: str = "") -> RobotRegistry:
    """Build a registry from the parsed TOML document (see jobs/pi_jobs/stream/robots.toml).

    Raises:
        RegistryError: a missing or ill-typed field, naming the file, robot type and field.

    Example:
        >>> parse_registry(tomllib.loads(text), source="robots.toml").names
        ['aloha', 'franka']
    """
    where = source or "robot registry"
    defaults = doc.get("defaults", {})
    types_doc = doc.get("robot_types")
    if not isinstance(defaults, dict) or not isinstance(types_doc, dict) or not types_doc:
        raise RegistryError(
            f"{where}: needs a [robot_types.<name>] table per robot type (and optionally [defaults])"
        )
    known = {
        "proprio_range",
        "action_range",
        "control_rate_hz",
        "camera_fps",
        "proprio_dim",
        "action_dim",
        "rate_tolerance",
        "max_gap_periods",
        "proprio_names",
        "action_names",
    }
    types = []
    for name, entry in sorted(types_doc.items()):
        at = f"{where}: robot type {name!r}"
        if not isinstance(entry, dict):
            raise RegistryError(f"{at} must be a table, got {entry!r}")
        unknown = sorted(set(entry) - known)
        if unknown:  # a typo must not silently fall back to "any value"
            raise RegistryError(f"{at}: unknown keys {unknown}; known keys are {sorted(known)}")

        def setting(key: str, default: float, entry: dict[str, Any] = entry) -> Any:
            return entry.get(key, defaults.get(key, default))

        try:
            types.append(
                RobotType(
                    name=name,
                    proprio_range=_pair(entry, "proprio_range", at),
                    action_range=_pair(entry, "action_range", at),
                    control_rate_hz=_pair(entry, "control_rate_hz", at),
                    camera_fps=_pair(entry, "camera_fps", at),
                    proprio_dim=entry.get("proprio_dim"),
                    action_dim=entry.get("action_dim"),
                    rate_tolerance=float(setting("rate_tolerance", DEFAULT_RATE_TOLERANCE)),
                    max_gap_periods=float(setting("max_gap_periods", DEFAULT_MAX_GAP_PERIODS)),
                    proprio_names=_names(entry, "proprio_names", at),
                    action_names=_names(entry, "action_names", at),
                )
            )
        except (TypeError, ValueError) as err:
            raise RegistryError(f"{where}: {err}") from err
    return RobotRegistry(tuple(types), source=source)


def load_registry(path: str | Path | None) -> RobotRegistry:
    """Read the robot registry TOML at `path`; None or "" reads the one shipped with pi_jobs.

    Raises:
        RegistryError: the file is missing, not TOML, or an entry is invalid.

    Example:
        >>> load_registry("config/robots.toml").get("aloha") is not None
        True
    """
    if path is None or str(path) == "":
        ref = resources.files("pi_jobs.stream").joinpath(PACKAGED_REGISTRY)
        source, text = f"pi_jobs/{PACKAGED_REGISTRY}", ref.read_text(encoding="utf-8")
    else:
        source = str(Path(path).absolute())
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise RegistryError(
                f"cannot read the robot registry {source}: {err}; set PILAKE_ROBOTS to an existing file"
            ) from err
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise RegistryError(f"robot registry {source} is not valid TOML: {err}") from err
    return parse_registry(doc, source=source)


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule of the contract."""

    reason: QuarantineReason
    detail: str


# -- the rules (each a generator of violations) -------------------------------------------------
def check_finite(name: str, values: np.ndarray) -> Iterator[Violation]:
    """NaN or +-Inf anywhere in a [T, D] float array -> bad_values, naming the first cell."""
    bad = ~np.isfinite(values)
    if bool(bad.any()):
        step, dim = (int(i) for i in np.argwhere(bad)[0])
        yield Violation(
            QuarantineReason.BAD_VALUES,
            f"{name} is not finite at step {step} dim {dim} ({values[step, dim]!r}); "
            f"{int(bad.sum())} non-finite values in all",
        )


def check_monotonic(name: str, timestamps_ns: np.ndarray) -> Iterator[Violation]:
    """Timestamps that do not strictly increase -> bad_timestamps, naming the first offender."""
    ts = np.asarray(timestamps_ns, dtype=np.int64)
    if ts.shape[0] < 2:
        return
    steps = np.diff(ts)
    if bool((steps <= 0).any()):
        i = int(np.argmax(steps <= 0))
        yield Violation(
            QuarantineReason.BAD_TIMESTAMPS,
            f"{name} must strictly increase: [{i}]={int(ts[i])} then [{i + 1}]={int(ts[i + 1])}",
        )


def check_rate(
    name: str,
    timestamps_ns: np.ndarray,
    declared_hz: float,
    *,
    tolerance: float = DEFAULT_RATE_TOLERANCE,
    max_gap_periods: float = DEFAULT_MAX_GAP_PERIODS,
) -> Iterator[Violation]:
    """The mean rate of increasing timestamps vs the declared rate, and the longest gap.

    Needs at least two timestamps (one gives no rate). Skipped for timestamps that do not
    increase: `check_monotonic` reports those.

    Example:
        >>> list(check_rate("steps", np.arange(10) * 20_000_000, 50.0))
        []
    """
    ts = np.asarray(timestamps_ns, dtype=np.int64)
    if ts.shape[0] < 2:
        return
    intervals = np.diff(ts)
    if bool((intervals <= 0).any()):
        return
    span_ns = int(ts[-1]) - int(ts[0])
    measured_hz = (ts.shape[0] - 1) * 1e9 / span_ns
    if abs(measured_hz / declared_hz - 1.0) > tolerance:
        yield Violation(
            QuarantineReason.BAD_RATE,
            f"{name}: measured {measured_hz:.4g} Hz over {ts.shape[0]} timestamps, declared "
            f"{declared_hz:.4g} Hz (tolerance {tolerance:.0%})",
        )
        return
    period_ns = 1e9 / declared_hz
    longest = int(intervals.max())
    if longest > max_gap_periods * period_ns:
        at = int(np.argmax(intervals))
        yield Violation(
            QuarantineReason.BAD_RATE,
            f"{name}: a gap of {longest / 1e6:.1f} ms after [{at}] is more than {max_gap_periods:g} "
            f"periods of {period_ns / 1e6:.1f} ms at the declared {declared_hz:.4g} Hz",
        )


def check_range(name: str, values: np.ndarray, low: float, high: float) -> Iterator[Violation]:
    """Finite values outside [low, high] -> out_of_range, naming the first cell."""
    outside = np.isfinite(values) & ((values < low) | (values > high))
    if bool(outside.any()):
        step, dim = (int(i) for i in np.argwhere(outside)[0])
        yield Violation(
            QuarantineReason.OUT_OF_RANGE,
            f"{name}[{step}, {dim}] = {float(values[step, dim])!r} is outside [{low:g}, {high:g}]; "
            f"{int(outside.sum())} values outside in all",
        )


def _within(name: str, value: float, bounds: tuple[float, float], robot_type: str) -> Iterator[Violation]:
    low, high = bounds
    if not low <= value <= high:
        yield Violation(
            QuarantineReason.OUT_OF_RANGE,
            f"{name} = {value:g} is outside [{low:g}, {high:g}] allowed for robot type {robot_type!r}",
        )


def _registry_rules(episode: Episode, spec: RobotType) -> Iterator[Violation]:
    m = episode.meta
    for label, got, want in (
        ("proprio_dim", episode.proprio_dim, spec.proprio_dim),
        ("action_dim", episode.action_dim, spec.action_dim),
    ):
        if want is not None and got != want:
            yield Violation(
                QuarantineReason.OUT_OF_RANGE,
                f"{label} = {got}, robot type {spec.name!r} has {want}",
            )
    yield from _within("control_rate_hz", m.control_rate_hz, spec.control_rate_hz, spec.name)
    for cam in episode.cameras:
        yield from _within(f"camera {cam.spec.name!r} fps", cam.spec.fps, spec.camera_fps, spec.name)
    yield from check_range("proprio", episode.proprio, *spec.proprio_range)
    yield from check_range("action", episode.action, *spec.action_range)


def find_violations(episode: Episode, registry: RobotRegistry) -> list[Violation]:
    """Every broken rule of the contract, most basic first (see SPEC.md section 9).

    Order: bad_values (NaN/Inf), bad_timestamps, bad_rate, unknown_robot_type, out_of_range.
    Video (decodes, size, frame count) is checked by `featurize`, which decodes it anyway.

    Example:
        >>> find_violations(episode, load_registry(None))
        []
    """
    m = episode.meta
    spec = registry.get(m.robot_type)
    tolerance = spec.rate_tolerance if spec else DEFAULT_RATE_TOLERANCE
    max_gap = spec.max_gap_periods if spec else DEFAULT_MAX_GAP_PERIODS
    found: list[Violation] = []
    found += check_finite("proprio", episode.proprio)
    found += check_finite("action", episode.action)
    found += check_monotonic("timestamps_ns", episode.timestamps_ns)
    for cam in episode.cameras:
        found += check_monotonic(f"camera {cam.spec.name!r} frame_timestamps_ns", cam.frame_timestamps_ns)
    found += check_rate(
        "steps", episode.timestamps_ns, m.control_rate_hz, tolerance=tolerance, max_gap_periods=max_gap
    )
    for cam in episode.cameras:
        found += check_rate(
            f"camera {cam.spec.name!r} frames",
            cam.frame_timestamps_ns,
            cam.spec.fps,
            tolerance=tolerance,
            max_gap_periods=max_gap,
        )
    if spec is None:
        found.append(
            Violation(
                QuarantineReason.UNKNOWN_ROBOT_TYPE,
                f"robot type {m.robot_type!r} is not in the robot registry {registry.source or ''} "
                f"(known: {registry.names}); add it there and release the episode",
            )
        )
    else:
        found += _registry_rules(episode, spec)
    return found


def check_episode(episode: Episode, registry: RobotRegistry) -> None:
    """Raise when the episode breaks the ingest contract.

    Raises:
        ProtocolError: with the first violation's reason; the message lists all of them.

    Example:
        >>> check_episode(episode, load_registry(None))  # returns None when the episode is fine
    """
    found = find_violations(episode, registry)
    if found:
        more = "; ".join(f"[{v.reason.value}] {v.detail}" for v in found[1:])
        text = f"episode {episode.episode_id}: {found[0].detail}" + (f"; also {more}" if more else "")
        raise ProtocolError(found[0].reason, text)
