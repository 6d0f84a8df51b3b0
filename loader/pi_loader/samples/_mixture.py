"""`Mixture`: several Datasets (or dataset pins) sampled with weights, as one dataset.

Where it sits: beside `Dataset`, under `Loader` (which takes either). The order of an epoch is a
pure function of (the sources and their snapshots, the weights, seed, epoch): each source gets
`n_i` of the epoch's `N` samples by the largest-remainder split of `N * w_i` (so the realised
share is within 1 / N of the weight: ±1% once N >= 100), the positions of each source's samples
in the epoch are a seeded shuffle of that multiset, and each source hands out its samples in its
own seeded permutation, moving on through it across epochs (epoch e takes the source's samples
e * n_i ... (e + 1) * n_i - 1 of an endless sequence of permutations), so an up-weighted source
repeats nothing before it has shown everything, and a down-weighted one is seen in full over
several epochs. With `Loader(block_size=b)` each source's sequence is its own block-shuffled
permutations instead, cut into runs of up to b neighbouring steps of one episode, and the runs of
every source are shuffled together (same counts). `Loader` shards that order exactly as it shards
a Dataset's (hosts agree), and its `get_state`/`set_state` resume a Mixture exactly. The order
itself lives in `pi_loader.order._mixture` (pure functions, no I/O).

One spec for all: every sample has the mixture's cameras (the union of the sources', or the
ones given); a source without a camera gives a black frame and `observation.images.<cam>_is_pad`
True, as `action_is_pad` marks padded actions. States and actions are zero-padded to the widest
source, with `observation.state_dim_is_pad` / `action_dim_is_pad` marking the padded dimensions.
Each sample says which source it came from (`source`, an int in the order given).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from pi_format import LakeLayout
from pi_format.stats import NormStats

from pi_loader.order._mixture import mixture_block_order, mixture_order, split_counts
from pi_loader.order._order import SharedEpoch, check_seed
from pi_loader.samples._dataset import Dataset
from pi_loader.samples._gather import IMAGE_KEY_PREFIX, ImageAllocator
from pi_loader.samples._spec import SampleSpec

MIXTURE_FINGERPRINT_FORMAT = "pi_loader.mixture/1"
_PER_SAMPLE_KEYS = ("observation.state", "action")


class Mixture:
    """Weighted sources (Datasets, or dataset pins of one lake) read as one dataset.

    Args:
        sources: (Dataset or pin name, weight) pairs; weights > 0, normalised to sum 1.
        seed: seed of the mixture's order (the sources' own seeds play no part in it).
        epoch: the first epoch.
        lake: the lake pin names are opened from (with `spec`); not needed for Datasets.
        spec: the SampleSpec pin-named sources are opened with.
        samples_per_epoch: N; default the sources' samples added up.
        cameras: the cameras every sample has; default the union of the sources', in order.
        names: a name per source (default: the pin name, or "source<i>").

    Raises:
        ValueError/TypeError: bad weights or sources; sources whose frames of one camera have
            different sizes (set SampleSpec.resize).

    Example:
        >>> mix = Mixture([("pick-v1", 0.7), ("place-v2", 0.3)], lake="/data/lake",
        ...               spec=SampleSpec(action_horizon=16, resize=(224, 224)), seed=0)
        >>> loader = Loader(mix, batch_size=32, shard=ShardSpec.auto())
    """

    def __init__(
        self,
        sources: Sequence[tuple[Dataset | str, float]],
        *,
        seed: int = 0,
        epoch: int = 0,
        lake: str | LakeLayout | None = None,
        spec: SampleSpec | None = None,
        samples_per_epoch: int | None = None,
        cameras: Sequence[str] | None = None,
        names: Sequence[str] | None = None,
        **dataset_arguments: Any,
    ) -> None:
        if isinstance(sources, str | bytes) or not sources:
            raise ValueError("sources must be a non-empty sequence of (Dataset or pin name, weight) pairs")
        datasets: list[Dataset] = []
        weights: list[float] = []
        labels: list[str] = []
        for n, pair in enumerate(sources):
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise TypeError(f"source {n} must be a (Dataset or pin name, weight) pair, got {pair!r}")
            source, weight = pair
            if (
                isinstance(weight, bool)
                or not isinstance(weight, int | float)
                or not 0 < float(weight) < float("inf")
            ):
                raise ValueError(f"source {n}'s weight must be a number > 0, got {weight!r}")
            if isinstance(source, str):
                if lake is None:
                    raise ValueError(f"source {source!r} is a pin name: pass lake= to open it")
                datasets.append(Dataset(lake, snapshot=source, spec=spec, seed=seed, **dataset_arguments))
                labels.append(source)
            elif isinstance(source, Dataset):
                datasets.append(source)
                labels.append(f"source{n}")
            else:
                raise TypeError(
                    f"source {n} must be a pi_loader.Dataset or a pin name, got {type(source).__name__}"
                )
            weights.append(float(weight))
        if names is not None:
            if len(names) != len(datasets):
                raise ValueError(f"names has {len(names)} entries for {len(datasets)} sources")
            labels = [str(x) for x in names]
        self._sources = tuple(datasets)
        self.names = tuple(labels)
        self.weights = tuple(w / sum(weights) for w in weights)
        self._seed = check_seed("seed", seed)
        self._shared_epoch = SharedEpoch(check_seed("epoch", epoch))
        self._lengths = np.array([len(d) for d in datasets], np.int64)
        n = int(self._lengths.sum()) if samples_per_epoch is None else samples_per_epoch
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"samples_per_epoch must be an int >= 1, got {samples_per_epoch!r}")
        self._counts = split_counts(self.weights, n)
        self._offsets = np.concatenate([[0], np.cumsum(self._lengths)[:-1]]).astype(np.int64)
        self._episode_lengths = tuple(d.lengths for d in datasets)  # block shuffle's blocks
        self.cameras = tuple(
            dict.fromkeys(cameras if cameras is not None else [c for d in datasets for c in d.cameras])
        )
        self._image_shapes = self._check_images()
        dims = [self._dims(d) for d in datasets]
        self._state_dim = max(s for s, _ in dims)
        self._action_dim = max(a for _, a in dims)
        self._dims_of = dims
        self._order: tuple[tuple[int, int | None], np.ndarray] | None = None

    # -- what it is ---------------------------------------------------------------------------

    @property
    def sources(self) -> tuple[Dataset, ...]:
        return self._sources

    @property
    def counts(self) -> dict[str, int]:
        """Samples of each source per epoch."""
        return dict(zip(self.names, (int(c) for c in self._counts), strict=True))

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def epoch(self) -> int:
        return self._shared_epoch.get()

    def set_epoch(self, epoch: int) -> None:
        """Switch to another epoch's order (reaches copies pickled on this machine, as a Dataset's)."""
        self._shared_epoch.set(check_seed("epoch", epoch))

    def __len__(self) -> int:
        """Samples per epoch (N)."""
        return int(self._counts.sum())

    @property
    def num_flat(self) -> int:
        """Flat sample numbers (`samples`): the sources' samples, one after another."""
        return int(self._lengths.sum())

    @property
    def fingerprint(self) -> str:
        """16 hex digits over the sources' fingerprints, names, weights, N, the camera and
        dimension mapping and the seed: hosts of one run must have equal ones."""
        header = {
            "format": MIXTURE_FINGERPRINT_FORMAT,
            "sources": [d.fingerprint for d in self._sources],
            "names": list(self.names),
            "counts": self._counts.tolist(),
            "cameras": list(self.cameras),
            "dims": [self._state_dim, self._action_dim],
            "seed": self._seed,
        }
        return hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()[:16]

    def agreement_summary(self) -> tuple[str, dict[str, Any]]:
        """(fingerprint, summary) that `pi_loader.agree` compares between hosts."""
        return self.fingerprint, {
            "kind": "Mixture",
            "sources": {n: d.agreement_summary()[1] for n, d in zip(self.names, self._sources, strict=True)},
            "counts": self.counts,
            "seed": self._seed,
        }

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}={w:.3f}" for n, w in zip(self.names, self.weights, strict=True))
        return (
            f"Mixture({parts}, samples_per_epoch={len(self)}, seed={self._seed}, "
            f"fingerprint={self.fingerprint})"
        )

    # -- order --------------------------------------------------------------------------------

    def epoch_order(self, epoch: int, *, block_size: int | None = None) -> np.ndarray:
        """Flat sample numbers (see `samples`) of `epoch`, in order (length N): a global shuffle,
        or with `block_size` b (`Loader(block_size=b)`) runs of up to b neighbouring steps of one
        episode of one source kept together, the runs of every source shuffled together; each
        source's count is the same either way (`pi_loader.order._mixture`).

        Example:
            >>> mix.epoch_order(0, block_size=8)[:8]   # 8 neighbouring steps of one episode
        """
        epoch = check_seed("epoch", epoch)
        if block_size is not None and (
            isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1
        ):
            raise ValueError(f"block_size must be None (global shuffle) or an int >= 1, got {block_size!r}")
        if self._order is None or self._order[0] != (epoch, block_size):
            if block_size is None:
                src, local = mixture_order(self._lengths, self._counts, seed=self._seed, epoch=epoch)
            else:
                src, local = mixture_block_order(
                    self._episode_lengths, self._counts, block_size=block_size, seed=self._seed, epoch=epoch
                )
            self._order = ((epoch, block_size), self._offsets[src] + local)
        return self._order[1]

    def locate(self, flat: int) -> tuple[int, int]:
        """(source, the source's flat sample number) of a flat sample number."""
        s = int(np.searchsorted(self._offsets, flat, side="right") - 1)
        return s, int(flat - self._offsets[s])

    def __getitem__(self, index: int) -> dict[str, object]:
        order = self.epoch_order(self.epoch)
        batch = self.samples([int(order[index])])
        return {k: v[0] for k, v in batch.items()}

    def __iter__(self) -> Iterator[dict[str, object]]:
        for i in range(len(self)):
            yield self[i]

    # -- samples ------------------------------------------------------------------------------

    def samples(
        self, flat_indices: Sequence[int] | np.ndarray, *, allocate: ImageAllocator | None = None
    ) -> dict[str, np.ndarray]:
        """A batch of flat samples (`epoch_order` gives an epoch's), mapped to one spec (see the
        module docstring); the keys of a Dataset batch plus the masks and "source"."""
        flat = np.asarray(flat_indices, np.int64).reshape(-1)
        if flat.size == 0:
            raise ValueError("cannot build a batch of no samples")
        if (flat < 0).any() or (flat >= self.num_flat).any():
            raise IndexError(f"flat sample numbers must be in [0, {self.num_flat}), got {flat.tolist()[:8]}")
        src = np.searchsorted(self._offsets, flat, side="right") - 1
        b = len(flat)
        out: dict[str, np.ndarray] = {"source": src.astype(np.int32)}
        parts: list[tuple[np.ndarray, dict[str, np.ndarray], int]] = []
        for s in np.unique(src):
            rows = np.flatnonzero(src == s)
            parts.append((rows, self._sources[s].samples(flat[rows] - self._offsets[s]), int(s)))
        for key in ("episode_id", "step"):
            first = parts[0][1][key]
            out[key] = np.empty(b, dtype=first.dtype if key == "step" else object)
            for rows, batch, _ in parts:
                out[key][rows] = batch[key]
        out["episode_id"] = out["episode_id"].astype(np.str_)
        for key, width in (("observation.state", self._state_dim), ("action", self._action_dim)):
            shape = parts[0][1][key].shape[1:-1]
            values = np.zeros((b, *shape, width), np.float32)
            pad = np.ones((b, width), bool)
            for rows, batch, _ in parts:
                d = batch[key].shape[-1]
                values[rows, ..., :d] = batch[key]
                pad[rows, :d] = False
            out[key] = values
            out[f"{key}_dim_is_pad" if key == "action" else "observation.state_dim_is_pad"] = pad
        for key in {k for _, batch, _ in parts for k in batch} - set(out):
            if key.startswith(IMAGE_KEY_PREFIX) or key in _PER_SAMPLE_KEYS:
                continue
            if all(key in batch for _, batch, _ in parts):
                first = parts[0][1][key]
                text = first.dtype.kind in "US"  # strings of other widths in other sources
                merged = np.empty((b, *first.shape[1:]), object if text else first.dtype)
                for rows, batch, _ in parts:
                    merged[rows] = batch[key]
                out[key] = merged.astype(np.str_) if text else merged
        for camera in self.cameras:
            key = f"{IMAGE_KEY_PREFIX}{camera}"
            shape = (b, *self._image_shapes[camera])
            images = allocate(key, shape) if allocate is not None else np.empty(shape, np.uint8)
            missing = np.ones(b, bool)
            for rows, batch, _ in parts:
                if key in batch:
                    images[rows] = batch[key]
                    missing[rows] = False
                else:
                    images[rows] = 0
            out[key] = images
            out[f"{key}_is_pad"] = missing
        return out

    def image_shapes(self) -> dict[str, tuple[int, ...]]:
        """One sample's image shape per image key (the mixture's cameras)."""
        return {f"{IMAGE_KEY_PREFIX}{c}": s for c, s in self._image_shapes.items()}

    @property
    def read_stats(self) -> dict[str, int]:
        """The sources' read counters, added up."""
        total: dict[str, int] = {}
        for d in self._sources:
            for key, value in d.read_stats.items():
                total[key] = total.get(key, 0) + value
        return total

    # -- statistics ---------------------------------------------------------------------------

    def source_norm_stats(self) -> dict[str, dict[str, NormStats]]:
        """Per source (by name), its own `Dataset.norm_stats()`: normalise a source's samples
        with its own statistics (the `source` key says which) where robots differ.

        Example:
            >>> mix.source_norm_stats()["pick-v1"]["action"].q01
        """
        return {n: d.norm_stats() for n, d in zip(self.names, self._sources, strict=True)}

    def norm_stats(self) -> dict[str, NormStats]:
        """Statistics of "observation.state" and "action" of the mixture distribution, each
        source counting in proportion to its weight (not its size; per dimension over the
        sources that have it), in the shape of `Dataset.norm_stats()`: mean/std/min/max exact,
        q01/q99 merged from every episode's quantile sketch within `rank_error_bound`
        (`pi_loader.samples._mixture_stats`). Read on the first call, then cached (call it before
        making a Loader). A source with episodes older than the sketches gives q01 = q99 = None
        (`require_quantiles()` says how many).

        Example:
            >>> q01, q99 = mix.norm_stats()["action"].require_quantiles()   # (widest action dim,)
        """
        cached = self.__dict__.get("_norm_stats")
        if cached is None:
            from pi_loader.samples._mixture_stats import mixture_norm_stats

            widths = {"observation.state": self._state_dim, "action": self._action_dim}
            cached = mixture_norm_stats(self._sources, self.weights, widths)
            self.__dict__["_norm_stats"] = cached
        return dict(cached)

    # -- helpers ------------------------------------------------------------------------------

    def _check_images(self) -> dict[str, tuple[int, ...]]:
        shapes: dict[str, tuple[int, ...]] = {}
        for name, d in zip(self.names, self._sources, strict=True):
            for key, shape in d.image_shapes().items():
                camera = key[len(IMAGE_KEY_PREFIX) :]
                if camera not in self.cameras:
                    continue
                if camera in shapes and shapes[camera] != tuple(shape):
                    raise ValueError(
                        f"camera {camera!r} has frames of {shapes[camera]} in one source and {tuple(shape)} "
                        f"in {name!r}: open the sources with one SampleSpec.resize (and frame_history)"
                    )
                shapes[camera] = tuple(shape)
        unknown = [c for c in self.cameras if c not in shapes]
        if unknown:
            raise ValueError(f"no source has cameras {unknown}; the sources have {sorted(shapes)}")
        return shapes

    @staticmethod
    def _dims(d: Dataset) -> tuple[int, int]:
        stats = d.stats
        return int(np.asarray(stats["observation.state"].mean).shape[-1]), int(
            np.asarray(stats["action"].mean).shape[-1]
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_order"] = None  # a pure function: recomputed where needed
        return state
