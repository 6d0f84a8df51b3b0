"""Scoring the policy on held-out samples: the metrics, the fixed sample choice, and the
evaluation that runs every N steps of training.

The same code scores in training (`EvalDuringTraining`, every `eval_every` steps, into
`<out>/eval.jsonl`) and offline (`pi_train.evaluate_checkpoint`): a fixed set of samples
(`eval_indices`: the first M of a permutation seeded by EVAL_SEED, the same at every eval, on
every process and in every run), read in (episode, step) order, batch by batch, through the
backend's `predict` (normalized actions, no gradient), then

- loss: the training loss (L2 or L1 on normalized actions, padded steps masked out), pooled
  over every valid (sample, horizon step): comparable to the training curve;
- per horizon step h: L1 = mean |pred − action| and L2 = mean (pred − action)² over the action
  dimensions and the samples whose step h is not padding, in the lake's action units;
- the same per group (robot, task), when the caller names each sample's groups.

Sums are float64 in a fixed order, so two evaluations of the same weights give equal numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from pi_loader import Dataset, sample_order

from pi_train._errors import EvalError
from pi_train._files import JsonlLog
from pi_train._normalize import Normalization
from pi_train._policy_file import record_policy

if TYPE_CHECKING:
    from pi_train._backend import PolicyShape
    from pi_train._config import TrainConfig

# Seed of the eval sample choice: any fixed value; part of what "the same samples" means.
EVAL_SEED = 0


class Predictor(Protocol):
    """What scoring needs of a backend: normalized action predictions for a host batch."""

    def predict(self, batch: Mapping[str, np.ndarray]) -> np.ndarray: ...


def eval_indices(num_samples: int, limit: int | None) -> np.ndarray:
    """The flat sample indices an evaluation scores: all, or the first `limit` of a fixed
    permutation, sorted (neighbours share row groups and video chunks).

    Example:
        >>> eval_indices(1000, 4).tolist()  # the same on any machine
        [162, 206, 222, 459]
    """
    if limit is None or limit >= num_samples:
        return np.arange(num_samples, dtype=np.int64)
    return np.sort(sample_order(num_samples, seed=EVAL_SEED, epoch=0)[:limit]).astype(np.int64)


class _Sums:
    """Running float64 sums of one group: per horizon step L1, L2 (action units), counts, and
    the training loss on normalized actions."""

    def __init__(self, horizon: int) -> None:
        self.l1 = np.zeros(horizon)
        self.l2 = np.zeros(horizon)
        self.count = np.zeros(horizon)
        self.loss = 0.0
        self.samples = 0

    def add(self, l1: np.ndarray, l2: np.ndarray, loss: np.ndarray, valid: np.ndarray) -> None:
        """Rows of one batch: l1, l2, loss [n, H]; valid [n, H] as float."""
        self.l1 += (l1 * valid).sum(axis=0)
        self.l2 += (l2 * valid).sum(axis=0)
        self.count += valid.sum(axis=0)
        self.loss += float((loss * valid).sum())
        self.samples += int(valid.shape[0])

    def result(self) -> dict[str, Any]:
        total = float(self.count.sum())
        safe = np.maximum(self.count, 1.0)
        per_step = [
            {
                "step": h,
                "l1": float(self.l1[h] / safe[h]) if self.count[h] else None,
                "l2": float(self.l2[h] / safe[h]) if self.count[h] else None,
                "count": int(self.count[h]),
            }
            for h in range(self.count.shape[0])
        ]
        return {
            "samples": self.samples,
            "loss": self.loss / total if total else None,
            "l1": float(self.l1.sum() / total) if total else None,
            "l2": float(self.l2.sum() / total) if total else None,
            "horizon": per_step,
        }


class Scorer:
    """Accumulates the metrics (see the module doc) over batches, overall and per group.

    Args:
        norm: the policy's normalization (its targets are normalized actions).
        horizon: actions per sample.
        loss: "l2" or "l1" (the training loss's kind).

    Example:
        >>> scorer = Scorer(norm, horizon=16, loss="l2")
        >>> scorer.add(batch, backend.predict(batch), groups={"robot": robots, "task": tasks})
        >>> scorer.result()["horizon"][0]["l1"]
    """

    def __init__(self, norm: Normalization, horizon: int, loss: str) -> None:
        self._norm, self._horizon, self._kind = norm, horizon, loss
        self._all = _Sums(horizon)
        self._groups: dict[str, dict[str, _Sums]] = {}

    def add(
        self,
        batch: Mapping[str, np.ndarray],
        pred: np.ndarray,
        groups: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        action = np.asarray(batch["action"], np.float64)
        pred = np.asarray(pred, np.float64)
        if pred.shape != action.shape:
            raise EvalError(
                f"the policy predicts actions of shape {pred.shape[1:]} but the dataset's are "
                f"{action.shape[1:]}: score it on a dataset of the same robot and action horizon"
            )
        mean = np.asarray(self._norm.action_mean, np.float64)
        std = np.asarray(self._norm.action_std, np.float64)
        err = pred * std + mean - action  # in the lake's units
        l1, l2 = np.abs(err).mean(axis=2), (err * err).mean(axis=2)
        diff = pred - (action - mean) / std  # normalized, as in training
        loss = (diff * diff if self._kind == "l2" else np.abs(diff)).mean(axis=2)
        valid = (~np.asarray(batch["action_is_pad"], bool)).astype(np.float64)
        self._all.add(l1, l2, loss, valid)
        for name, labels in (groups or {}).items():
            table = self._groups.setdefault(name, {})
            for label in sorted(set(labels)):
                rows = np.asarray([x == label for x in labels])
                sums = table.setdefault(label, _Sums(self._horizon))
                sums.add(l1[rows], l2[rows], loss[rows], valid[rows])

    def result(self) -> dict[str, Any]:
        """{"samples", "loss", "l1", "l2", "horizon": [...], "by_<group>": {label: {...}}}."""
        out = self._all.result()
        for name, table in sorted(self._groups.items()):
            out[f"by_{name}"] = {label: table[label].result() for label in sorted(table)}
        return out


def score(
    predictor: Predictor,
    ds: Dataset,
    indices: np.ndarray,
    *,
    norm: Normalization,
    loss: str,
    batch_size: int,
    groups: Callable[[Sequence[str]], Mapping[str, Sequence[str]]] | None = None,
) -> dict[str, Any]:
    """Score `predictor` on the samples `indices` of `ds` (flat indices), `batch_size` at a time.

    Example:
        >>> score(backend, held_out, eval_indices(len(held_out), 256), norm=norm, loss="l2", batch_size=32)
    """
    scorer = Scorer(norm, ds.action_horizon, loss)
    for batch in _batches(ds, indices, batch_size):
        ids = [str(e) for e in batch["episode_id"]]
        scorer.add(batch, predictor.predict(batch), groups(ids) if groups is not None else None)
    return scorer.result()


def _batches(ds: Dataset, indices: np.ndarray, batch_size: int) -> Iterator[dict[str, np.ndarray]]:
    for start in range(0, len(indices), batch_size):
        yield ds.samples(indices[start : start + batch_size])


class EvalDuringTraining:
    """The evaluation of a run: every `every` steps (and at the last step) score the same
    `samples` held-out samples and append {"step", "eval_loss", "eval_l1", "eval_l2",
    "samples", "eval_s"} to `<out>/eval.jsonl` (a resumed run keeps the records through its
    checkpoint, as the step logs do). Only the process that writes logs (rank 0) scores.

    Example:
        >>> evaluator = EvalDuringTraining(held_out, norm, out=out, every=50, samples=256,
        ...                                loss="l2", batch_size=32, resumed=None)
        >>> evaluator.after_step(backend, step=50, last=100)
    """

    def __init__(
        self,
        held_out: Dataset | None,
        norm: Normalization,
        *,
        out: Path,
        every: int,
        samples: int | None,
        loss: str,
        batch_size: int,
        resumed: int | None,
        active: bool = True,
    ) -> None:
        self._ds = held_out if active and every > 0 else None
        self._norm, self._every, self._loss, self._batch = norm, every, loss, batch_size
        self.last: dict[str, Any] | None = None
        self._log: JsonlLog | None = None
        if self._ds is not None:
            self._indices = eval_indices(len(self._ds), samples)
            self._log = JsonlLog(out / "eval.jsonl", keep_through_step=resumed)

    def after_step(self, predictor: Predictor, step: int, last: int) -> dict[str, Any] | None:
        """Score now if `step` is due (a multiple of `every`, or `last`); the record or None."""
        if self._ds is None or self._log is None or not (step % self._every == 0 or step == last):
            return None
        t0 = time.perf_counter()
        result = score(
            predictor, self._ds, self._indices, norm=self._norm, loss=self._loss, batch_size=self._batch
        )
        record = {
            "step": step,
            "eval_loss": result["loss"],
            "eval_l1": result["l1"],
            "eval_l2": result["l2"],
            "samples": result["samples"],
            "eval_s": round(time.perf_counter() - t0, 4),
        }
        self._log.write(record)
        self.last = record
        print(
            f"step {step}  eval loss {record['eval_loss']:.4f} on {record['samples']} held-out samples",
            flush=True,
        )
        return record

    def close(self) -> None:
        if self._log is not None:
            self._log.close()


def start_eval(
    config: TrainConfig,
    held_out: Dataset | None,
    shape: PolicyShape,
    norm: Normalization,
    out: Path,
    *,
    resumed: int | None,
    rank0: bool,
) -> EvalDuringTraining:
    """What a run does for evaluation once its policy is built: rank 0 writes `policy.json`
    (what `pilake eval` needs to load the checkpoints) and gets the evaluator of `held_out`
    (a no-op without a split or with `eval_every` 0); other ranks get a no-op.

    Example:
        >>> evaluator = start_eval(config, split.held_out, shape, norm, out, resumed=None, rank0=True)
    """
    record_policy(config, shape, norm, out, rank0)
    return EvalDuringTraining(
        held_out,
        norm,
        out=out,
        every=config.eval_every,
        samples=config.eval_samples,
        loss=config.loss,
        batch_size=config.batch_size,
        resumed=resumed,
        active=rank0,
    )
