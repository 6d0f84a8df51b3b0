"""`SampleSpec`: what one training sample holds (cameras, frame history, action chunk, transforms).

Plain, typed configuration: a frozen dataclass validated on construction, so a bad option fails
when the spec is written, not in a worker process minutes later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Normalization = Literal["mean_std", "min_max"]
NORMALIZATIONS: tuple[str, ...] = ("mean_std", "min_max")


def _positive_pair(name: str, value: object) -> tuple[int, int]:
    if (
        not isinstance(value, tuple | list)
        or len(value) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value)
    ):
        raise ValueError(f"{name} must be (height, width) with ints >= 1, got {value!r}")
    return int(value[0]), int(value[1])


@dataclass(frozen=True, slots=True)
class SampleSpec:
    """What a sample contains.

    Args:
        cameras: cameras to return, in this order; None means every camera all selected
            episodes have (in the first episode's order); () means no images.
        frame_history: past frames per camera besides the current one (k). With k > 0 an image
            is [k+1, H, W, 3] (oldest first) and "observation.images_is_pad" [k+1] marks frames
            before the episode start (they repeat the first frame).
        frame_stride: steps between history frames.
        action_horizon: actions per sample (H), from the sample's step on; past the episode's
            end they repeat the last action and "action_is_pad" is True.
        normalize: None for raw values, "mean_std" for (x - mean) / std, or "min_max" for a
            map of [min, max] onto [-1, 1]; statistics are pooled from the per-episode
            statistics stored in the episodes table (no pass over the steps).
        crop: (top, left, height, width) cut from each frame before resizing, or None.
        resize: (height, width) of returned images (bilinear), or None for the stored size.
        annotations: annotation kinds delivered with each sample (pi_format.lake annotations:
            "instruction", "subtask", "quality_score", "tag"): "annotation.<kind>" holds the
            value of the narrowest span holding the sample's step ("" where none, with
            "annotation.<kind>_is_pad" True), as the selection's snapshot saw them.

    Raises:
        ValueError: an option out of range; TypeError: cameras given as a single str.

    Example:
        >>> SampleSpec(cameras=("cam_high",), frame_history=2, frame_stride=3, action_horizon=50,
        ...            normalize="mean_std", resize=(224, 224))
    """

    cameras: tuple[str, ...] | None = None
    frame_history: int = 0
    frame_stride: int = 1
    # 16 actions at 10-50 Hz control is the usual ACT/diffusion-policy chunk; pi0-style models use 50.
    action_horizon: int = 16
    normalize: Normalization | None = None
    crop: tuple[int, int, int, int] | None = None
    resize: tuple[int, int] | None = None
    annotations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from pi_format.lake.annotations import ANNOTATION_KINDS

        if isinstance(self.annotations, str):
            raise TypeError(
                f"annotations must be a sequence of kinds, got the single str {self.annotations!r}; wrap it"
            )
        kinds = tuple(dict.fromkeys(str(k) for k in self.annotations))
        unknown = [k for k in kinds if k not in ANNOTATION_KINDS]
        if unknown:
            raise ValueError(f"annotations must be among {list(ANNOTATION_KINDS)}, got {unknown}")
        object.__setattr__(self, "annotations", kinds)
        if self.cameras is not None:
            if isinstance(self.cameras, str):
                raise TypeError(
                    f"cameras must be a sequence of camera names, got the single str {self.cameras!r}; "
                    "wrap it in a tuple"
                )
            cams = tuple(dict.fromkeys(str(c) for c in self.cameras))
            object.__setattr__(self, "cameras", cams)
        for name, value, low in (
            ("frame_history", self.frame_history, 0),
            ("frame_stride", self.frame_stride, 1),
            ("action_horizon", self.action_horizon, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if self.normalize is not None and self.normalize not in NORMALIZATIONS:
            raise ValueError(f"normalize must be None or one of {NORMALIZATIONS}, got {self.normalize!r}")
        if self.resize is not None:
            object.__setattr__(self, "resize", _positive_pair("resize", self.resize))
        if self.crop is not None:
            crop = self.crop
            if (
                not isinstance(crop, tuple | list)
                or len(crop) != 4
                or any(isinstance(v, bool) or not isinstance(v, int) for v in crop)
                or crop[0] < 0
                or crop[1] < 0
                or crop[2] < 1
                or crop[3] < 1
            ):
                raise ValueError(
                    f"crop must be (top, left, height, width) with top, left >= 0 and height, width >= 1, "
                    f"got {crop!r}"
                )
            object.__setattr__(self, "crop", tuple(int(v) for v in crop))

    def with_cameras(self, cameras: Sequence[str]) -> SampleSpec:
        """A copy with `cameras` resolved (the dataset fills in None with the common cameras)."""
        return SampleSpec(
            cameras=tuple(cameras),
            frame_history=self.frame_history,
            frame_stride=self.frame_stride,
            action_horizon=self.action_horizon,
            normalize=self.normalize,
            crop=self.crop,
            resize=self.resize,
            annotations=self.annotations,
        )


def spec_from_arguments(
    spec: SampleSpec | None, cameras: Sequence[str] | None, action_horizon: int | None
) -> SampleSpec:
    """The spec a `Dataset` was given: `spec` itself, or one built from its `cameras` and
    `action_horizon` shortcuts (never both)."""
    if spec is not None:
        if cameras is not None or action_horizon is not None:
            raise ValueError("pass cameras/action_horizon inside spec=SampleSpec(...), not next to it")
        if not isinstance(spec, SampleSpec):
            raise TypeError(f"spec must be a pi_loader.SampleSpec, got {type(spec).__name__}")
        return spec
    if isinstance(cameras, str):
        raise TypeError("cameras must be a sequence of camera names, got a single str; wrap it in a list")
    kwargs: dict[str, Any] = {}
    if cameras is not None:
        kwargs["cameras"] = tuple(cameras)
    if action_horizon is not None:
        kwargs["action_horizon"] = action_horizon
    return SampleSpec(**kwargs)
