"""The sample index: flat sample number <-> (episode, step), built from the episodes' step counts.

Samples of a selection are numbered in (episode_id, step) order before any shuffling: flat
sample n is step n - offsets[e] of episode e, where offsets are the running sums of the step
counts. The index is two int64 arrays of about one entry per episode, so its size does not grow
with the number of samples (house style 14); the per-step arrays of the selection are
concatenated in the same order, so a flat number is also their row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True, eq=False)
class SampleIndex:
    """Where each flat sample lives: episode number (in `Dataset.episode_ids` order) and step.

    Example:
        >>> index = SampleIndex.from_lengths(np.array([3, 2]))
        >>> index.num_samples, index.locate(4)
        (5, (1, 1))
    """

    lengths: np.ndarray  # int64 [episodes]: steps of each episode
    offsets: np.ndarray  # int64 [episodes + 1]: flat number of each episode's step 0, then the total

    @staticmethod
    def from_lengths(lengths: np.ndarray) -> SampleIndex:
        return SampleIndex(lengths, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))

    @property
    def num_samples(self) -> int:
        return int(self.offsets[-1])

    def locate(self, flat: int) -> tuple[int, int]:
        """(episode number, step) of flat sample `flat` (in range: not checked here)."""
        episode = int(np.searchsorted(self.offsets, flat, side="right")) - 1
        return episode, flat - int(self.offsets[episode])

    def locate_many(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`locate` of every entry of an int64 array: (episode numbers, steps)."""
        episodes = np.searchsorted(self.offsets, flat, side="right") - 1
        return episodes, flat - self.offsets[episodes]

    def episode_rows(self, episode: int) -> slice:
        """The flat numbers of one episode's steps: its rows of the per-step arrays."""
        return slice(int(self.offsets[episode]), int(self.offsets[episode + 1]))
