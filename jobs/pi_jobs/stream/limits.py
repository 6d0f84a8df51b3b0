"""What the stream sink may hold in memory, whatever arrives (architecture decision 13).

The sink assembles episodes in its Python worker's memory (pi_jobs.stream._sink). Every count
and length a message declares (`chunk_count`, `chunk_index`, manifest spans) comes from the
sender, so nothing is sized from one and each is checked against these limits before it is
used; what is held is counted in bytes of messages that have actually arrived. A message or
an episode over a limit is quarantined as `limit_exceeded` with the limit's name in `details`
(format/SPEC.md 9.5). With the defaults a sink subtask holds at most `max_held_bytes` of
messages (plus the assembled copy of the one episode it is featurizing), however hostile the
input.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pi_format.wire import MAX_CHUNK_BYTES

# Names of the limits as they appear in quarantine details and the limit metric's label.
LIMIT_NAMES = (
    "max_episode_bytes",
    "max_chunks_per_episode",
    "max_held_episodes",
    "max_episodes_per_key",
    "max_held_bytes",
)


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """Bounds on what one sink subtask holds; each is a setting of `pilake stream`.

    Example:
        >>> StreamLimits(max_episode_bytes=64 << 20, max_held_bytes=256 << 20).max_held_episodes
        1000
    """

    # Bytes of messages held for one episode (its chunks, duplicates included). 1 GiB: a 10-minute
    # episode of three 640x480 H.264 cameras at ~3 Mbit/s is ~700 MB; anything larger is a
    # runaway sender, and it must fit into `max_held_bytes` beside other episodes.
    max_episode_bytes: int = 1 << 30
    # Largest `chunk_count` a header may declare. 4096 chunks of at most 1,000,000 bytes hold
    # 4 GB, more than `max_episode_bytes` at the default 512 KiB payload (2048 chunks per GiB),
    # so a real episode never meets it, while a count of 0xFFFFFFFF is refused on arrival.
    max_chunks_per_episode: int = 4096
    # Episodes being assembled at once in one subtask. 1000: one per robot of a large fleet
    # uploading at the same moment; each holds at least one message. Over it, the episode that
    # has waited longest without a chunk is quarantined (a flood of one-chunk episodes must not
    # push out the ones that are completing).
    max_held_episodes: int = 1000
    # Episodes held under one key (one assembling plus complete ones waiting for their group
    # commit). 2: one upload and one re-send; a key over it has its waiting group committed first.
    max_episodes_per_key: int = 2
    # Bytes of messages held by one subtask (assembling and waiting for the group commit).
    # 4 GiB: a few large episodes at once on a worker with 8+ GB; over it the waiting group is
    # committed first, then the longest-idle assembling episodes are quarantined.
    max_held_bytes: int = 4 << 30

    def __post_init__(self) -> None:
        if self.max_episode_bytes < MAX_CHUNK_BYTES:
            raise ValueError(
                f"max_episode_bytes must be >= {MAX_CHUNK_BYTES} (one message), got {self.max_episode_bytes}"
            )
        if self.max_held_bytes < self.max_episode_bytes:
            raise ValueError(
                f"max_held_bytes must be >= max_episode_bytes ({self.max_episode_bytes}), "
                f"got {self.max_held_bytes}"
            )
        if not 2 <= self.max_chunks_per_episode <= 2**31 - 1:
            raise ValueError(
                f"max_chunks_per_episode must be in [2, 2147483647] (a data chunk and the manifest), "
                f"got {self.max_chunks_per_episode}"
            )
        if self.max_held_episodes < 1:
            raise ValueError(f"max_held_episodes must be >= 1, got {self.max_held_episodes}")
        if self.max_episodes_per_key < 1:
            raise ValueError(f"max_episodes_per_key must be >= 1, got {self.max_episodes_per_key}")


def oldest_idle(last_chunk_ms: Iterable[tuple[str, int]], n: int) -> list[str]:
    """Keys of the `n` episodes that have waited longest for a chunk (smallest time first).

    Example:
        >>> oldest_idle([("a", 5), ("b", 2), ("c", 9)], 2)
        ['b', 'a']
    """
    return [k for k, _ in sorted(last_chunk_ms, key=lambda kv: kv[1])[:n]]
