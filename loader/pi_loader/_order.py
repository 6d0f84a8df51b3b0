"""The sample order: a pure function of (number of samples, seed, epoch), never the global RNG."""

from __future__ import annotations

import numpy as np


def sample_order(num_samples: int, *, seed: int, epoch: int) -> np.ndarray:
    """A permutation of range(num_samples) drawn from SeedSequence([seed, epoch]).

    Example:
        >>> sample_order(5, seed=0, epoch=0).tolist()  # same inputs, same order, on any host
    """
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, epoch]))
    return rng.permutation(num_samples).astype(np.int64)


def check_seed(name: str, value: object) -> int:
    # SeedSequence needs non-negative ints; bool is an int subclass but never a meant seed.
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)
