"""The torch backend: the reference policy as an `nn.Module`, Adam, DDP over gloo (or NCCL on
CUDA), and checkpoints written with `torch.save` through an atomic rename.

Imported only when a run asks for torch (`make_backend`). On the CPU every operation here is
deterministic for a fixed thread count, which is what makes a resumed run's losses equal a
run that never stopped, bit for bit.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from pi_loader.adapters import DeviceFeed, TorchFeed
from torch import nn

from pi_train._backend import (
    CAMERA_FEATURES,
    CONV1,
    CONV2,
    HIDDEN,
    KEEP_CHECKPOINTS,
    STATE_FEATURES,
    PolicyShape,
    digest_arrays,
)
from pi_train._config import ProcessGroup, TrainConfig, compute_threads
from pi_train._errors import CheckpointError
from pi_train._files import atomic_write
from pi_train._normalize import Normalization
from pi_train._rendezvous import host_record, torch_store

CHECKPOINT_FORMAT = "pi_train.torch_checkpoint/1"
_NAME = re.compile(r"^step_(\d{9})\.pt$")


class CameraEncoder(nn.Module):
    """uint8 NHWC frames -> a feature vector (the reference encoder, see `_backend`)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, CONV1, kernel_size=8, stride=4)
        self.conv2 = nn.Conv2d(CONV1, CONV2, kernel_size=4, stride=2)
        self.out = nn.Linear(CONV2, CAMERA_FEATURES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float() / 255.0
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return torch.relu(self.out(x.mean(dim=(2, 3))))


class TorchPolicy(nn.Module):
    """The reference policy: one encoder per camera plus a proprio MLP -> the action chunk.

    Normalization statistics are buffers (saved with the weights, moved with the module).

    Example:
        >>> policy = TorchPolicy(shape, norm)
        >>> pred = policy([batch["observation.images.front"]], batch["observation.state"])  # [B, H, A]
    """

    state_mean: torch.Tensor
    state_std: torch.Tensor
    action_mean: torch.Tensor
    action_std: torch.Tensor

    def __init__(self, shape: PolicyShape, norm: Normalization) -> None:
        super().__init__()
        self.horizon, self.action_dim = shape.horizon, shape.action_dim
        # Index keys: camera names may hold dots, which nn.ModuleDict refuses.
        self.encoders = nn.ModuleList([CameraEncoder() for _ in shape.image_keys])
        self.state = nn.Linear(shape.state_dim, STATE_FEATURES)
        features = CAMERA_FEATURES * len(shape.image_keys) + STATE_FEATURES
        self.hidden = nn.Linear(features, HIDDEN)
        self.head = nn.Linear(HIDDEN, shape.horizon * shape.action_dim)
        for name, value in norm.to_json().items():
            self.register_buffer(name, torch.tensor(value, dtype=torch.float32))

    def forward(self, images: list[torch.Tensor], state: torch.Tensor) -> torch.Tensor:
        s = (state - self.state_mean) / self.state_std
        parts = [encoder(x) for encoder, x in zip(self.encoders, images, strict=True)]
        parts.append(torch.relu(self.state(s)))
        h = torch.relu(self.hidden(torch.cat(parts, dim=1)))
        return self.head(h).view(-1, self.horizon, self.action_dim)

    def loss(
        self, pred: torch.Tensor, action: torch.Tensor, action_is_pad: torch.Tensor, kind: str
    ) -> torch.Tensor:
        """The masked L2/L1 loss on normalized actions (see `_backend`)."""
        target = (action - self.action_mean) / self.action_std
        diff = pred - target
        err = (diff * diff if kind == "l2" else diff.abs()).mean(dim=2)
        valid = (~action_is_pad).float()
        return (err * valid).sum() / valid.sum().clamp(min=1.0)


class TorchBackend:
    """`Backend` for torch (see `pi_train._backend.Backend` for the contract of each method).

    Example:
        >>> backend = TorchBackend(TrainConfig(lake="lake"), ProcessGroup())
    """

    framework = "torch"

    def __init__(self, config: TrainConfig, group: ProcessGroup) -> None:
        self._config, self._group = config, group
        cuda = torch.cuda.is_available() and config.device in ("auto", "cuda")
        if config.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' but this torch sees no CUDA device; use device='auto' or 'cpu'")
        self._device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        self._policy: TorchPolicy | None = None
        self._model: nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._image_keys: tuple[str, ...] = ()

    # -- processes ------------------------------------------------------------------------

    def start(self) -> None:
        g = self._group
        # Fixed per run (not per machine load): the same count on resume keeps CPU results bit-exact.
        torch.set_num_threads(compute_threads(self._config, g.local_world_size))
        if g.distributed and not dist.is_initialized():
            dist.init_process_group(
                "nccl" if self._device.type == "cuda" else "gloo",
                # joined and checked within g.rendezvous_timeout_s (pi_train._hosts), not a hang
                store=torch_store(g, host_record(self._config, g)),
                rank=g.rank,
                world_size=g.world_size,
                timeout=timedelta(minutes=10),
            )

    def stop(self) -> None:
        if self._group.distributed and dist.is_initialized():
            dist.destroy_process_group()

    def all_gather_json(self, payload: Any) -> list[Any]:
        if not self._group.distributed:
            return [payload]
        out: list[Any] = [None] * self._group.world_size
        dist.all_gather_object(out, payload)
        return out

    def reduce_max(self, values: np.ndarray) -> np.ndarray:
        if not self._group.distributed:
            return values
        t = torch.from_numpy(np.asarray(values, np.float64).copy()).to(self._collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return np.asarray(t.cpu().numpy())

    def _collective_device(self) -> torch.device:
        return self._device if self._device.type == "cuda" else torch.device("cpu")

    # -- model ----------------------------------------------------------------------------

    def build(self, shape: PolicyShape, norm: Normalization) -> None:
        torch.manual_seed(self._config.seed)  # the same initial weights on every rank
        self._image_keys = shape.image_keys
        policy = TorchPolicy(shape, norm).to(self._device)
        self._policy = policy
        self._model = policy
        if self._group.distributed:
            # DDP all-reduces (averages) the gradients in backward; it also broadcasts rank 0's
            # weights at construction, which equal everyone's anyway (same seed).
            self._model = nn.parallel.DistributedDataParallel(
                policy, device_ids=[self._device.index] if self._device.type == "cuda" else None
            )
        self._optimizer = torch.optim.Adam(policy.parameters(), lr=self._config.learning_rate)

    def _parts(self) -> tuple[TorchPolicy, nn.Module, torch.optim.Optimizer]:
        if self._policy is None or self._model is None or self._optimizer is None:
            raise RuntimeError("build() the backend first")
        return self._policy, self._model, self._optimizer

    def device_feed(
        self, batches: Iterator[dict[str, np.ndarray]], state: Callable[[], dict[str, Any]]
    ) -> DeviceFeed:
        # uint8 frames cross the bus; the encoder converts and scales them on the device.
        keys = (*self._image_keys, "observation.state", "action", "action_is_pad")
        return TorchFeed(batches, device=self._device, keys=keys, state=state)

    def step(self, inputs: dict[str, torch.Tensor]) -> float:
        policy, model, optimizer = self._parts()
        optimizer.zero_grad(set_to_none=True)
        pred = model([inputs[k] for k in self._image_keys], inputs["observation.state"])
        loss = policy.loss(pred, inputs["action"], inputs["action_is_pad"], self._config.loss)
        loss.backward()
        optimizer.step()
        value = loss.detach()
        if self._group.distributed:
            value = value.clone()
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
            value = value / self._group.world_size
        if self._device.type == "cuda":
            # This stream only: the next batch's copy runs on the feed's stream meanwhile, and
            # waiting for it here would count the hidden copy as compute.
            torch.cuda.current_stream(self._device).synchronize()
        return float(value.item())

    def predict(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        policy, _, _ = self._parts()
        with torch.no_grad():  # the policy itself, not DDP's wrapper: no collective
            images = [
                torch.from_numpy(np.ascontiguousarray(batch[k])).to(self._device) for k in self._image_keys
            ]
            state = torch.from_numpy(np.asarray(batch["observation.state"], np.float32)).to(self._device)
            return np.asarray(policy(images, state).cpu().numpy())

    def param_digest(self) -> str:
        policy, _, _ = self._parts()
        return digest_arrays([p.detach().cpu().numpy() for p in policy.parameters()])

    def describe(self) -> dict[str, Any]:
        name = torch.cuda.get_device_name(self._device) if self._device.type == "cuda" else "cpu"
        return {"library": f"torch {torch.__version__}", "device": name, "threads": torch.get_num_threads()}

    # -- checkpoints ----------------------------------------------------------------------

    @staticmethod
    def _path(directory: Path, step: int) -> Path:
        return directory / f"step_{step:09d}.pt"

    def _steps(self, directory: Path) -> list[int]:
        if not directory.is_dir():
            return []
        # Temporary files (".step_....pt.tmp-PID", left by a kill mid-write) never match.
        return sorted(int(m.group(1)) for p in directory.iterdir() if (m := _NAME.match(p.name)))

    def latest(self, directory: Path) -> int | None:
        steps = self._steps(directory)
        return steps[-1] if steps else None

    def save(self, directory: Path, step: int, extra: dict[str, Any]) -> None:
        policy, _, optimizer = self._parts()
        if self._group.rank == 0:
            state = {
                "format": CHECKPOINT_FORMAT,
                "step": step,
                "model": policy.state_dict(),
                "optimizer": optimizer.state_dict(),
                "extra": extra,
            }
            atomic_write(self._path(directory, step), lambda f: torch.save(state, f))
            for old in self._steps(directory)[:-KEEP_CHECKPOINTS]:
                with contextlib.suppress(FileNotFoundError):
                    self._path(directory, old).unlink()
        if self._group.distributed:
            dist.barrier()  # no rank runs ahead of a checkpoint another rank might resume from

    def restore(self, directory: Path, step: int) -> dict[str, Any]:
        policy, _, optimizer = self._parts()
        path = self._path(directory, step)
        try:
            # weights_only: a checkpoint is tensors and plain containers; never unpickle code.
            state = torch.load(path, map_location=self._device, weights_only=True)
        except (OSError, RuntimeError) as err:
            raise CheckpointError(f"cannot read the torch checkpoint {path}: {err}") from err
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(f"{path} is not a pi_train torch checkpoint ({CHECKPOINT_FORMAT})")
        policy.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return dict(state["extra"])
