"""The seam between the framework-neutral training loop and a framework (torch or JAX).

`_loop` owns the order of things (open the shared snapshot, restore, step, time, checkpoint,
log); a `Backend` owns everything that touches tensors and processes of its framework. Both
backends build the same reference policy (`_torch.TorchPolicy`, `_jax.JaxPolicy`):

    per camera: uint8 image /255 -> conv 8x8/4 (16) -> ReLU -> conv 4x4/2 (32) -> ReLU -> mean
                over space -> dense 64 -> ReLU
    proprio:    (state - mean) / std -> dense 64 -> ReLU
    head:       concat -> dense 256 -> ReLU -> dense (horizon x action_dim) = normalized actions
    loss:       err = (pred - (action - mean) / std)^2 (L2) or |...| (L1), averaged over action
                dims, then sum(err * valid) / max(sum(valid), 1) with valid = not action_is_pad

(the DQN encoder: small enough for a CPU, convolutional enough that video decoding and the
step compete as they do on a real policy).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pi_loader.adapters import DeviceFeed

from pi_train._config import ProcessGroup, TrainConfig
from pi_train._normalize import Normalization

# Widths of the reference policy (see the module docstring).
CONV1, CONV2, CAMERA_FEATURES, STATE_FEATURES, HIDDEN = 16, 32, 64, 64, 256
# Checkpoints kept on disk: the newest, and one before it in case the newest is being written.
KEEP_CHECKPOINTS = 2


@dataclass(frozen=True, slots=True)
class PolicyShape:
    """What the reference policy is built for: image keys and shapes, state and action sizes.

    Example:
        >>> PolicyShape(image_keys=("observation.images.front",), image_shapes=((96, 96, 3),),
        ...             state_dim=14, action_dim=14, horizon=16)
    """

    image_keys: tuple[str, ...]
    image_shapes: tuple[tuple[int, ...], ...]
    state_dim: int
    action_dim: int
    horizon: int

    @property
    def input_keys(self) -> tuple[str, ...]:
        """The batch keys a step reads (the rest, e.g. episode ids, stay on the host)."""
        return (*self.image_keys, "observation.state", "action", "action_is_pad")


class Backend(Protocol):
    """One framework's half of a training run (see the module docstring).

    Collectives (`all_gather_json`, `reduce_max`, `save`) are called by every process at the
    same step; `step` returns the loss averaged over processes, as a Python float, after the
    device has finished the step (so the loop's clock sees the real compute time).
    """

    framework: str

    def start(self) -> None:
        """Join the process group (torch.distributed / jax.distributed) when there are several."""

    def build(self, shape: PolicyShape, norm: Normalization) -> None:
        """Initialise the policy and optimizer from the config's seed (the same on every rank)."""

    def device_feed(
        self, batches: Iterator[dict[str, np.ndarray]], state: Callable[[], dict[str, Any]]
    ) -> DeviceFeed:
        """The step's inputs on the device, each batch copied while the previous step runs
        (`pi_loader.adapters`' feeds: `FedBatch.copy_wait_s` is the copy compute did not hide)."""

    def step(self, inputs: Any) -> float:
        """One optimizer step; the global mean loss."""

    def predict(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        """Normalized action predictions [B, H, A] (float32) for a host batch, no gradient, on
        this process alone (no collective: evaluation runs on one rank)."""

    def save(self, directory: Path, step: int, extra: dict[str, Any]) -> None:
        """Checkpoint the model, the optimizer and `extra` (JSON) at `step`, atomically."""

    def latest(self, directory: Path) -> int | None:
        """The newest complete checkpoint's step in `directory`, or None."""

    def restore(self, directory: Path, step: int) -> dict[str, Any]:
        """Load the checkpoint at `step` into the model and optimizer; returns its `extra`."""

    def all_gather_json(self, payload: Any) -> list[Any]:
        """Every rank's `payload`, in rank order."""

    def reduce_max(self, values: np.ndarray) -> np.ndarray:
        """The element-wise maximum of a float vector over ranks."""

    def param_digest(self) -> str:
        """16 hex digits over the parameters (equal on every rank when gradients are averaged)."""

    def describe(self) -> dict[str, Any]:
        """The device and framework version, for the run's summary."""

    def stop(self) -> None:
        """Leave the process group."""


def make_backend(config: TrainConfig, group: ProcessGroup) -> Backend:
    """The backend of `config.framework`, its framework imported only now.

    Raises:
        ImportError: the framework is not installed (names the extra).

    Example:
        >>> backend = make_backend(TrainConfig(lake="lake", framework="torch"), ProcessGroup())
    """
    if config.framework == "torch":
        try:
            from pi_train._torch import TorchBackend
        except ImportError as err:
            raise ImportError(f"framework='torch' needs torch: pip install 'pi-lake[train]' ({err})") from err
        return TorchBackend(config, group)
    try:
        from pi_train._jax import JaxBackend
    except ImportError as err:
        raise ImportError(
            "framework='jax' needs jax, flax, optax and orbax-checkpoint: "
            f"pip install 'pi-lake[train]' ({err})"
        ) from err
    return JaxBackend(config, group)


def digest_arrays(arrays: Sequence[np.ndarray]) -> str:
    """16 hex digits of blake2b over the arrays' dtypes, shapes and bytes, in order."""
    h = hashlib.blake2b(digest_size=8)
    for array in arrays:
        a = np.ascontiguousarray(array)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()
