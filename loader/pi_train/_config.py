"""`TrainConfig` (what a run trains on and how) and `ProcessGroup` (which process of a run this is).

Both are parsed once at the edge (the `pilake train` CLI, or `python -m pi_train CONFIG.json`
for each process of a multi-process run) and passed down frozen.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Literal

from pi_loader import default_num_workers

from pi_train._split import check_eval_options

Framework = Literal["jax", "torch"]
FRAMEWORKS: tuple[str, ...] = ("jax", "torch")
LOSSES: tuple[str, ...] = ("l2", "l1")
NORMALIZATIONS: tuple[str, ...] = ("mean_std", "quantile")  # pi_train._normalize.MODES
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
# The reference encoder's first two convolutions (8x8 stride 4, then 4x4 stride 2) need >= 20 px.
MIN_IMAGE_PX = 20


def _positive_int(name: str, value: object, low: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """One training run of the reference policy.

    Args:
        lake: the lake root (path or URI).
        framework: "torch" or "jax".
        steps: optimizer steps to reach (a resumed run continues up to this step).
        sql: ClickHouse SQL over the catalog returning `episode_id` (needs `catalog`).
        dataset: the name of a snapshot stored in the catalog (needs `catalog`); with neither
            `sql` nor `dataset`, every committed episode of the lake.
        catalog: the catalog location (chdb path or http(s) URL).
        out_dir: where the run writes its logs, plots, snapshot and (by default) checkpoints.
        checkpoint_dir: where checkpoints go; None: `<out_dir>/checkpoints`.
        checkpoint_every: write a checkpoint every this many steps (0: only at the end).
        resume: continue from the latest checkpoint (the run's pinned snapshot is reused).
        stop_after_s: stop cleanly once this many seconds have passed since `train` started:
            finish the step, checkpoint it, return (exit 0), as on SIGTERM; None: no limit
            (`PILAKE_TRAIN_DEADLINE`, a Unix time, is the other deadline; see `pi_train._stop`).
        batch_size: samples per process per step (the global batch is this x processes).
        workers: pi_loader worker processes per training process (0: read in the training
            loop); None: the host's cores less two, shared between this host's processes
            (`pi_loader.default_num_workers`).
        prefetch_batches: batches the loader keeps in flight; None: sized from the workers
            within the loader's memory budget (see `pi_loader.Loader`).
        seed: seed of the model's initialisation and of pi_loader's order.
        learning_rate: Adam's learning rate.
        loss: "l2" or "l1", on normalized actions, padded steps masked out.
        normalization: "mean_std" ((x − mean) / std) or "quantile" (openpi's q01/q99 to
            [−1, 1]; needs a lake whose episodes rows have quantile sketches), see `pi_train._normalize`.
        cameras: cameras to use (None: every camera the selection has).
        action_horizon: actions predicted per sample (the action chunk).
        image_size: (height, width) the loader resizes frames to; None keeps the stored size.
        log_every: steps per timing window (step-time decomposition, JSONL and PNG).
        log_batches: also log each step's batch fingerprint and (episode_id, step) ids.
        device: "auto" (CUDA when torch sees one; JAX's default backend), "cpu" or "cuda".
        threads: torch's intra-op CPU threads; None: the host's cores per process, less the
            loader's workers, at least 1 (see `compute_threads`).
        plot: draw `timing.png` at the end.
        eval_dataset: a dataset pin held out for evaluation (its episodes are not trained on).
        eval_fraction: hold out this fraction of the selection's episodes, by a salted hash
            of each episode_id (see `pi_train._split`); exclusive with eval_dataset.
        eval_every: score the held-out samples every this many steps and at the last
            (`<out>/eval.jsonl`); 0: never during training.
        eval_samples: held-out samples scored each time (a fixed choice); None: all.
        metrics_port: serve live step-time metrics to Prometheus on this port plus the local
            rank while the run goes; 0: off (see `pi_train._live_metrics`).
        cache_dir: the loader's disk cache for an s3:// lake (a local disk, the node's NVMe on
            a cluster; shared by the host's processes); None: no cache (a local lake needs none).
        cache_gib: the most the cache may hold, GiB (least recently used files are evicted).

    Raises:
        ValueError: an option out of range (the message names it).

    Example:
        >>> TrainConfig(lake=".pilake/lake", sql="SELECT episode_id FROM episodes", catalog=".pilake/catalog",
        ...             framework="jax", steps=200, batch_size=32, workers=2)
    """

    lake: str
    framework: Framework = "torch"
    steps: int = 100
    sql: str | None = None
    dataset: str | None = None
    # ((pin name, weight), ...): train on a pi_loader.Mixture of the lake's dataset pins
    mix: tuple[tuple[str, float], ...] | None = None
    catalog: str | None = None
    out_dir: str = "runs/train"
    checkpoint_dir: str | None = None
    # Every 100 steps: a CPU checkpoint of the reference model is ~1 MB, a second or less.
    checkpoint_every: int = 100
    resume: bool = False
    # None: a run ends at `steps`, or on SIGTERM; a job with a wall-clock limit sets this to the
    # limit less the checkpoint time and a step, so it ends checkpointed instead of killed.
    stop_after_s: float | None = None
    # 32 is the loader benchmark's batch and a usual policy batch per device.
    batch_size: int = 32
    # None: follow the host's cores (1 on a 2-core machine, 14 on a 16-core GPU host).
    workers: int | None = None
    # None: in flight follows the workers (a fixed 4 kept 4 of 14 workers busy: issue 23).
    prefetch_batches: int | None = None
    seed: int = 0
    learning_rate: float = 3e-4
    loss: str = "l2"
    normalization: str = "mean_std"
    cameras: tuple[str, ...] | None = None
    # 16 actions: the ACT / diffusion-policy chunk (pi_loader's SampleSpec default).
    action_horizon: int = 16
    image_size: tuple[int, int] | None = None
    # 10 steps per window: enough to average out single slow batches, fine enough to plot.
    log_every: int = 10
    log_batches: bool = False
    device: str = "auto"
    threads: int | None = None
    plot: bool = True
    # Evaluation (pi_train._split, pi_train._eval): off unless a held-out split is named.
    eval_dataset: str | None = None
    eval_fraction: float | None = None
    # As checkpoint_every; an eval of 64 demo-lake samples took 0.35-0.44 s, ~4 steps of 32 on
    # 2 cores (reading and decoding dominate), so 256 every 100 steps is ~15% of the run.
    eval_every: int = 100
    # 256: a loss to ~2 digits on a policy batch scale, at a bounded cost per eval.
    eval_samples: int | None = 256
    # 0 (off), as the loader's endpoint: two runs on one host would otherwise fight over a port.
    metrics_port: int = 0
    # None: a local lake is read in place; an s3:// lake needs one (pi_loader reads through it).
    cache_dir: str | None = None
    # 100 GiB: a few pins of camera data; size it to the node's NVMe and the selection.
    cache_gib: float = 100.0

    def __post_init__(self) -> None:
        if not isinstance(self.lake, str) or not self.lake:
            raise ValueError(f"lake must be a non-empty path or URI, got {self.lake!r}")
        if self.framework not in FRAMEWORKS:
            raise ValueError(f"framework must be one of {FRAMEWORKS}, got {self.framework!r}")
        _positive_int("steps", self.steps)
        _positive_int("batch_size", self.batch_size)
        if self.prefetch_batches is not None:
            _positive_int("prefetch_batches", self.prefetch_batches)
        _positive_int("action_horizon", self.action_horizon)
        _positive_int("log_every", self.log_every)
        if self.workers is not None:
            _positive_int("workers", self.workers, 0)
        _positive_int("checkpoint_every", self.checkpoint_every, 0)
        _positive_int("seed", self.seed, 0)
        check_eval_options(self)  # EvalError: names the value and what to pass
        _positive_int("metrics_port", self.metrics_port, 0)
        if self.metrics_port > 65535:
            raise ValueError(f"metrics_port must be 0 (off) or a TCP port <= 65535, got {self.metrics_port}")
        gib = self.cache_gib
        if isinstance(gib, bool) or not isinstance(gib, int | float) or not 0 < gib < float("inf"):
            raise ValueError(f"cache_gib must be a number of GiB > 0, got {self.cache_gib!r}")
        if self.lake.startswith(("s3://", "s3a://")) and not self.cache_dir:
            raise ValueError(
                f"the s3:// lake {self.lake!r} is read through a local disk cache: pass cache_dir "
                "(--cache-dir, a directory on a local disk such as the node's NVMe)"
            )
        if self.threads is not None:
            _positive_int("threads", self.threads)
        if self.stop_after_s is not None and (
            isinstance(self.stop_after_s, bool)
            or not isinstance(self.stop_after_s, int | float)
            or not 0 <= self.stop_after_s < float("inf")
        ):
            raise ValueError(
                "stop_after_s must be a number of seconds >= 0 (or None: no deadline), "
                f"got {self.stop_after_s!r}"
            )
        if self.sql is not None and self.dataset is not None:
            raise ValueError("pass sql or dataset (a snapshot name), not both")
        if self.mix is not None:
            if self.sql is not None or self.dataset is not None:
                raise ValueError("pass mix (weighted dataset pins) or sql/dataset, not both")
            if not self.mix or any(
                not isinstance(n, str) or not n or not isinstance(w, int | float) or not w > 0
                for n, w in self.mix
            ):
                raise ValueError(f"mix must be (pin name, weight > 0) pairs, got {self.mix!r}")
            object.__setattr__(self, "mix", tuple((str(n), float(w)) for n, w in self.mix))
        if (self.sql is not None or self.dataset is not None) and not self.catalog:
            raise ValueError("sql and dataset need catalog (the catalog path or URL)")
        if not isinstance(self.learning_rate, int | float) or not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {self.normalization!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.cameras is not None:
            if isinstance(self.cameras, str):
                raise TypeError(f"cameras must be a sequence of names, got the str {self.cameras!r}")
            object.__setattr__(self, "cameras", tuple(str(c) for c in self.cameras))
        if self.image_size is not None:
            size = tuple(self.image_size)
            if len(size) != 2 or any(
                isinstance(v, bool) or not isinstance(v, int) or v < MIN_IMAGE_PX for v in size
            ):
                raise ValueError(
                    f"image_size must be (height, width) with ints >= {MIN_IMAGE_PX} (the encoder's "
                    f"receptive field), got {self.image_size!r}"
                )
            object.__setattr__(self, "image_size", (int(size[0]), int(size[1])))

    @property
    def checkpoints(self) -> Path:
        """The checkpoint directory (checkpoint_dir, or out_dir/checkpoints)."""
        return Path(self.checkpoint_dir) if self.checkpoint_dir else Path(self.out_dir) / "checkpoints"

    def to_json(self) -> str:
        """The config as JSON (what `python -m pi_train CONFIG.json` reads).

        Example:
            >>> TrainConfig.from_json(config.to_json()) == config
            True
        """
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        """Parse `to_json`'s output; unknown keys are an error (a config from another version)."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"a TrainConfig JSON must be an object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown TrainConfig fields {unknown}; known: {sorted(known)}")
        for key in ("cameras", "image_size"):
            if data.get(key) is not None:
                data[key] = tuple(data[key])
        return cls(**data)


def compute_threads(config: TrainConfig, local_processes: int = 1) -> int:
    """Intra-op threads for the training step: `config.threads`, or the cores left to each
    process once its loader workers have theirs (at least 1).

    Why not the framework's default (every core): the loader's workers decode on the same
    cores, and OpenMP threads that wait for a busy core spin; on this 2-core host two torch
    threads beside other work made a 5 ms step take 50-150 ms, one thread kept it at 5-8 ms.

    Example:
        >>> compute_threads(TrainConfig(lake="lake", workers=2), local_processes=1)  # 8 cores
        6
    """
    if config.threads is not None:
        return config.threads
    cores = os.cpu_count() or 1
    return max(1, cores // max(local_processes, 1) - loader_workers(config, local_processes))


def loader_workers(config: TrainConfig, local_processes: int = 1) -> int:
    """pi_loader workers per training process: `config.workers`, or the host's share
    (`pi_loader.default_num_workers` split between this host's processes, at least 1).

    Example:
        >>> loader_workers(TrainConfig(lake="lake"), local_processes=1)  # 16 cores
        14
    """
    if config.workers is not None:
        return config.workers
    return max(1, default_num_workers() // max(local_processes, 1))


@dataclass(frozen=True, slots=True)
class ProcessGroup:
    """Which process of a data-parallel run this is, and where its coordinator listens.

    Read from torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
    LOCAL_WORLD_SIZE, the processes on this host), which `pi_train.launch` also sets; torch
    uses them for its gloo/NCCL group, JAX for `jax.distributed.initialize(f"{addr}:{port}", ...)`.

    Example:
        >>> ProcessGroup.from_env({"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29500"})
        ProcessGroup(rank=1, world_size=2, address='127.0.0.1', port=29500, local_world_size=1,
                     node_rank=1, rendezvous_timeout_s=300.0)
    """

    rank: int = 0
    world_size: int = 1
    address: str = "127.0.0.1"
    port: int = 29500
    local_world_size: int = 1
    # multi-host runs (pi_train._hosts): this host's rank, and how long to wait for the others
    node_rank: int = 0
    rendezvous_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        _positive_int("world_size", self.world_size)
        _positive_int("rank", self.rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be < world_size={self.world_size}, got {self.rank}")
        _positive_int("port", self.port)
        _positive_int("local_world_size", self.local_world_size)
        _positive_int("node_rank", self.node_rank, 0)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProcessGroup:
        """From torchrun's variables; see `pi_train._hosts.group_from_env` (ValueError names a bad one)."""
        from pi_train._hosts import group_from_env

        return group_from_env(environ)
