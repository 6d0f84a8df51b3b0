"""`evaluate_checkpoint`: score a saved checkpoint on a dataset pin, offline (`pilake eval`).

Finds the run's `policy.json` (next to or above the checkpoint, or `run`), builds the policy it
describes, loads the checkpoint's weights into it, opens the pin with the policy's cameras,
image size and horizon, and scores its samples (all, or a fixed `samples` of them) with
`pi_train._eval.score`: the training loss, action L1/L2 per horizon step, and the same per
robot and per task (the episodes rows' robot_id and task). Writes `eval.json` and `eval.png`.
"""

from __future__ import annotations

import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_loader import Dataset, SampleSpec

from pi_train._backend import Backend, make_backend
from pi_train._config import DEVICES, ProcessGroup, TrainConfig
from pi_train._errors import CheckpointError, EvalError
from pi_train._eval import eval_indices, score
from pi_train._files import atomic_write
from pi_train._policy_file import POLICY_FILE, PolicyRecord
from pi_train._split import open_pin

EVAL_FORMAT = "pi_train.eval/1"
_TORCH_FILE = re.compile(r"^step_(\d{9})\.pt$")
# A checkpoint given as an orbax step directory (JAX): its name is the step.
_STEP_DIR = re.compile(r"^\d+$")


@dataclass(frozen=True, slots=True)
class EvalConfig:
    """An offline evaluation.

    Args:
        checkpoint: a checkpoint (torch `step_*.pt`, an orbax step directory), a checkpoints
            directory (its newest), or a run's --out directory (its newest checkpoint).
        lake: the lake root.
        dataset: the dataset pin (or catalog snapshot) to score on.
        catalog: the catalog location (for a snapshot stored there; pins need none).
        run: the run's --out directory holding policy.json; None: searched from `checkpoint` up.
        samples: samples scored (a fixed choice); None: every sample of the pin.
        batch_size: samples per forward pass.
        device: "cpu" (default: scoring does not need the training device), "cuda" or "auto".
        out_dir: where eval.json and eval.png go; None: `<run>/eval-<dataset>-step<N>`.
        plot: draw eval.png.

    Example:
        >>> evaluate_checkpoint(EvalConfig(checkpoint="runs/train-torch", lake=".pilake/lake",
        ...                                dataset="pick-v1-val"))["l1"]
        0.0312
    """

    checkpoint: str
    lake: str
    dataset: str
    catalog: str | None = None
    run: str | None = None
    samples: int | None = None
    # 32: the trainer's default batch; memory per pass is what a training step holds.
    batch_size: int = 32
    device: str = "cpu"
    out_dir: str | None = None
    plot: bool = True

    def __post_init__(self) -> None:
        for name in ("checkpoint", "lake", "dataset"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise EvalError(f"{name} must be a non-empty string, got {value!r}")
        if self.samples is not None and (
            isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 1
        ):
            raise EvalError(f"samples must be an int >= 1 (or None: all), got {self.samples!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise EvalError(f"batch_size must be an int >= 1, got {self.batch_size!r}")
        if self.device not in DEVICES:
            raise EvalError(f"device must be one of {DEVICES}, got {self.device!r}")


def _find_policy(checkpoint: Path, run: str | None) -> Path:
    if run is not None:
        path = Path(run) / POLICY_FILE
        if not path.is_file():
            raise CheckpointError(f"--run {run} holds no {POLICY_FILE}: pass the --out directory of the run")
        return path
    start = checkpoint if checkpoint.is_dir() else checkpoint.parent
    for directory in (start, *list(start.parents)[:3]):
        if (directory / POLICY_FILE).is_file():
            return directory / POLICY_FILE
    raise CheckpointError(
        f"no {POLICY_FILE} in {start} or the 3 directories above it: pass the training run's --out "
        "directory with --run (runs written before `pilake eval` existed lack it; retrain or resume once)"
    )


def _locate(checkpoint: Path, record: PolicyRecord, policy: Path) -> tuple[Path, int | None]:
    """(checkpoints directory, step or None for the newest) of what the user named."""
    if checkpoint.is_file():
        match = _TORCH_FILE.match(checkpoint.name)
        if record.framework != "torch" or match is None:
            raise CheckpointError(
                f"{checkpoint} is not a checkpoint of this {record.framework} run: name a torch "
                "step_NNNNNNNNN.pt, an orbax step directory, or the run's --out directory"
            )
        return checkpoint.parent, int(match.group(1))
    if record.framework == "jax" and _STEP_DIR.match(checkpoint.name):
        return checkpoint.parent, int(checkpoint.name)
    if checkpoint == policy.parent:  # the run's --out: <out>/checkpoints, or where the run put them
        inside = checkpoint / "checkpoints"
        return (inside if inside.is_dir() else Path(record.checkpoints)), None
    return checkpoint, None


def _restore(backend: Backend, directory: Path, step: int | None) -> int:
    latest = backend.latest(directory) if step is None else step
    if latest is None:
        raise CheckpointError(f"{directory} holds no complete checkpoint: train first, or name a checkpoint")
    try:
        extra = backend.restore(directory, latest)
    except CheckpointError as err:
        raise CheckpointError(
            f"{err}; it is damaged or not of this run: name another checkpoint of the run "
            "(`pilake eval RUN` scores its newest)"
        ) from err
    # torch.load of garbage raises UnpicklingError/EOFError; a state of another shape, RuntimeError
    except (OSError, RuntimeError, ValueError, KeyError, TypeError, EOFError, pickle.UnpicklingError) as err:
        raise CheckpointError(
            f"cannot load the checkpoint of step {latest} in {directory} into the policy of its run "
            f"({type(err).__name__}: {str(err)[:300]}): it is damaged, or from a run of another "
            "shape; name a checkpoint of the run whose policy.json is used (or pass its --run)"
        ) from err
    if not isinstance(extra, dict) or extra.get("format") != "pi_train.checkpoint/1":
        raise CheckpointError(f"the checkpoint of step {latest} in {directory} is not a pi_train checkpoint")
    return int(latest)


def episode_labels(ds: Dataset) -> dict[str, dict[str, str]]:
    """{episode_id: {"robot": robot_id, "task": task}} of `ds`'s episodes (the episodes rows
    of their committed attempts; "unknown" where a row is missing)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    ids = list(ds.episode_ids)
    wanted = dict(zip(ds.snapshot.episode_ids, ds.snapshot.attempt_ids, strict=True))
    table = DeltaTable(ds.lake.episodes).to_pyarrow_dataset()
    rows = table.to_table(
        columns=["episode_id", "attempt_id", "robot_id", "task"], filter=pc.field("episode_id").isin(ids)
    ).to_pylist()
    labels = {e: {"robot": "unknown", "task": "unknown"} for e in ids}
    for row in rows:
        if wanted.get(row["episode_id"]) == row["attempt_id"]:
            labels[row["episode_id"]] = {"robot": str(row["robot_id"]), "task": str(row["task"])}
    return labels


def _check_fits(ds: Dataset, record: PolicyRecord) -> None:
    shapes = ds.image_shapes()
    for key, expected in zip(record.shape.image_keys, record.shape.image_shapes, strict=True):
        got = tuple(shapes[key])
        if got != tuple(expected):
            raise EvalError(
                f"{key} of the dataset is {got}, the policy was trained on {tuple(expected)}: "
                "score it on a dataset of the same cameras and image size"
            )
    for feature, dim in (("observation.state", record.shape.state_dim), ("action", record.shape.action_dim)):
        got_dim = int(ds.stats[feature].mean.shape[0])
        if got_dim != dim:
            raise EvalError(
                f"the dataset's {feature} has {got_dim} dimensions, the policy's {dim}: score it on "
                "episodes of the robot it was trained for"
            )


def evaluate_checkpoint(config: EvalConfig) -> dict[str, Any]:
    """Score a checkpoint on a pin (see the module doc); returns what `eval.json` holds.

    Raises:
        CheckpointError: no policy.json, no checkpoint, or one that is damaged or of another shape.
        EvalError: an unknown pin, or a dataset the policy does not fit.

    Example:
        >>> report = evaluate_checkpoint(EvalConfig(checkpoint="runs/train-torch/checkpoints",
        ...                                         lake=".pilake/lake", dataset="pick-v1-val"))
        >>> report["horizon"][0]["l1"], sorted(report["by_task"])
        (0.021, ['pick', 'place'])
    """
    checkpoint = Path(config.checkpoint)
    if not checkpoint.exists():
        raise CheckpointError(
            f"no checkpoint at {checkpoint}: name a checkpoint file or directory, or a run's --out"
        )
    policy_path = _find_policy(checkpoint, config.run)
    record = PolicyRecord.load(policy_path)
    directory, step = _locate(checkpoint, record, policy_path)
    spec = SampleSpec(cameras=record.cameras, action_horizon=record.shape.horizon, resize=record.image_size)
    ds = open_pin(config.lake, config.dataset, spec, config.catalog)
    _check_fits(ds, record)
    train_config = TrainConfig(
        lake=config.lake,
        framework=record.framework,  # type: ignore[arg-type]  # checked by TrainConfig
        loss=record.loss,
        device=config.device,
        action_horizon=record.shape.horizon,
        image_size=record.image_size,
        cameras=record.cameras,
        plot=False,
    )
    backend = make_backend(train_config, ProcessGroup())
    backend.start()
    try:
        backend.build(record.shape, record.norm)
        step = _restore(backend, directory, step)
        labels = episode_labels(ds)
        result = score(
            backend,
            ds,
            eval_indices(len(ds), config.samples),
            norm=record.norm,
            loss=record.loss,
            batch_size=config.batch_size,
            groups=lambda ids: {
                "robot": [labels[e]["robot"] for e in ids],
                "task": [labels[e]["task"] for e in ids],
            },
        )
    finally:
        backend.stop()
    report = {
        "format": EVAL_FORMAT,
        "checkpoint": str(directory),
        "step": step,
        "framework": record.framework,
        "dataset": config.dataset,
        "fingerprint": ds.snapshot.fingerprint,
        "episodes": len(ds.episode_ids),
        "loss_kind": record.loss,
        **result,
    }
    out = Path(config.out_dir) if config.out_dir else policy_path.parent / f"eval-{config.dataset}-step{step}"
    text = json.dumps(report, indent=1).encode()
    atomic_write(out / "eval.json", lambda f: f.write(text))
    report["out_dir"] = str(out)
    if config.plot:
        from pi_train._eval_report import plot_eval

        plot_eval(report, out / "eval.png")
    return report
