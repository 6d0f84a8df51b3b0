"""Does a `SampleSpec` fit the selected episodes? Cameras every episode has, and an action
horizon and crop each episode can serve; checked once when a Dataset opens."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pi_loader._errors import HorizonTooLongError, UnknownCameraError
from pi_loader.samples._spec import SampleSpec


def choose_cameras(
    episode_cameras: Sequence[Sequence[str]], cameras: Sequence[str] | None
) -> tuple[str, ...]:
    """`cameras`, checked to be in every episode; None: the cameras all episodes share.

    Raises:
        UnknownCameraError: a camera not every episode has, or none shared.
    """
    first = episode_cameras[0]
    # the distinct lists when the caller keeps them (`CameraLists`): not a pass per episode
    lists = getattr(episode_cameras, "distinct", episode_cameras)
    common = [c for c in first if all(c in cams for cams in lists)]
    if cameras is None:
        if not common:
            raise UnknownCameraError(
                "the selected episodes share no camera; pass cameras=() for samples without images"
            )
        return tuple(common)
    unknown = [c for c in cameras if c not in common]
    if unknown:
        raise UnknownCameraError(
            f"unknown camera(s) {unknown}: the cameras available in every selected episode are {common}"
        )
    return tuple(cameras)


def check_spec_fits(
    spec: SampleSpec,
    episode_ids: Sequence[str],
    lengths: np.ndarray,
    video_sizes: np.ndarray,
) -> None:
    """Check the action horizon and crop against each episode's step count and video size.

    Raises:
        HorizonTooLongError: an episode shorter than the action horizon.
        ValueError: a crop that does not fit an episode's video.
    """
    shortest = int(np.argmin(lengths))
    if spec.action_horizon > lengths[shortest]:
        raise HorizonTooLongError(
            f"action_horizon={spec.action_horizon} is longer than episode {episode_ids[shortest]} "
            f"({int(lengths[shortest])} steps): its samples would be mostly padding. Use a shorter "
            f"horizon or select longer episodes (e.g. SQL `WHERE step_count >= {spec.action_horizon}`)"
        )
    if spec.crop is not None and spec.cameras:
        top, left, height, width = spec.crop
        sizes = np.asarray(video_sizes).reshape(-1, 2)
        misfits = np.flatnonzero((top + height > sizes[:, 0]) | (left + width > sizes[:, 1]))
        if len(misfits):
            e = int(misfits[0])
            h, w = int(sizes[e, 0]), int(sizes[e, 1])
            raise ValueError(
                f"crop={spec.crop} (top, left, height, width) does not fit episode "
                f"{episode_ids[e]}'s {h}x{w} (height x width) video"
            )
