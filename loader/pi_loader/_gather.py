"""Gather: cut samples and batches out of a selection's per-step arrays and its decoded video.

Last step of reading a `Dataset`: given flat sample numbers (see `_sample_index`), it takes the
proprio and the action chunk with one gather each, writes every frame once into its place in the
batch (cropped, resized), and normalizes with the selection's pooled statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from pi_loader._errors import PiLoaderError
from pi_loader._lake import EpisodeData, Stats
from pi_loader._sample_index import SampleIndex
from pi_loader._spec import SampleSpec
from pi_loader._video import VideoFrames

IMAGE_KEY_PREFIX = "observation.images."
HISTORY_PAD_KEY = "observation.images_is_pad"
_STD_FLOOR = 1e-6  # a constant dimension (std 0) normalizes to 0 instead of dividing by zero
# (image key, shape) -> the uint8 array a batch's frames of that key are written into
ImageAllocator = Callable[[str, tuple[int, ...]], np.ndarray]


def camera_frame_index(
    frame_index: Sequence[np.ndarray],
    episode_cameras: Sequence[Sequence[str]],
    cameras: Sequence[str],
) -> np.ndarray:
    """Frame index of every step for each of `cameras`, in that order: int32 [steps, cameras].

    `frame_index[e]` is episode e's [T, cameras of that episode] array, in its own camera order.
    """
    per_episode = []
    for e, fi in enumerate(frame_index):
        columns = [episode_cameras[e].index(c) for c in cameras]
        per_episode.append(fi[:, columns] if columns else np.zeros((fi.shape[0], 0), np.int32))
    return np.ascontiguousarray(np.concatenate(per_episode).astype(np.int32, copy=False))


class SampleGather:
    """Builds batches of flat sample numbers out of the selection's arrays; thread-safe, and
    picklable (VideoFrames drops its caches).

    Args:
        spec: the sample spec with `cameras` resolved.
        index: flat sample number -> (episode, step).
        episode_ids, attempt_ids, episode_cameras, video_sizes: per episode, in index order;
            the cameras each episode recorded, and its video's (height, width).
        proprio, action: per-step float32 arrays, rows in flat sample order.
        frame_index: int32 [steps, cameras of the spec] (see `camera_frame_index`).
        stats: statistics of "observation.state" and "action" that normalization uses.
        video: the frames of the selection's video.

    Example:
        >>> gather.batch(np.array([0, 5]), allocate=None)["action"].shape  # (2, action_horizon, A)
    """

    def __init__(
        self,
        *,
        spec: SampleSpec,
        index: SampleIndex,
        episode_ids: tuple[str, ...],
        attempt_ids: tuple[str, ...],
        episode_cameras: tuple[tuple[str, ...], ...],
        video_sizes: tuple[tuple[int, int], ...],
        proprio: np.ndarray,
        action: np.ndarray,
        frame_index: np.ndarray,
        stats: Mapping[str, Stats],
        video: VideoFrames,
    ) -> None:
        self._spec = spec
        self._cameras = spec.cameras if spec.cameras is not None else ()
        self._index = index
        self._episode_ids = episode_ids
        self._attempt_ids = attempt_ids
        self._episode_cameras = episode_cameras
        self._sizes = video_sizes
        self._proprio = proprio
        self._action = action
        self._frame_index = frame_index
        self._stats = stats
        self._video = video

    @property
    def video(self) -> VideoFrames:
        return self._video

    def batch(self, flat: np.ndarray, *, allocate: ImageAllocator | None) -> dict[str, np.ndarray]:
        """The batch of flat samples `flat` (int64, in range), as `Dataset.samples` returns it."""
        episodes, steps = self._index.locate_many(flat)
        base = self._index.offsets[episodes]
        spec = self._spec
        batch: dict[str, np.ndarray] = {
            "episode_id": np.array([self._episode_ids[e] for e in episodes], dtype=np.str_),
            "step": steps.astype(np.int32),  # int32: what JAX keeps without x64
        }
        if self._cameras:
            k, stride = spec.frame_history, spec.frame_stride
            wanted_steps = steps[:, None] - stride * np.arange(k, -1, -1)[None, :]  # [B, k+1]
            frames = self._frame_index[base[:, None] + np.maximum(wanted_steps, 0)]  # [B, k+1, C]
            batch.update(self._images(episodes, frames, k > 0, allocate))
            if k:
                batch[HISTORY_PAD_KEY] = wanted_steps < 0
        batch["observation.state"] = self._normalized("observation.state", self._proprio[flat])
        wanted = steps[:, None] + np.arange(spec.action_horizon)[None, :]  # [B, H]
        lengths = self._index.lengths[episodes][:, None]
        batch["action"] = self._normalized(
            "action", self._action[base[:, None] + np.minimum(wanted, lengths - 1)]
        )
        batch["action_is_pad"] = wanted >= lengths
        return batch

    def _images(
        self, episodes: np.ndarray, frames: np.ndarray, history: bool, allocate: ImageAllocator | None
    ) -> dict[str, np.ndarray]:
        """Per camera, [B, H, W, 3] (or [B, k+1, H, W, 3] with history) frames.

        Samples are visited grouped by episode with every camera at once, so an episode's video
        rows are read at most once per batch even when the episode cache is smaller than the
        batch's episodes (a shuffled batch over a large dataset touches ~B episodes).
        """
        outs: list[np.ndarray | None] = [None] * len(self._cameras)
        for b in np.argsort(episodes, kind="stable"):
            e = int(episodes[b])
            for c, camera in enumerate(self._cameras):
                for j, frame_index in enumerate(frames[b, :, c]):
                    image = self._image(e, camera, int(frame_index))
                    out = outs[c]
                    if out is None:
                        shape = (len(episodes), *((frames.shape[1],) if history else ()), *image.shape)
                        key = IMAGE_KEY_PREFIX + camera
                        out = outs[c] = (
                            np.empty(shape, np.uint8) if allocate is None else allocate(key, shape)
                        )
                    if image.shape != out.shape[-3:]:
                        raise PiLoaderError(
                            f"camera {camera!r}: episode {self._episode_ids[e]} has {image.shape[1]}x"
                            f"{image.shape[0]} frames, others in the batch {out.shape[-2]}x"
                            f"{out.shape[-3]} (width x height); set SampleSpec(resize=(height, width)) "
                            "to batch them"
                        )
                    out[(b, j) if history else b] = image
        images: dict[str, np.ndarray] = {}
        for camera, out in zip(self._cameras, outs, strict=True):
            assert out is not None
            images[IMAGE_KEY_PREFIX + camera] = out
        return images

    def image_shapes(self) -> dict[str, tuple[int, ...]]:
        """Largest shape of one sample's image array per image key (see `Dataset.image_shapes`)."""
        spec = self._spec
        if spec.resize is not None:
            height, width = spec.resize
        elif spec.crop is not None:
            height, width = spec.crop[2], spec.crop[3]
        else:
            height, width = (max(s[i] for s in self._sizes) for i in (0, 1))
        history = (spec.frame_history + 1,) if spec.frame_history else ()
        return {IMAGE_KEY_PREFIX + c: (*history, height, width, 3) for c in self._cameras}

    def episode(self, e: int) -> EpisodeData:
        """The arrays of episode number `e` (see `Dataset.episode`)."""
        rows = self._index.episode_rows(e)
        return EpisodeData(
            episode_id=self._episode_ids[e],
            attempt_id=self._attempt_ids[e],
            cameras=self._episode_cameras[e],
            proprio=self._proprio[rows],
            action=self._action[rows],
            camera_frame_index=self._frame_index[rows],
            video_width=int(self._sizes[e][1]),
            video_height=int(self._sizes[e][0]),
        )

    def _image(self, e: int, camera: str, frame_index: int) -> np.ndarray:
        rgb = self._video.frame(self._episode_ids[e], self._attempt_ids[e], camera, frame_index)
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
            return values.copy()
        stats = self._stats[key]
        if mode == "mean_std":
            out = (values - stats.mean) / np.maximum(stats.std, _STD_FLOOR)
        else:  # min_max onto [-1, 1]
            span = stats.max - stats.min
            out = np.where(span > 0, 2.0 * (values - stats.min) / np.where(span > 0, span, 1.0) - 1.0, 0.0)
        return out.astype(np.float32)


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
