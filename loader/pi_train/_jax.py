"""The JAX backend: the reference policy in flax (linen), Adam from optax, data parallelism over
`jax.distributed` processes with a one-axis mesh, and checkpoints through orbax.

Data parallelism is SPMD: the parameters are replicated over a mesh of every process's devices,
each process's batch becomes its rows of one global batch (`make_array_from_process_local_data`),
and the jitted step's mean over the global batch makes XLA all-reduce the gradients. So every
process holds the same parameters after every step, by construction.

Checkpoints: an orbax `CheckpointManager` (synchronous saves) holding two items, the train state
as a pytree of host numpy arrays and the loader states as JSON. Orbax writes each step into a
temporary directory and renames it when complete, so a process killed mid-save leaves the
previous step as the latest one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from pi_loader.adapters import DeviceFeed, JaxFeed

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
from pi_train._config import ProcessGroup, TrainConfig
from pi_train._errors import CheckpointError
from pi_train._normalize import Normalization
from pi_train._rendezvous import host_record, jax_initialize


class CameraEncoder(nn.Module):
    """uint8 NHWC frames -> a feature vector (the reference encoder, see `_backend`)."""

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        x = images.astype(jnp.float32) / 255.0
        x = nn.relu(nn.Conv(CONV1, (8, 8), strides=(4, 4), padding="VALID")(x))
        x = nn.relu(nn.Conv(CONV2, (4, 4), strides=(2, 2), padding="VALID")(x))
        return nn.relu(nn.Dense(CAMERA_FEATURES)(x.mean(axis=(1, 2))))


class JaxPolicy(nn.Module):
    """The reference policy: one encoder per camera plus a proprio MLP -> normalized actions.

    Example:
        >>> policy = JaxPolicy(cameras=3, horizon=16, action_dim=14)
        >>> params = policy.init(key, images, normalized_state)
    """

    cameras: int
    horizon: int
    action_dim: int

    @nn.compact
    def __call__(self, images: list[jax.Array], state: jax.Array) -> jax.Array:
        parts = [CameraEncoder(name=f"camera_{i}")(x) for i, x in enumerate(images)]
        parts.append(nn.relu(nn.Dense(STATE_FEATURES)(state)))
        h = nn.relu(nn.Dense(HIDDEN)(jnp.concatenate(parts, axis=1)))
        return nn.Dense(self.horizon * self.action_dim)(h).reshape(-1, self.horizon, self.action_dim)


class JaxBackend:
    """`Backend` for JAX (see `pi_train._backend.Backend` for the contract of each method).

    Example:
        >>> backend = JaxBackend(TrainConfig(lake="lake", framework="jax"), ProcessGroup())
    """

    framework = "jax"

    def __init__(self, config: TrainConfig, group: ProcessGroup) -> None:
        self._config, self._group = config, group
        self._state: Any = None  # (params, opt_state), replicated over the mesh
        self._image_keys: tuple[str, ...] = ()
        self._managers: dict[Path, ocp.CheckpointManager] = {}

    # -- processes ------------------------------------------------------------------------

    def start(self) -> None:
        g = self._group
        # orbax reports every save through absl at INFO (~50 lines a checkpoint) and JAX logs its
        # backend probing: keep their warnings, unless the caller set these loggers' levels.
        for name in ("absl", "jax._src.xla_bridge"):
            logger = logging.getLogger(name)
            if logger.level == logging.NOTSET:
                logger.setLevel(logging.WARNING)
        if self._config.device == "cpu":
            jax.config.update("jax_platforms", "cpu")
        if g.distributed and not jax.distributed.is_initialized():
            jax_initialize(g, host_record(self._config, g))  # bounded and checked (pi_train._hosts)
        devices = jax.devices()
        if self._config.device == "cuda" and devices[0].platform != "gpu":
            raise ValueError(f"device='cuda' but JAX runs on {devices[0].platform}; install jax[cuda]")
        mesh = jax.make_mesh((len(devices),), ("data",), devices=devices)
        self._rows = NamedSharding(mesh, P("data"))  # a batch: rows split over processes
        self._replicated = NamedSharding(mesh, P())  # parameters and optimizer state

    def stop(self) -> None:
        for manager in self._managers.values():
            manager.close()
        self._managers.clear()
        if self._group.distributed and jax.distributed.is_initialized():
            jax.distributed.shutdown()

    def all_gather_json(self, payload: Any) -> list[Any]:
        if not self._group.distributed:
            return [payload]
        import json

        data = np.frombuffer(json.dumps(payload).encode(), np.uint8)
        sizes = np.asarray(multihost_utils.process_allgather(np.array([data.size], np.int32))).reshape(-1)
        padded = np.zeros(int(sizes.max()), np.uint8)
        padded[: data.size] = data
        rows = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(sizes), -1)
        return [json.loads(bytes(row[:n]).decode()) for row, n in zip(rows, sizes.tolist(), strict=True)]

    def reduce_max(self, values: np.ndarray) -> np.ndarray:
        if not self._group.distributed:
            return values
        gathered = np.asarray(multihost_utils.process_allgather(np.asarray(values, np.float64)))
        return np.asarray(gathered.reshape(self._group.world_size, -1).max(axis=0))

    # -- model ----------------------------------------------------------------------------

    def build(self, shape: PolicyShape, norm: Normalization) -> None:
        self._image_keys = shape.image_keys
        policy = JaxPolicy(cameras=len(shape.image_keys), horizon=shape.horizon, action_dim=shape.action_dim)
        images = [jnp.zeros((1, *s), jnp.uint8) for s in shape.image_shapes]
        params = policy.init(jax.random.key(self._config.seed), images, jnp.zeros((1, shape.state_dim)))
        optimizer = optax.adam(self._config.learning_rate)
        # Host numpy first: placing it with a global sharding works in every process of a
        # multi-process run (each gives the same values); orbax also restores into this structure.
        self._host_template = jax.tree.map(np.asarray, (params, optimizer.init(params)))
        self._state = jax.device_put(self._host_template, self._replicated)
        stats = {k: jnp.asarray(v) for k, v in norm.to_json().items()}
        kind = self._config.loss

        def loss_fn(params: Any, batch: dict[str, jax.Array]) -> jax.Array:
            s = (batch["observation.state"] - stats["state_mean"]) / stats["state_std"]
            pred = cast(jax.Array, policy.apply(params, [batch[k] for k in shape.image_keys], s))
            target = (batch["action"] - stats["action_mean"]) / stats["action_std"]
            diff = pred - target
            err = (diff * diff if kind == "l2" else jnp.abs(diff)).mean(axis=2)
            valid = (~batch["action_is_pad"]).astype(jnp.float32)
            return (err * valid).sum() / jnp.maximum(valid.sum(), 1.0)

        def train_step(state: Any, batch: dict[str, jax.Array]) -> tuple[Any, jax.Array]:
            params, opt_state = state
            loss, grads = jax.value_and_grad(loss_fn)(params, batch)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        self._step = jax.jit(train_step, out_shardings=(self._replicated, self._replicated))

        def predict(params: Any, images: list[jax.Array], state: jax.Array) -> jax.Array:
            s = (state - stats["state_mean"]) / stats["state_std"]
            return cast(jax.Array, policy.apply(params, images, s))

        self._predict = jax.jit(predict)  # on this process's arrays: no collective

    def device_feed(
        self, batches: Iterator[dict[str, np.ndarray]], state: Callable[[], dict[str, Any]]
    ) -> DeviceFeed:
        # Dispatched ahead on the feed's thread (device_put is asynchronous); the loop blocks
        # only for what is not yet on the device (copy_wait_s).
        keys = (*self._image_keys, "observation.state", "action", "action_is_pad")
        return JaxFeed(batches, sharding=self._rows, keys=keys, state=state)

    def step(self, inputs: dict[str, jax.Array]) -> float:
        self._state, loss = self._step(self._state, inputs)
        jax.block_until_ready((self._state, loss))  # async dispatch would hide the compute
        return float(np.asarray(loss.addressable_data(0)))

    def predict(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        params = self._host_state()[0]
        images = [np.asarray(batch[k]) for k in self._image_keys]
        return np.asarray(self._predict(params, images, np.asarray(batch["observation.state"], np.float32)))

    def _host_state(self) -> Any:
        # Replicated: every process's first local shard is the whole array.
        return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), self._state)

    def param_digest(self) -> str:
        return digest_arrays(jax.tree.leaves(self._host_state()[0]))

    def describe(self) -> dict[str, Any]:
        device = jax.devices()[0]
        return {"library": f"jax {jax.__version__}", "device": f"{device.platform}:{device.device_kind}"}

    # -- checkpoints ----------------------------------------------------------------------

    def _manager(self, directory: Path) -> ocp.CheckpointManager:
        directory = directory.absolute()
        if directory not in self._managers:
            options = ocp.CheckpointManagerOptions(
                max_to_keep=KEEP_CHECKPOINTS, enable_async_checkpointing=False, create=True
            )
            self._managers[directory] = ocp.CheckpointManager(
                directory, options=options, item_names=("state", "extra")
            )
        return self._managers[directory]

    def latest(self, directory: Path) -> int | None:
        if not directory.is_dir():
            return None
        step = self._manager(directory).latest_step()
        return None if step is None else int(step)

    def save(self, directory: Path, step: int, extra: dict[str, Any]) -> None:
        manager = self._manager(directory)
        manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(self._host_state()), extra=ocp.args.JsonSave(extra)
            ),
            force=True,
        )
        manager.wait_until_finished()

    def restore(self, directory: Path, step: int) -> dict[str, Any]:
        try:
            restored = self._manager(directory).restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(self._host_template), extra=ocp.args.JsonRestore()
                ),
            )
        except (OSError, ValueError, KeyError) as err:
            raise CheckpointError(
                f"cannot restore the orbax checkpoint of step {step} in {directory}: {err}"
            ) from err
        host_state = jax.tree.map(np.asarray, restored["state"])
        self._state = jax.device_put(host_state, self._replicated)
        return dict(restored["extra"])
