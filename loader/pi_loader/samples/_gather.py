"""Gather: cut samples and batches out of the selected episodes' steps and decoded video.

Last step of reading a `Dataset`: given flat sample numbers (see `_sample_index`), it reads the
window of steps each episode the batch touches needs once (`_steps`, cached per process by row
group), takes proprio and
the action chunk out of them, writes every frame once into its place in the batch (cropped,
resized), and normalizes with the selection's pooled statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from pi_loader._errors import PiLoaderError
from pi_loader.reading._lake import EpisodeData, Stats
from pi_loader.reading._locators import EpisodeLocators
from pi_loader.reading._steps import EpisodeSteps, StepsReader
from pi_loader.reading._video import VideoFrames
from pi_loader.samples._sample_index import SampleIndex
from pi_loader.samples._spec import SampleSpec

IMAGE_KEY_PREFIX = "observation.images."
HISTORY_PAD_KEY = "observation.images_is_pad"
_STD_FLOOR = 1e-6  # a constant dimension (std 0) normalizes to 0 instead of dividing by zero
# Frames whose chunks a batch reads before decoding them, a run at a time: the reads' Python
# run back to back, and so do the H.264 decodes, instead of one read between two decodes, which
# made each run slower (in one process on the loader benchmark's lake, 224 px, 3 cameras: the
# worker path 1.08x the raw decode leg's CPU a sample with reads between decodes, 1.05x in runs
# of 8, 1.02x in runs of 32; benchmarks/loader/PROFILE.md, fifth pass). A run holds at most this
# many chunks beyond the chunk cache's own (most of them are in it anyway).
READ_AHEAD = 32
# (image key, shape) -> the uint8 array a batch's frames of that key are written into
ImageAllocator = Callable[[str, tuple[int, ...]], np.ndarray]


class SampleGather:
    """Builds batches of flat sample numbers, reading what they need on demand; thread-safe,
    and picklable (the readers drop their caches): it holds per-episode arrays only.

    Args:
        spec: the sample spec with `cameras` resolved.
        index: flat sample number -> (episode, step).
        episode_ids, attempt_ids, episode_cameras, video_sizes: per episode, in index order;
            the cameras each episode recorded, and its video's (height, width).
        locators: where each episode's steps and video rows are.
        stats: statistics of "observation.state" and "action" that normalization uses.
        steps: reads (and caches) an episode's per-step arrays.
        video: the frames of the selection's video.

    Example:
        >>> gather.batch(np.array([0, 5]), allocate=None)["action"].shape  # (2, action_horizon, A)
    """

    def __init__(
        self,
        *,
        spec: SampleSpec,
        index: SampleIndex,
        episode_ids: Sequence[str],
        attempt_ids: Sequence[str],
        episode_cameras: Sequence[tuple[str, ...]],
        video_sizes: np.ndarray,
        locators: EpisodeLocators,
        stats: Mapping[str, Stats],
        steps: StepsReader,
        video: VideoFrames,
    ) -> None:
        self._spec = spec
        self._cameras = spec.cameras if spec.cameras is not None else ()
        self._index = index
        self._episode_ids = episode_ids
        self._attempt_ids = attempt_ids
        self._episode_cameras = episode_cameras
        self._sizes = video_sizes
        self._locators = locators
        self._stats = stats
        self._steps = steps
        self._video = video

    @property
    def video(self) -> VideoFrames:
        return self._video

    @property
    def steps(self) -> StepsReader:
        return self._steps

    def batch(self, flat: np.ndarray, *, allocate: ImageAllocator | None) -> dict[str, np.ndarray]:
        """The batch of flat samples `flat` (int64, in range), as `Dataset.samples` returns it."""
        episodes, steps = self._index.locate_many(flat)
        spec = self._spec
        k, stride = (spec.frame_history, spec.frame_stride) if self._cameras else (0, 1)
        lengths = self._index.lengths[episodes]
        groups = _groups(episodes)
        # Each episode's steps once per batch: the row groups holding its samples' steps, action
        # chunks and frame histories, held here for the whole batch, so a steps cache smaller
        # than the batch's episodes never reads a row group twice.
        touched: dict[int, EpisodeSteps] = {}
        ahead = max(spec.action_horizon - 1, 0)
        for e, rows in groups:
            last = int(lengths[rows[0]]) - 1
            if len(rows) == 1:  # the common case under a global shuffle, in ints
                step = int(steps[rows[0]])
                touched[e] = self._steps.read(e, [(max(step - stride * k, 0), min(step + ahead, last))])
            else:
                at = steps[rows]
                spans = np.stack((np.maximum(at - stride * k, 0), np.minimum(at + ahead, last)), axis=1)
                touched[e] = self._steps.read(e, spans)
        batch: dict[str, np.ndarray] = {
            "episode_id": np.array([self._episode_ids[e] for e in episodes], dtype=np.str_),
            "step": steps.astype(np.int32),  # int32: what JAX keeps without x64
        }
        if self._cameras:
            wanted_steps = steps[:, None] - stride * np.arange(k, -1, -1)[None, :]  # [B, k+1]
            frames = np.empty((len(flat), k + 1, len(self._cameras)), np.int64)  # [B, k+1, C]
            for e, rows in groups:
                columns = self._locators.camera_column[e]
                held = touched[e]
                frames[rows] = held.frame_index[held.rows(np.maximum(wanted_steps[rows], 0))][:, :, columns]
            batch.update(self._images(episodes, frames, k > 0, allocate))
            if k:
                batch[HISTORY_PAD_KEY] = wanted_steps < 0
        horizon = np.arange(spec.action_horizon)
        first = touched[int(episodes[0])]
        state = np.empty((len(flat), first.proprio.shape[1]), np.float32)
        action = np.empty((len(flat), spec.action_horizon, first.action.shape[1]), np.float32)
        for e, rows in groups:
            held = _same_widths(touched[e], first, self._episode_ids[e])
            state[rows] = held.proprio[held.rows(steps[rows])]
            last = int(lengths[rows[0]]) - 1  # past the episode's end: its last action (padded)
            action[rows] = held.action[held.rows(np.minimum(steps[rows, None] + horizon[None, :], last))]
        batch["observation.state"] = self._normalized("observation.state", state)
        batch["action"] = self._normalized("action", action)
        batch["action_is_pad"] = steps[:, None] + horizon[None, :] >= lengths[:, None]
        return batch

    def _images(
        self, episodes: np.ndarray, frames: np.ndarray, history: bool, allocate: ImageAllocator | None
    ) -> dict[str, np.ndarray]:
        """Per camera, [B, H, W, 3] (or [B, k+1, H, W, 3] with frame history) frames.

        Frames are visited sorted by (episode, camera, frame): all the batch's frames of one
        chunk are taken in a row, so each chunk is read and decoded at most once per batch even
        with a chunk cache of one, a decoder only ever moves forward, and each episode's video
        file is visited once (its footer is not re-parsed per camera when the footer cache is
        smaller than the batch's files). The chunks are read READ_AHEAD frames at a time, then
        decoded (`_read_ahead`).
        """
        count, slots, cameras = frames.shape
        b_of, j_of, c_of = (a.reshape(-1) for a in np.indices(frames.shape))
        wanted = frames.reshape(-1)
        outs: list[np.ndarray | None] = [None] * cameras
        # Stored frames go straight from the decoder into the batch (no crop, no resize).
        direct = self._spec.crop is None and self._spec.resize is None
        order = np.lexsort((wanted, c_of, episodes[b_of]))
        e_of = episodes[b_of]
        # Python ints, once per batch: the loop below runs per frame (benchmarks/loader/PROFILE.md)
        visits = zip(
            e_of[order].tolist(), b_of[order].tolist(), j_of[order].tolist(), c_of[order].tolist(),
            wanted[order].tolist(), self._sizes[e_of[order]].tolist(), strict=True,
        )  # fmt: skip
        frame, read = self._video.frame, self._video.read_chunk
        for run, chunks in _read_ahead(list(visits), read):
            for (e, b, j, c, f, (height, width, *_)), chunk in zip(run, chunks, strict=True):
                out = outs[c]
                if direct and out is not None and out.shape[-3] == height and out.shape[-2] == width:
                    frame(e, c, f, out[(b, j) if history else b], chunk)
                    continue
                out = outs[c] = self._placed_image(e, b, j, c, f, chunk, count, slots, out, history, allocate)
        images: dict[str, np.ndarray] = {}
        for camera, out in zip(self._cameras, outs, strict=True):
            assert out is not None
            images[IMAGE_KEY_PREFIX + camera] = out
        return images

    def _placed_image(
        self,
        e: int,
        b: int,
        j: int,
        c: int,
        f: int,
        chunk: object,
        count: int,
        slots: int,
        out: np.ndarray | None,
        history: bool,
        allocate: ImageAllocator | None,
    ) -> np.ndarray:
        """Frame f of camera c of episode e written into the batch's row b (b, j with history),
        cropped and resized (a frame that cannot go straight from the decoder into the row); the
        batch's array of camera c allocated for it when `out` is None, its size refused when it
        does not fit."""
        camera = self._cameras[c]
        image = self._image(e, c, f, chunk)
        if out is None:
            shape = (count, *((slots,) if history else ()), *image.shape)
            key = IMAGE_KEY_PREFIX + camera
            out = np.empty(shape, np.uint8) if allocate is None else allocate(key, shape)
        if image.shape != out.shape[-3:]:
            raise PiLoaderError(
                f"camera {camera!r}: episode {self._episode_ids[e]} has {image.shape[1]}x"
                f"{image.shape[0]} frames, others in the batch {out.shape[-2]}x"
                f"{out.shape[-3]} (width x height); set SampleSpec(resize=(height, width)) "
                "to batch them"
            )
        out[(b, j) if history else b] = image
        return out

    def image_shapes(self) -> dict[str, tuple[int, ...]]:
        """Largest shape of one sample's image array per image key (see `Dataset.image_shapes`)."""
        spec = self._spec
        if spec.resize is not None:
            height, width = spec.resize
        elif spec.crop is not None:
            height, width = spec.crop[2], spec.crop[3]
        else:
            height, width = (int(self._sizes[:, i].max()) for i in (0, 1))
        history = (spec.frame_history + 1,) if spec.frame_history else ()
        return {IMAGE_KEY_PREFIX + c: (*history, height, width, 3) for c in self._cameras}

    def episode(self, e: int) -> EpisodeData:
        """The arrays of episode number `e` (see `Dataset.episode`), read through the steps cache."""
        steps = self._steps.episode(e)
        return EpisodeData(
            episode_id=self._episode_ids[e],
            attempt_id=self._attempt_ids[e],
            cameras=self._episode_cameras[e],
            proprio=steps.proprio.copy(),
            action=steps.action.copy(),
            camera_frame_index=steps.frame_index.copy(),
            video_width=int(self._sizes[e][1]),
            video_height=int(self._sizes[e][0]),
        )

    def _image(self, e: int, camera: int, frame_index: int, chunk: object = None) -> np.ndarray:
        rgb = self._video.frame(e, camera, frame_index, chunk=chunk)
        spec = self._spec
        if spec.crop is not None:
            top, left, h, w = spec.crop
            rgb = rgb[top : top + h, left : left + w]
        if spec.resize is not None and rgb.shape[:2] != spec.resize:
            rgb = _resize(rgb, spec.resize)
        return rgb

    def _normalized(self, key: str, values: np.ndarray) -> np.ndarray:
        mode = self._spec.normalize
        if mode is None:
            return values  # the batch's own fresh array
        stats = self._stats[key]
        if mode == "mean_std":
            out = (values - stats.mean) / np.maximum(stats.std, _STD_FLOOR)
        else:  # min_max onto [-1, 1]
            span = stats.max - stats.min
            out = np.where(span > 0, 2.0 * (values - stats.min) / np.where(span > 0, span, 1.0) - 1.0, 0.0)
        return out.astype(np.float32)


def _read_ahead(
    visits: list[tuple[Any, ...]], read: Callable[[int, int, int], object]
) -> Iterator[tuple[list[tuple[Any, ...]], list[object]]]:
    """The frame visits (e, b, j, c, f, size) in runs of READ_AHEAD, each with its frames'
    chunks read (`VideoFrames.read_chunk`) before any of them is decoded. Reads are made in the
    visits' order, so the chunk cache sees the same gets and puts as one read per decode."""
    for start in range(0, len(visits), READ_AHEAD):
        run = visits[start : start + READ_AHEAD]
        yield run, [read(e, c, f) for e, _, _, c, f, _ in run]


def _groups(episodes: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(episode, positions in the batch of its samples) for each episode of a batch."""
    order = np.argsort(episodes, kind="stable")
    uniq, starts = np.unique(episodes[order], return_index=True)
    bounds = [*starts.tolist(), len(order)]
    return [(int(e), order[bounds[i] : bounds[i + 1]]) for i, e in enumerate(uniq)]


def _same_widths(steps: EpisodeSteps, first: EpisodeSteps, episode_id: str) -> EpisodeSteps:
    if steps.proprio.shape[1] != first.proprio.shape[1] or steps.action.shape[1] != first.action.shape[1]:
        raise PiLoaderError(
            f"episode {episode_id} has proprio/action of {steps.proprio.shape[1]}/{steps.action.shape[1]} "
            f"dimensions, others in the batch {first.proprio.shape[1]}/{first.action.shape[1]}; select "
            "episodes of one robot type"
        )
    return steps


def _resize(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError as err:
        raise ImportError("SampleSpec.resize needs Pillow: pip install 'pi-lake[loader]'") from err
    height, width = size
    return np.asarray(Image.fromarray(rgb).resize((width, height), Image.Resampling.BILINEAR))


def collate(samples: Sequence[Mapping[str, object]]) -> dict[str, np.ndarray]:
    """Stack samples into a batch: arrays gain a leading batch axis, ids become a str array.

    Example:
        >>> batch = collate([ds.sample(0), ds.sample(1)])
        >>> batch["action"].shape  # (2, action_horizon, A)
    """
    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    out: dict[str, np.ndarray] = {}
    for key in samples[0]:
        values = [s[key] for s in samples]
        if key == "episode_id":
            out[key] = np.array(values, dtype=np.str_)
        elif key == "step":
            out[key] = np.array(values, dtype=np.int32)  # int32: what JAX keeps without x64
        else:
            out[key] = np.stack([np.asarray(v) for v in values])
    return out
