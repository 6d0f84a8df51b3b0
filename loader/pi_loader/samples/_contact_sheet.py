"""A PNG grid of samples (rows) by cameras (columns), to eyeball what a loader yields."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from pi_loader.samples._gather import IMAGE_KEY_PREFIX

_LABEL_H = 14  # pixels of the label strip above each row (Pillow's default bitmap font)


def _as_image(value: object, where: str) -> np.ndarray:
    # Accept numpy arrays and tensors from a DataLoader batch (anything with __array__).
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if array.ndim != 3 or array.shape[2] != 3:
        raise ValueError(f"{where} must be an RGB image [H, W, 3], got shape {array.shape}")
    if array.dtype != np.uint8:
        array = np.clip(array, 0, 255).astype(np.uint8)
    return array


def contact_sheet(
    samples: Sequence[Mapping[str, object]], path: Path, *, cameras: Sequence[str] | None = None
) -> Path:
    """Write a PNG grid: one row per sample, one column per camera, each row labelled
    "episode_id / step". Tiles take the size of the first sample's first image.

    Args:
        samples: dicts as `Dataset.__getitem__` returns them.
        path: where the PNG goes (parent folders are created).
        cameras: cameras to show (default: every "observation.images.*" key of the first sample).

    Returns:
        `path`.

    Raises:
        ValueError: no samples, no cameras, or a sample lacks a camera's image.
        ImportError: Pillow is missing (pip install 'pi-lake[loader]').

    Example:
        >>> contact_sheet([ds[i] for i in range(8)], Path("out/sheet.png"))
    """
    try:
        from PIL import Image, ImageDraw
    except ImportError as err:
        raise ImportError("contact_sheet needs Pillow: pip install 'pi-lake[loader]'") from err
    if not samples:
        raise ValueError("samples must not be empty")
    if cameras is None:
        cameras = [k[len(IMAGE_KEY_PREFIX) :] for k in samples[0] if k.startswith(IMAGE_KEY_PREFIX)]
    if not cameras:
        raise ValueError(
            "no cameras to show: samples have no 'observation.images.*' keys and none were given"
        )
    for r, sample in enumerate(samples):
        for camera in cameras:
            if IMAGE_KEY_PREFIX + camera not in sample:
                raise ValueError(
                    f"sample {r} has no {IMAGE_KEY_PREFIX + camera!r}; its keys are {sorted(sample)}"
                )
    first = _as_image(samples[0].get(IMAGE_KEY_PREFIX + cameras[0]), "the first image")
    tile_h, tile_w = first.shape[:2]
    width, row_h = tile_w * len(cameras), tile_h + _LABEL_H
    sheet = Image.new("RGB", (max(width, 120), row_h * len(samples)), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for r, sample in enumerate(samples):
        top = r * row_h
        label = f"{sample.get('episode_id', '?')} / {_scalar(sample.get('step', '?'))}"
        draw.text((2, top + 1), label, fill=(0, 0, 0))
        for c, camera in enumerate(cameras):
            key = IMAGE_KEY_PREFIX + camera
            tile = Image.fromarray(_as_image(sample[key], f"sample {r} {key!r}"))
            if tile.size != (tile_w, tile_h):
                tile = tile.resize((tile_w, tile_h))
            sheet.paste(tile, (c * tile_w, top + _LABEL_H))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(path, format="PNG")
    return path


def _scalar(value: object) -> object:
    item = getattr(value, "item", None)
    return item() if callable(item) else value
