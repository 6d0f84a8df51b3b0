"""`train`: the reference training loop, the same for torch and JAX.

In order: join the process group; open ONE snapshot on every process (`Dataset.shared`: rank 0
resolves the selection, the others open its snapshot; a resumed run reopens the snapshot it
pinned in `<out>/snapshot.json`, so commits that landed since change nothing); give each
process its own shard (`ShardSpec(rank, world)`) through a `Loader`; build the policy from the
config's seed; restore model, optimizer and every rank's loader state from the newest
checkpoint when resuming; check with `pi_loader.agree(loader)` that all processes hold the same
data at the same position; then step. A step is timed in parts (`_timing`), its loss appended to
`steps.rank<r>.jsonl`, and every `checkpoint_every` steps the model, the optimizer and all ranks'
loader states are checkpointed together, atomically. On SIGTERM or at a deadline
(`pi_train._stop`) every rank finishes its step, the run checkpoints that step and `train`
returns normally (`TrainResult.stopped`), so the process exits 0 and `resume=True` continues
with exactly the batches and losses of a run that never stopped.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from pi_loader import Dataset, Loader, Mixture, SampleSpec, ShardSpec, Snapshot, agree

from pi_train._backend import Backend, PolicyShape, make_backend
from pi_train._config import MIN_IMAGE_PX, ProcessGroup, TrainConfig, loader_workers
from pi_train._errors import CheckpointError, PiTrainError
from pi_train._eval import start_eval
from pi_train._files import JsonlLog, atomic_write
from pi_train._lineage import checkpoint_lineage, run_lineage, write_lineage
from pi_train._live_metrics import LiveMetrics, MetricsOff, live_metrics
from pi_train._normalize import Normalization, normalization_stats
from pi_train._rendezvous import agree_on_latest
from pi_train._split import eval_split
from pi_train._stage import cache_config
from pi_train._stop import StopRequest, deadline_from_env, record_stop, stop_checkpoint
from pi_train._timing import StepTimer, StepTimes

CHECKPOINT_EXTRA_FORMAT = "pi_train.checkpoint/1"


@dataclass(frozen=True, slots=True)
class TrainResult:
    """What one process's run did.

    Attributes:
        step: the step reached (== config.steps unless stopped early).
        start_step: the step it started from (the checkpoint's, when resumed; else 0).
        losses: the global mean loss of each step this process ran, in order.
        summary: the step-time decomposition over the run (max over ranks) with its verdict.
        param_digest: 16 hex digits over the final parameters (equal on every rank).
        out_dir: where the logs, plot, snapshot and checkpoints are.
        stopped: None when the run reached `config.steps`; else what stopped it early
            ({"reason": "SIGTERM" | "deadline", "step": ..., "checkpoint_s": ...,
            "request_to_exit_s": ...}, also appended to `<out_dir>/stops.rank<r>.jsonl`).

    Example:
        >>> result = train(config)
        >>> result.step, result.losses[-1], result.summary["data_wait_fraction"]
        (200, 0.412, 0.03)
    """

    step: int
    start_step: int
    losses: list[float]
    summary: dict[str, Any]
    param_digest: str
    out_dir: Path = field(default_factory=Path)
    stopped: dict[str, Any] | None = None


def batch_digest(batch: Mapping[str, np.ndarray]) -> str:
    """16 hex digits of blake2b over every array of a batch (keys sorted): equal batches, equal
    digests, so two runs' logs show they saw the same data without storing it.

    Example:
        >>> batch_digest(next(iter(loader)))
        '9f2c0b7e51d3a4e8'
    """
    h = hashlib.blake2b(digest_size=8)
    for key in sorted(batch):
        value = np.asarray(batch[key])
        h.update(key.encode() + b"\0" + f"{value.dtype.str}{value.shape}".encode())
        strings = value.dtype.kind in "US"
        h.update("\0".join(map(str, value.tolist())).encode() if strings else value.tobytes())
    return h.hexdigest()


def _open_dataset(config: TrainConfig, out: Path) -> Dataset | Mixture:
    spec = SampleSpec(cameras=config.cameras, action_horizon=config.action_horizon, resize=config.image_size)
    if config.mix is not None:
        return _open_mixture(config, out, spec)
    arguments: dict[str, Any] = {"spec": spec, "seed": config.seed, "catalog": config.catalog}
    arguments["cache"] = cache_config(config)  # the node-local disk cache of an s3:// lake
    pinned = out / "snapshot.json"
    if config.resume and pinned.exists():
        arguments["snapshot"] = Snapshot.load(str(pinned))
    elif config.sql is not None:
        arguments["sql"] = config.sql
    elif config.dataset is not None:
        arguments["snapshot"] = config.dataset
    # A collective: rank 0 resolves, every rank opens rank 0's snapshot and the fingerprints
    # are compared (HostsDisagreeError otherwise).
    return Dataset.shared(config.lake, **arguments)


def _open_mixture(config: TrainConfig, out: Path, spec: SampleSpec) -> Mixture:
    """The weighted pins of `config.mix`, each opened on every process as one snapshot (a
    resumed run reopens the snapshots it recorded in `<out>/mixture.json`)."""
    assert config.mix is not None  # checked by the caller; narrows the type
    saved = out / "mixture.json"
    recorded = json.loads(saved.read_text())["sources"] if config.resume and saved.exists() else None
    sources: list[tuple[Dataset | str, float]] = []
    for n, (name, weight) in enumerate(config.mix):
        snapshot: Snapshot | str = (
            Snapshot.from_json(json.dumps(recorded[n]["snapshot"])) if recorded else name
        )
        ds = Dataset.shared(
            config.lake, snapshot=snapshot, spec=spec, seed=config.seed, catalog=config.catalog,
            cache=cache_config(config),
        )  # fmt: skip
        sources.append((ds, weight))
    return Mixture(sources, names=[name for name, _ in config.mix], seed=config.seed)


def _record_selection(ds: Dataset | Mixture, out: Path) -> None:
    """What the run reads, pinned (`snapshot.json`, or `mixture.json` with one per source)."""
    if isinstance(ds, Mixture):
        record = {
            "sources": [
                {"name": name, "weight": weight, "snapshot": json.loads(source.snapshot.to_json())}
                for name, weight, source in zip(ds.names, ds.weights, ds.sources, strict=True)
            ],
            "counts": ds.counts,
            "fingerprint": ds.fingerprint,
        }
        text = json.dumps(record, indent=2).encode()
        atomic_write(out / "mixture.json", lambda f: f.write(text))
        return
    snapshot = ds.snapshot.to_json().encode()
    atomic_write(out / "snapshot.json", lambda f: f.write(snapshot))


def _endless(loader: Loader, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
    if loader.batches_per_epoch == 0:
        raise PiTrainError(
            f"batch_size={batch_size} gives no full batch: this process's shard has "
            f"{loader.samples_per_epoch} samples; lower --batch-size or select more episodes"
        )
    while True:  # epoch after epoch; the loader moves to the next epoch's order by itself
        yield from loader


def _policy_shape(ds: Dataset | Mixture, config: TrainConfig, norm: Normalization) -> PolicyShape:
    keys = tuple(f"observation.images.{c}" for c in ds.cameras)
    shapes = ds.image_shapes()
    for key in keys:
        h, w = shapes[key][-3:-1]
        if min(h, w) < MIN_IMAGE_PX:
            raise PiTrainError(
                f"{key} is {h}x{w} px: the reference encoder needs >= {MIN_IMAGE_PX} px; set image_size"
            )
    return PolicyShape(
        image_keys=keys,
        image_shapes=tuple(tuple(shapes[k]) for k in keys),
        state_dim=norm.state_dim,
        action_dim=norm.action_dim,
        horizon=config.action_horizon,
    )


def _resume(backend: Backend, config: TrainConfig, group: ProcessGroup, loader: Loader) -> int:
    directory = config.checkpoints
    # the same newest step on every host (a shared checkpoint_dir), else CheckpointError
    latest = agree_on_latest(backend.all_gather_json, backend.latest(directory), directory)
    if not config.resume:
        if latest is not None:
            raise CheckpointError(
                f"{directory} already holds a checkpoint (step {latest}): pass resume=True "
                "(--resume) to continue it, or choose another out_dir / checkpoint_dir"
            )
        return 0
    if latest is None:
        return 0  # nothing to resume yet (killed before the first checkpoint): start fresh
    extra = backend.restore(directory, latest)
    if extra.get("format") != CHECKPOINT_EXTRA_FORMAT:
        raise CheckpointError(f"the checkpoint of step {latest} in {directory} is not a pi_train checkpoint")
    for key, mine in (("framework", config.framework), ("world_size", group.world_size)):
        if extra.get(key) != mine:
            raise CheckpointError(
                f"the checkpoint of step {latest} was written with {key}={extra.get(key)!r}; this run has "
                f"{key}={mine!r}: resume with the same {key}, or start a new out_dir"
            )
    loader.set_state(extra["loader"][group.rank])
    return int(extra["step"])


def _save(
    backend: Backend, config: TrainConfig, group: ProcessGroup, lineage: Any, loader_state: Any, step: int
) -> None:
    extra = {
        "lineage": checkpoint_lineage(lineage),  # pins, mixture, code version, run id (_lineage)
        "format": CHECKPOINT_EXTRA_FORMAT,
        "step": step,
        "framework": config.framework,
        "world_size": group.world_size,
        # every rank's loader state (they differ in shard_index), gathered into one checkpoint so
        # the model, the optimizer and the data position are always of the same step
        "loader": backend.all_gather_json(loader_state),
    }
    backend.save(config.checkpoints, step, extra)


def train(
    config: TrainConfig,
    group: ProcessGroup | None = None,
    *,
    on_step: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train the reference policy as `config` says, in this process (one rank of `group`).

    Args:
        config: the run.
        group: this process's rank in a data-parallel run (default: from RANK / WORLD_SIZE /
            MASTER_ADDR / MASTER_PORT, i.e. one process when unset); `pi_train.launch` starts
            several.
        on_step: called after every step with (step, loss), after its checkpoint if any.

    On SIGTERM (handled while `train` runs, when called on the main thread), at
    `config.stop_after_s` or at `PILAKE_TRAIN_DEADLINE`: every rank finishes its current step,
    the run checkpoints it and returns with `TrainResult.stopped` set (see `pi_train._stop`).

    Returns:
        A `TrainResult`; `<out_dir>` holds `steps.rank<r>.jsonl`, `timing.jsonl`, `timing.png`,
        `summary.json`, `snapshot.json` and the checkpoints.

    Raises:
        PiTrainError / CheckpointError: a run that cannot start or resume (the message says why).
        pi_loader.HostsDisagreeError: processes that opened different data.

    Example:
        >>> result = train(TrainConfig(lake=".pilake/lake", framework="torch", steps=50))
        >>> result.summary["verdict"]
        'input-bound: 41% of step time waiting for data'
    """
    group = group if group is not None else ProcessGroup.from_env()
    stop = StopRequest(stop_after_s=config.stop_after_s, deadline=deadline_from_env())
    # from before the rendezvous: a SIGTERM while starting stops too; a taken metrics port fails first
    with stop.installed(), live_metrics(config, group) as live:
        backend = make_backend(config, group)
        backend.start()
        stop.install()  # again: joining a JAX process group replaces the SIGTERM handler
        try:
            result = _run(config, group, backend, on_step, stop, live)
        finally:
            backend.stop()
        if result.stopped is not None:
            record_stop(result.stopped, result.out_dir, group.rank, stop)
    return result


def _run(
    config: TrainConfig,
    group: ProcessGroup,
    backend: Backend,
    on_step: Callable[[int, float], None] | None,
    stop: StopRequest,
    live: LiveMetrics | MetricsOff,
) -> TrainResult:
    out = Path(config.out_dir)
    rank0 = group.rank == 0
    ds = _open_dataset(config, out)
    pinned = out / ("mixture.json" if config.mix is not None else "snapshot.json")
    if rank0 and not (config.resume and pinned.exists()):
        _record_selection(ds, out)
    lineage = run_lineage(config, ds, group)
    if rank0:
        write_lineage(out, lineage)
    save_step = partial(_save, backend, config, group, lineage)
    split = eval_split(config, ds, out, rank0, cache_config(config))  # held-out: never trained on
    ds = split.train
    loader = Loader(
        ds,
        batch_size=config.batch_size,
        shard=ShardSpec(index=group.rank, count=group.world_size),
        num_workers=loader_workers(config, group.local_world_size),
        prefetch_batches=config.prefetch_batches,
        drop_last=True,  # one batch shape: no recompilation for a short last batch
    )
    norm = normalization_stats(ds, config.normalization)
    shape = _policy_shape(ds, config, norm)
    backend.build(shape, norm)
    start = _resume(backend, config, group, loader)
    agree(loader)  # same data, options and position on every rank (HostsDisagreeError if not)
    resumed = start if config.resume else None
    evaluator = start_eval(config, split.held_out, shape, norm, out, resumed=resumed, rank0=rank0)
    timer = StepTimer(
        global_batch=config.batch_size * group.world_size,
        reduce_max=backend.reduce_max,
        ranks=group.world_size,
    )
    steps_log = JsonlLog(out / f"steps.rank{group.rank}.jsonl", keep_through_step=resumed)
    timing_log = JsonlLog(out / "timing.jsonl", keep_through_step=resumed) if rank0 else None
    losses: list[float] = []
    step = start
    saved = start if resumed else None  # the step of the newest checkpoint of this run
    position: dict[str, Any] | None = None
    stopped: dict[str, Any] | None = None
    batches = _endless(loader, config.batch_size)
    # Batches are copied to the device ahead of the step that needs them, on another thread;
    # each carries the loader's state right after it, which is what a checkpoint must save.
    feed = backend.device_feed(batches, state=loader.get_state)
    try:
        while step < config.steps:
            t0 = time.perf_counter()
            # A collective before every step: all ranks stop after the same one (even when the
            # signal reached one process only), so the checkpoint below is of one step everywhere.
            reason = stop.agreed(backend.reduce_max)
            if reason is not None:
                save = None if position is None else partial(save_step, position, step)
                stopped = stop_checkpoint(stop, step=step, saved=saved, save=save)
                break
            fed = next(feed)
            t2 = time.perf_counter()
            batch, position = fed.host, fed.state
            if position is None:  # the feed was given the loader's get_state: never None
                raise PiTrainError("the device feed lost the loader's position")
            loss = backend.step(fed.inputs)
            t3 = time.perf_counter()
            step += 1
            losses.append(loss)
            record: dict[str, Any] = {"step": step, "loss": loss, "epoch": position["epoch"]}
            if config.log_batches:
                record["batch"] = batch_digest(batch)
                ids = zip(batch["episode_id"], batch["step"], strict=True)
                record["samples"] = [[str(e), int(s)] for e, s in ids]
            steps_log.write(record)
            t4 = time.perf_counter()
            if step == config.steps or (config.checkpoint_every and step % config.checkpoint_every == 0):
                save_step(position, step)
                saved = step
            t5 = time.perf_counter()
            times = StepTimes(
                data_wait=fed.data_wait_s, h2d=fed.copy_wait_s, compute=t3 - t2, checkpoint=t5 - t4,
                total=t5 - t0,
            )  # fmt: skip
            timer.add(times)
            live.observe(step, times)  # Prometheus, while the run goes (pi_train._live_metrics)
            if step % config.log_every == 0 or step == config.steps:
                window = timer.window(step)
                if window is not None and timing_log is not None:
                    timing_log.write(window)
                    print(
                        f"step {step}/{config.steps}  loss {loss:.4f}  "
                        f"{window['samples_per_s']:.1f} samples/s  {window['verdict']}",
                        flush=True,
                    )
            live.observe_eval(evaluator.after_step(backend, step, config.steps))  # every eval_every
            if on_step is not None:
                on_step(step, loss)
        summary = timer.summary(step)
        summary.update(
            stopped=stopped,
            framework=config.framework,
            batch_size=config.batch_size,
            workers=loader_workers(config, group.local_world_size),
            start_step=start,
            final_loss=losses[-1] if losses else None,
            **backend.describe(),
        )
        digest = backend.param_digest()
        (out / f"final.rank{group.rank}.json").write_text(json.dumps({"step": step, "param_digest": digest}))
        if rank0:
            (out / "summary.json").write_text(json.dumps(summary, indent=1))
            rate, measured = summary["samples_per_s"], summary["steps"]
            print(f"pi_train: {summary['verdict']} ({rate} samples/s over {measured} steps)", flush=True)
            if config.plot and timing_log is not None and stopped is None:  # no plot in a grace period
                from pi_train._plot import plot_timing

                title = f"{config.framework}: {summary['verdict']}"
                plot_timing(list(timing_log), out / "timing.png", title=title)
    finally:
        feed.close()
        evaluator.close()
        steps_log.close()
        if timing_log is not None:
            timing_log.close()
        loader.close()
    return TrainResult(
        step=step,
        start_step=start,
        losses=losses,
        summary=summary,
        param_digest=digest,
        out_dir=out,
        stopped=stopped,
    )
