"""The order of a weighted mixture of sources (`pi_loader.Mixture`): a pure function of the
sources' sample layout, their per-epoch counts, the seed and the epoch; no I/O.

Each source gets `n_i` of the epoch's `N` samples (`split_counts`: largest remainder, within 1
of N·w_i, so the realised share is within 1 / N of the weight), and hands them out from an
endless sequence of its own seeded permutations (round r), moving on across epochs: epoch e
takes its samples e·n_i ... (e + 1)·n_i − 1 of that sequence, so an up-weighted source repeats
nothing before it has shown everything.

Global shuffle (`mixture_order`): the positions of each source's samples are a seeded shuffle
of the epoch's multiset of sources. Block shuffle (`mixture_block_order`, `Loader(block_size=b)`):
each round is the source's own `block_order` (runs of up to b neighbouring steps of one episode
together, shuffled inside), the epoch's slice of the sequence is cut into those runs (a run cut
by the start or end of the slice stays a shorter run), and the runs of every source are
shuffled together. The counts, and so the shares, are the global shuffle's exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pi_loader.order._order import block_permutation

# Streams of SeedSequence([seed, stream, ...]) that nothing else draws from.
_POSITIONS_STREAM = 0x6D6978  # "mix"
_SOURCE_STREAM = 0x737263  # "src"
_BLOCKS_STREAM = 0x626C6B  # "blk"


def split_counts(weights: Sequence[float], total: int) -> np.ndarray:
    """`total` split by `weights` (largest remainder; ties to the earlier source): the counts sum
    to `total` and each is within 1 of total * w / sum(w).

    Example:
        >>> split_counts([0.7, 0.3], 10).tolist()
        [7, 3]
    """
    w = np.asarray(weights, np.float64)
    exact = total * w / w.sum()
    counts = np.floor(exact).astype(np.int64)
    left = int(total - counts.sum())
    if left:
        order = np.lexsort((np.arange(len(w)), -(exact - counts)))
        counts[order[:left]] += 1
    return counts


def mixture_order(
    lengths: Sequence[int] | np.ndarray, counts: Sequence[int] | np.ndarray, *, seed: int, epoch: int
) -> tuple[np.ndarray, np.ndarray]:
    """(source, local flat index) of every sample of `epoch`, in order: a pure function of the
    sources' lengths, their per-epoch counts, the seed and the epoch (see the module docstring).

    Example:
        >>> src, local = mixture_order([100, 40], [70, 30], seed=0, epoch=0)
        >>> np.bincount(src).tolist()
        [70, 30]
    """
    per = np.asarray(counts, np.int64)
    sources = np.repeat(np.arange(len(per)), per)
    rng = np.random.default_rng(np.random.SeedSequence([seed, _POSITIONS_STREAM, epoch]))
    sources = sources[rng.permutation(len(sources))]
    local = np.empty(len(sources), np.int64)
    for i, (length, n) in enumerate(zip(lengths, per, strict=True)):
        where = np.flatnonzero(sources == i)
        consumed = epoch * int(n) + np.arange(int(n), dtype=np.int64)  # this source's j-th sample
        rounds, rest = np.divmod(consumed, int(length))
        for r in np.unique(rounds):
            perm = np.random.default_rng(
                np.random.SeedSequence([seed, _SOURCE_STREAM, i, int(r)])
            ).permutation(int(length))
            mine = rounds == r
            local[where[mine]] = perm[rest[mine]]
    return sources, local


def mixture_block_order(
    episode_lengths: Sequence[Sequence[int] | np.ndarray],
    counts: Sequence[int] | np.ndarray,
    *,
    block_size: int,
    seed: int,
    epoch: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(source, local flat index) of every sample of `epoch` under block shuffle: runs of up to
    `block_size` neighbouring steps of one episode of one source stay together (see the module
    docstring). `episode_lengths[i]` are source i's episodes' steps (its samples, numbered
    episode after episode). A pure function of its arguments; each source gets counts[i] samples.

    Example:
        >>> src, local = mixture_block_order([[6, 4], [5]], [7, 3], block_size=2, seed=0, epoch=0)
        >>> np.bincount(src).tolist()
        [7, 3]
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
    per = np.asarray(counts, np.int64)
    if len(per) != len(episode_lengths):
        raise ValueError(f"{len(per)} counts for {len(episode_lengths)} sources")
    unit_source: list[np.ndarray] = []
    unit_start: list[np.ndarray] = []
    unit_stop: list[np.ndarray] = []
    locals_: list[np.ndarray] = []
    base = 0
    for i, (lengths, n) in enumerate(zip(episode_lengths, per, strict=True)):
        n = int(n)
        if n == 0:
            continue
        lengths = np.asarray(lengths, np.int64)
        total = int(lengths.sum())
        consumed = epoch * n + np.arange(n, dtype=np.int64)
        rounds, rest = np.divmod(consumed, total)
        local = np.empty(n, np.int64)
        block = np.empty(n, np.int64)  # the run each sample belongs to: (round, block) numbered
        for r in np.unique(rounds):
            rng = np.random.default_rng(
                np.random.SeedSequence([seed, _SOURCE_STREAM, i, int(r), _BLOCKS_STREAM])
            )
            order, block_of = block_permutation(lengths, block_size=block_size, rng=rng)
            mine = rounds == r
            local[mine] = order[rest[mine]]
            block[mine] = block_of[order[rest[mine]]] + (int(r) - int(rounds[0])) * (total + 1)
        # runs: maximal stretches of one block (a block is contiguous within its round's order)
        starts = np.flatnonzero(np.concatenate([[True], block[1:] != block[:-1]]))
        stops = np.append(starts[1:], n)
        unit_source.append(np.full(len(starts), i, np.int64))
        unit_start.append(starts + base)
        unit_stop.append(stops + base)
        locals_.append(local)
        base += n
    if not locals_:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    src_of = np.concatenate(unit_source)
    start, stop = np.concatenate(unit_start), np.concatenate(unit_stop)
    flat_local = np.concatenate(locals_)
    rng = np.random.default_rng(np.random.SeedSequence([seed, _POSITIONS_STREAM, epoch, _BLOCKS_STREAM]))
    shuffled = rng.permutation(len(start))
    sizes = (stop - start)[shuffled]
    # positions of the shuffled runs' samples, one run after another
    offsets = np.repeat(start[shuffled] - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
    take = np.arange(int(sizes.sum()), dtype=np.int64) + offsets
    return np.repeat(src_of[shuffled], sizes), flat_local[take]
