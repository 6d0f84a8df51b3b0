"""`pilake import hdf5`: robomimic and ALOHA (ACT) HDF5 files, or any layout a mapping file
describes, read into fleet episodes (`ImportedEpisode`) for the import driver.

Layouts recognised without a mapping:

* **robomimic**: `data/demo_N/obs/<key>` and `data/demo_N/actions`, one episode per `demo_N`
  (in N order). Observations of shape [T, D] (numbers) are the proprio, concatenated in key
  order; uint8 [T, H, W, 3] ones are cameras (`agentview_image` -> camera `agentview`). The rate
  is not stored: 20 Hz (robosuite's control frequency) unless `fps` says otherwise.
* **ALOHA / ACT**: `/observations/qpos` [T, D], `/observations/images/<cam>` uint8 [T, H, W, 3],
  `/action` [T, A], one episode per file, 50 Hz (ALOHA's control rate); recordings made with
  aloha's COMPRESS option (JPEG rows padded to the longest, `compress_len`) are decoded.

A **mapping file** (TOML) describes any other layout:

    episodes = "data/*"               # groups that are one episode each; "" = the whole file
    proprio = ["obs/joint_pos", "obs/gripper_pos"]   # datasets under an episode, concatenated
    action = "actions"
    fps = 15.0
    robot_type = "franka"
    task = "open the drawer"
    [cameras]
    front = "obs/front_rgb"           # camera name = dataset path

Episode ids are `<file stem>-<sha256 of the file, 10 hex>-<group>`: the same file imports to
the same ids wherever it lies, so a rerun imports nothing twice.

Nothing is dropped silently: in a recognised layout, a dataset of an episode that the layout
neither imports nor names as not imported (robomimic: `rewards`, `dones`, `states` (the
simulator's state), `next_obs/*` (the next step's observations); ALOHA: `observations/qvel`,
`observations/effort`, `compress_len`, `base_action`) is refused unless `--drop-feature PATH`
names it. A mapping file names what it imports; the rest of the file is the user's choice.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pi_jobs.importing._episodes import (
    DatasetImportError,
    ImportedEpisode,
    ImportOptions,
    SpanText,
    episode_id,
    file_digest,
    make_episode,
    safe_name,
)

_ROBOMIMIC_FPS = 20.0  # robosuite's default control frequency; robomimic files do not store it
_ALOHA_FPS = 50.0  # ALOHA's control loop (ACT's DT = 0.02 s)
# datasets a recognised layout knowingly leaves out (documented above): not columns of the lake
_NOT_IMPORTED = {
    "robomimic": ("rewards", "dones", "states", "next_obs/*"),
    "aloha": ("observations/qvel", "observations/effort", "compress_len", "base_action"),
}
_MAPPING_KEYS = {"episodes", "proprio", "action", "cameras", "fps", "robot_type", "task", "layout"}


@dataclass(frozen=True, slots=True)
class Hdf5Mapping:
    """Where an HDF5 file keeps its episodes and their arrays.

    Args:
        episodes: a glob of the groups that are one episode each ("data/*"); "" = the whole file.
        proprio: dataset paths under an episode, concatenated along the last axis.
        action: the action dataset's path under an episode.
        cameras: camera name -> uint8 [T, H, W, 3] dataset path under an episode.
        fps: the control rate (steps per second); frames come one per step.
        robot_type: the robot registry type the episodes are checked against.
        task: the episodes' task text (also imported as their instruction when given).
        layout: a name for messages ("robomimic", "aloha", "mapping").

    Example:
        >>> Hdf5Mapping(episodes="data/*", proprio=("obs/qpos",), action="actions", fps=20.0,
        ...             robot_type="franka")
    """

    episodes: str
    proprio: tuple[str, ...]
    action: str
    fps: float
    robot_type: str
    cameras: Mapping[str, str] = field(default_factory=dict)
    task: str = ""
    layout: str = "mapping"

    def __post_init__(self) -> None:
        if not self.proprio:
            raise ValueError('a mapping needs at least one proprio dataset (proprio = ["obs/qpos"])')
        if not self.action:
            raise ValueError('a mapping needs the action dataset (action = "actions")')
        if not (self.fps > 0 and math.isfinite(self.fps)):
            raise ValueError(f"fps must be > 0, got {self.fps}")

    @classmethod
    def from_toml(cls, path: Path) -> Hdf5Mapping:
        """A mapping from a TOML file (see the module docstring); ValueError naming what is wrong."""
        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as err:
            raise ValueError(f"mapping file {path} cannot be read: {err}") from err
        unknown = sorted(set(data) - _MAPPING_KEYS)
        if unknown:
            raise ValueError(f"mapping file {path}: unknown keys {unknown}; keys are {sorted(_MAPPING_KEYS)}")
        proprio = data.get("proprio", ())
        if isinstance(proprio, str):
            proprio = (proprio,)
        for key in ("fps", "robot_type", "action"):
            if key not in data:
                raise ValueError(f"mapping file {path} needs {key!r}")
        return cls(
            episodes=str(data.get("episodes", "")),
            proprio=tuple(str(p) for p in proprio),
            action=str(data["action"]),
            fps=float(data["fps"]),
            robot_type=str(data["robot_type"]),
            cameras={str(k): str(v) for k, v in dict(data.get("cameras", {})).items()},
            task=str(data.get("task", "")),
            layout=str(data.get("layout", "mapping")),
        )


def detect_layout(h5: Any, *, fps: float | None, robot_type: str | None) -> Hdf5Mapping:
    """The mapping of a robomimic or ALOHA file (`h5` an open h5py.File).

    Raises:
        DatasetImportError: neither layout; the message says to write a mapping file.
    """
    import h5py

    if "data" in h5 and isinstance(h5["data"], h5py.Group):
        demos = [k for k in h5["data"] if isinstance(h5["data"][k], h5py.Group)]
        if demos and all("actions" in h5["data"][d] for d in demos):
            first = h5["data"][sorted(demos, key=_natural)[0]]
            obs = first.get("obs", {})
            proprio, cameras = [], {}
            for key in sorted(obs):
                ds = obs[key]
                if ds.dtype == np.uint8 and ds.ndim == 4 and ds.shape[-1] == 3:
                    cameras[re.sub(r"_image$", "", key)] = f"obs/{key}"
                elif ds.ndim in (1, 2) and np.issubdtype(ds.dtype, np.number):
                    proprio.append(f"obs/{key}")
            if not proprio:
                raise DatasetImportError(
                    f"{h5.filename}: robomimic layout without low-dimensional observations; "
                    "write a mapping file (--mapping) that names the proprio datasets"
                )
            task = _robomimic_task(h5["data"])
            return Hdf5Mapping(
                episodes="data/*",
                proprio=tuple(proprio),
                action="actions",
                cameras=cameras,
                fps=fps or _ROBOMIMIC_FPS,
                robot_type=robot_type or "franka",
                task=task,
                layout="robomimic",
            )
    if "observations" in h5 and "action" in h5 and "qpos" in h5["observations"]:
        images = h5["observations"].get("images", {})
        cameras = {name: f"observations/images/{name}" for name in sorted(images)}
        return Hdf5Mapping(
            episodes="",
            proprio=("observations/qpos",),
            action="action",
            cameras=cameras,
            fps=fps or _ALOHA_FPS,
            robot_type=robot_type or "aloha",
            layout="aloha",
        )
    raise DatasetImportError(
        f"{h5.filename}: neither the robomimic layout (data/demo_N/{{obs/*, actions}}) nor the ALOHA "
        f"layout (/observations/qpos, /observations/images/<cam>, /action); top-level keys {sorted(h5)}. "
        "Describe it in a mapping file and pass --mapping FILE.toml"
    )


def _robomimic_task(data: Any) -> str:
    raw = data.attrs.get("env_args")
    if raw is None:
        return ""
    try:
        return str(json.loads(raw if isinstance(raw, str) else raw.decode()).get("env_name", ""))
    except (ValueError, AttributeError):
        return ""


def _natural(name: str) -> tuple[str, int]:
    match = re.search(r"(\d+)$", name)
    return (name[: match.start()] if match else name, int(match.group(1)) if match else -1)


def read_hdf5(
    path: Path,
    *,
    mapping: Hdf5Mapping | None = None,
    fps: float | None = None,
    robot_type: str | None = None,
    task: str | None = None,
    robot_id: str | None = None,
    options: ImportOptions | None = None,
) -> Iterator[ImportedEpisode]:
    """The episodes of one HDF5 file, in file order (see the module docstring), read one at a
    time. `fps`, `robot_type` and `task` override the layout's.

    Each dataset's declared size is checked against `options.max_array_bytes` before it is read,
    and every array of an episode must have one row per step (and robomimic's `num_samples`,
    when present, must agree).

    Raises:
        DatasetImportError: the file is not HDF5 or is damaged, its layout is unknown, an episode
            lacks a dataset the mapping names, its arrays differ in length, or a dataset is over
            the limit (the message names the file, the group and the key).

    Example:
        >>> [e.episode.episode_id for e in read_hdf5(Path("lift.hdf5"))]
        ['lift-3f2a9c0b1d-demo_0', 'lift-3f2a9c0b1d-demo_1']
    """
    import h5py

    path = Path(path)
    options = options or ImportOptions()
    try:
        h5 = h5py.File(path, "r")
    except OSError as err:
        raise DatasetImportError(f"{path} cannot be opened as HDF5: {err}") from err
    with h5:
        yield from _read_open(h5, path, mapping, fps, robot_type, task, robot_id, options)


def _read_open(
    h5: Any,
    path: Path,
    mapping: Hdf5Mapping | None,
    fps: float | None,
    robot_type: str | None,
    task: str | None,
    robot_id: str | None,
    options: ImportOptions,
) -> Iterator[ImportedEpisode]:
    try:
        layout = mapping or detect_layout(h5, fps=fps, robot_type=robot_type)
        groups = _episode_groups(h5, layout.episodes)
    except (OSError, KeyError, ValueError, TypeError) as err:
        raise DatasetImportError(
            f"{path} cannot be read ({type(err).__name__}: {err}): it is damaged"
        ) from err
    if mapping is not None:
        layout = replace(
            mapping,
            fps=fps or mapping.fps,
            robot_type=robot_type or mapping.robot_type,
        )
    text = task if task is not None else layout.task
    digest = file_digest(path)
    for name in groups:
        where = f"{path}#{name or '/'}"
        try:
            group = h5[name] if name else h5
            if mapping is None:
                _check_unused(group, layout, where, options)
            proprio, action, frames = _episode_arrays(group, layout, where, options)
        except (OSError, KeyError, ValueError, TypeError) as err:  # h5py's errors of a damaged file
            raise DatasetImportError(
                f"{where} cannot be read ({type(err).__name__}: {err}): the file is damaged; restore it"
            ) from err
        item = name.rsplit("/", 1)[-1] if name else "episode"
        episode = make_episode(
            episode_id=episode_id(path.stem, digest, item),
            robot_id=robot_id or f"{layout.layout}-{safe_name(path.stem)}",
            robot_type=layout.robot_type,
            task=text,
            fps=layout.fps,
            proprio=proprio,
            action=action,
            frames=frames,
            tags=(f"import:{layout.layout}",),
            source=where,
            options=options,
        )
        notes = (SpanText("instruction", text, 0, episode.step_count),) if text else ()
        yield ImportedEpisode(episode, source=f"{layout.layout}:{where}", annotations=notes)


def _check_unused(group: Any, layout: Hdf5Mapping, where: str, options: ImportOptions) -> None:
    """Refuse datasets of an episode that the layout would drop without saying so."""
    import h5py

    paths: list[str] = []
    group.visititems(lambda key, obj: paths.append(key) if isinstance(obj, h5py.Dataset) else None)
    used = {*layout.proprio, layout.action, *layout.cameras.values()}
    known = (*_NOT_IMPORTED.get(layout.layout, ()), *options.drop_features)
    unused = sorted(p for p in paths if p not in used and not any(fnmatch.fnmatch(p, k) for k in known))
    if unused:
        raise DatasetImportError(
            f"{where}: datasets {unused[:10]} have no column in the lake and the {layout.layout} layout "
            "does not import them; pass --drop-feature PATH for each to import without them, or "
            "write a mapping file (--mapping) that says what to import"
        )


def _episode_arrays(
    group: Any, layout: Hdf5Mapping, where: str, options: ImportOptions
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(proprio [T, D], action, camera frames) of one episode, every array checked to have the
    same T (and robomimic's `num_samples` attribute, when present)."""
    parts = {key: _array(group, key, where, options) for key in layout.proprio}
    action = _array(group, layout.action, where, options)
    frames = {cam: _frames(group, key, where, options) for cam, key in layout.cameras.items()}
    lengths = {key: len(a) for key, a in parts.items()}
    lengths[layout.action] = len(action)
    lengths.update({layout.cameras[cam]: len(f) for cam, f in frames.items()})
    declared = group.attrs.get("num_samples") if hasattr(group, "attrs") else None
    if declared is not None:
        lengths["num_samples (attribute)"] = int(declared)
    if len(set(lengths.values())) > 1:
        raise DatasetImportError(
            f"{where}: arrays of different lengths {lengths}; every array of an episode must have one "
            "row per step: the file is damaged or the episode was cut while recording"
        )
    proprio = np.concatenate([a.reshape(len(a), -1) for a in parts.values()], axis=1)
    return proprio, action, frames


def _episode_groups(h5: Any, pattern: str) -> list[str]:
    if not pattern:
        return [""]
    parent, _, leaf = pattern.rpartition("/")
    base = h5[parent] if parent else h5
    names = sorted((k for k in base if fnmatch.fnmatch(k, leaf or "*")), key=_natural)
    if not names:
        raise DatasetImportError(f"{h5.filename}: no group matches episodes = {pattern!r}")
    return [f"{parent}/{k}" if parent else k for k in names]


def _frames(group: Any, key: str, where: str, options: ImportOptions) -> np.ndarray:
    """uint8 [T, H, W, 3] frames of `key`; ALOHA's compressed recordings (`compress` set on the
    file: each row a JPEG padded to the longest, `compress_len` [cameras, T] the true lengths)
    are decoded here."""
    frames = _array(group, key, where, options)
    if frames.ndim != 2 or frames.dtype != np.uint8:
        return frames
    import io

    from PIL import Image

    lengths = None
    if "compress_len" in group.file and key.startswith("observations/images/"):
        cameras = list(group.file["observations/images"])
        lengths = group.file["compress_len"][()][cameras.index(key.rsplit("/", 1)[-1])]
    decoded = []
    for t, row in enumerate(frames):
        size = int(lengths[t]) if lengths is not None else len(row)
        try:
            decoded.append(np.asarray(Image.open(io.BytesIO(row[:size].tobytes())).convert("RGB")))
        except (OSError, ValueError, Image.DecompressionBombError) as err:
            raise DatasetImportError(
                f"{where}: {key} row {t} is neither a frame nor a JPEG/PNG: {err}"
            ) from err
    try:
        return np.stack(decoded)
    except ValueError as err:
        raise DatasetImportError(f"{where}: {key}'s frames differ in size: {err}") from err


def _array(group: Any, key: str, where: str, options: ImportOptions) -> np.ndarray:
    """A dataset's values, its declared size checked before anything is read."""
    import h5py

    if key not in group or not isinstance(group[key], h5py.Dataset):
        raise DatasetImportError(f"{where}: no dataset {key!r}; it has {sorted(group)}")
    dataset = group[key]
    options.check_bytes(
        f"{where}: dataset {key!r}", int(dataset.size) * dataset.dtype.itemsize, dataset.shape
    )
    values = np.asarray(dataset[()])
    if values.ndim == 0:
        raise DatasetImportError(f"{where}: dataset {key!r} is a scalar, not one row per step")
    return values
