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
