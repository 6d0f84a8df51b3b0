"""The errors of pi_train: one root, `PiTrainError`, so a caller can catch the trainer's own."""

from __future__ import annotations


class PiTrainError(Exception):
    """Root of pi_train's errors (a run that cannot start, resume or agree).

    Example:
        >>> try:
        ...     train(config)
        ... except PiTrainError as err:
        ...     print(err)
    """


class CheckpointError(PiTrainError):
    """A checkpoint that cannot be written, found or used to resume this run.

    Example:
        >>> raise CheckpointError("checkpoint step_000000040.pt was written by a jax run, this run is torch")
    """


class EvalError(PiTrainError, ValueError):
    """Evaluation that cannot run as asked: a held-out split out of range or empty, an unknown
    pin, a dataset that does not fit the policy. Also a ValueError: it is a bad option.

    Example:
        >>> raise EvalError("eval_fraction must be in (0, 1), got 1.5: pass e.g. 0.05")
    """
