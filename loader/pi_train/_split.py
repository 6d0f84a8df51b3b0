"""The held-out split of a run: which episodes are scored, never trained on.

Two ways, both by episode (samples of one episode never sit on both sides):

- a fraction by hash: episode `e` is held out when `split_hash(e) < fraction`, where
  `split_hash(e)` is the first 8 bytes of blake2b(SPLIT_SALT + "\\0" + e) as an unsigned
  big-endian integer over 2**64. It depends on the id and the salt only: the same on every
  process, machine and run, whatever else the selection holds, and an episode added later never
  moves another across the line. Raising the fraction only adds episodes to the held-out side.
- a dataset pin (`--eval-dataset PIN`): the pin's episodes are held out; the training side is
  the run's selection without them (matched by episode_id).

`split_selection` applies either to the run's opened selection and returns the training side
(a `Dataset` of the same pinned table versions, fewer episodes) and the held-out `Dataset`.
The run's `snapshot.json` keeps the whole selection: a resumed run splits it again, identically.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pi_loader import Dataset, Mixture, SampleSpec, Snapshot

from pi_train._errors import EvalError
from pi_train._files import atomic_write

if TYPE_CHECKING:
    from pi_train._config import TrainConfig

# Part of the split's definition: changing it moves episodes between the sides (a new split).
SPLIT_SALT = "pi-lake.eval-split/1"
SPLIT_FORMAT = "pi_train.eval_split/1"


def split_hash(episode_id: str, salt: str = SPLIT_SALT) -> float:
    """Where `episode_id` falls in [0, 1): blake2b(salt + "\\0" + id), 8 bytes over 2**64.

    Example:
        >>> split_hash("r1-000001") < 0.05    # held out at --eval-fraction 0.05?
        False
    """
    digest = hashlib.blake2b(f"{salt}\0{episode_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def check_fraction(fraction: object) -> float:
    """`fraction` as a float in (0, 1), or EvalError naming it."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0.0 < float(fraction) < 1.0:
        raise EvalError(
            f"eval_fraction must be a number strictly between 0 and 1, got {fraction!r}: "
            "pass e.g. --eval-fraction 0.05 to hold out about 5% of the episodes"
        )
    return float(fraction)


def held_out_ids(episode_ids: Iterable[str], fraction: float, salt: str = SPLIT_SALT) -> tuple[str, ...]:
    """The ids of `episode_ids` held out at `fraction` (sorted, no duplicates).

    Example:
        >>> held_out_ids(["a", "b", "c"], 0.5)
        ('b',)
    """
    fraction = check_fraction(fraction)
    return tuple(sorted({e for e in episode_ids if split_hash(e, salt) < fraction}))


@dataclass(frozen=True, slots=True)
class EvalSplit:
    """The two sides of a run's selection.

    Attributes:
        train: the training side (the run's selection less the held-out episodes).
        held_out: the held-out side (None: the run has no evaluation).
        how: {"fraction": f, "salt": ...} or {"dataset": PIN}, as recorded in `eval_split.json`.
    """

    train: Dataset | Mixture
    held_out: Dataset | None
    how: dict[str, Any]


def _subset(
    ds: Dataset, ids: Sequence[str], spec: SampleSpec, seed: int, catalog: str | None, cache: Any = None
) -> Dataset:
    """`ds`'s snapshot restricted to `ids`: same table versions, fewer episodes, the same disk
    cache (an s3:// lake's training side must not read past the node-local cache)."""
    whole = ds.snapshot
    keep = set(ids)
    pairs = [(e, a) for e, a in zip(whole.episode_ids, whole.attempt_ids, strict=True) if e in keep]
    snapshot = Snapshot(
        lake_root=whole.lake_root,
        table_versions=whole.table_versions,
        episode_ids=tuple(e for e, _ in pairs),
        attempt_ids=tuple(a for _, a in pairs),
        sql=whole.sql,
        created_at_ns=whole.created_at_ns,
    )
    return Dataset(ds.lake, snapshot=snapshot, spec=spec, seed=seed, catalog=catalog, cache=cache)


def open_pin(
    lake: Any, pin: str, spec: SampleSpec, catalog: str | None, seed: int = 0, cache: Any = None
) -> Dataset:
    """The dataset pin (or catalog snapshot) `pin`, or EvalError saying how to list them."""
    try:
        return Dataset(lake, snapshot=pin, spec=spec, seed=seed, catalog=catalog, cache=cache)
    # the loader's, the catalog's (a snapshot name there) or a bad name: the user's input, said so
    except Exception as err:
        raise EvalError(
            f"cannot open the evaluation dataset {pin!r} ({type(err).__name__}: {err}). "
            "List the lake's pins with "
            "`pilake dataset list`, or create one with `pilake dataset create NAME --sql ...`"
        ) from err


def split_selection(
    ds: Dataset | Mixture,
    *,
    spec: SampleSpec,
    seed: int,
    catalog: str | None,
    eval_fraction: float | None = None,
    eval_dataset: str | None = None,
    cache: Any = None,
) -> EvalSplit:
    """Split the run's opened selection `ds` (see the module doc); neither option: no split.

    Raises:
        EvalError: both options; a mixture; an unknown pin; a split that leaves either side empty.

    Example:
        >>> split = split_selection(ds, spec=ds.spec, seed=0, catalog=None, eval_fraction=0.1)
        >>> set(split.train.episode_ids) & set(split.held_out.episode_ids)
        set()
    """
    if eval_fraction is None and eval_dataset is None:
        return EvalSplit(train=ds, held_out=None, how={})
    if eval_fraction is not None and eval_dataset is not None:
        raise EvalError("pass eval_fraction or eval_dataset, not both")
    if isinstance(ds, Mixture):
        raise EvalError(
            "a held-out split of a --mix run is not implemented: hold the episodes out of the "
            "pins you mix, and score the checkpoint with `pilake eval CHECKPOINT --dataset PIN`"
        )
    everything = ds.episode_ids
    if eval_fraction is not None:
        fraction = check_fraction(eval_fraction)
        held = held_out_ids(everything, fraction)
        if not held or len(held) == len(everything):
            side = "no episode" if not held else "every episode"
            raise EvalError(
                f"eval_fraction={fraction} holds out {side} of the selection's {len(everything)}: "
                "choose another fraction, select more episodes, or name a pin with --eval-dataset"
            )
        held_ds = _subset(ds, held, spec, seed, catalog, cache)
        how: dict[str, Any] = {"fraction": fraction, "salt": SPLIT_SALT}
    else:
        assert eval_dataset is not None  # one of the two, checked above
        held_ds = open_pin(ds.lake, eval_dataset, spec, catalog, seed, cache)
        held = held_ds.episode_ids
        how = {"dataset": eval_dataset, "fingerprint": held_ds.snapshot.fingerprint}
    removed = set(held)
    train_ids = [e for e in everything if e not in removed]
    if not train_ids:
        raise EvalError(
            f"the held-out set ({how}) covers all {len(everything)} episodes of the selection: "
            "nothing is left to train on; select more episodes or hold out fewer"
        )
    train_ds = ds if len(train_ids) == len(everything) else _subset(ds, train_ids, spec, seed, catalog, cache)
    return EvalSplit(train=train_ds, held_out=held_ds, how=how)


def record_split(split: EvalSplit, out: Path) -> None:
    """`<out>/eval_split.json`: how the split was made and both sides' episode ids."""
    if split.held_out is None:
        return
    train = split.train
    record = {
        "format": SPLIT_FORMAT,
        **split.how,
        "held_out": list(split.held_out.episode_ids),
        # with the ids, what a live run reads beyond its snapshot (GC keeps it: pi_jobs.ops)
        "held_out_attempts": list(split.held_out.snapshot.attempt_ids),
        "train": list(train.episode_ids) if isinstance(train, Dataset) else None,
    }
    text = json.dumps(record, indent=1).encode()
    atomic_write(out / "eval_split.json", lambda f: f.write(text))


def eval_split(
    config: TrainConfig, ds: Dataset | Mixture, out: Path, rank0: bool, cache: Any = None
) -> EvalSplit:
    """The run's split as `config` asks (`eval_fraction` / `eval_dataset`), recorded by rank 0
    in `<out>/eval_split.json`; every rank computes the same one (a hash, or one pin). Both
    sides read through `cache` (the run's CacheConfig, None: none), as the whole selection does.

    Example:
        >>> split = eval_split(TrainConfig(lake="lake", eval_fraction=0.05), ds, Path("run"), rank0=True)
    """
    spec = SampleSpec(cameras=config.cameras, action_horizon=config.action_horizon, resize=config.image_size)
    split = split_selection(
        ds,
        spec=spec,
        seed=config.seed,
        catalog=config.catalog,
        eval_fraction=config.eval_fraction,
        eval_dataset=config.eval_dataset,
        cache=cache,
    )
    if rank0:
        record_split(split, out)
    return split


def check_eval_options(config: TrainConfig) -> None:
    """Validate a TrainConfig's eval options (called from its __post_init__).

    Raises:
        EvalError: a fraction outside (0, 1), an empty pin name, both, a mix with a split,
            eval_every < 0 or eval_samples < 1 (each message names the value).
    """
    if config.eval_fraction is not None:
        object.__setattr__(config, "eval_fraction", check_fraction(config.eval_fraction))
    if config.eval_dataset is not None and (
        not isinstance(config.eval_dataset, str) or not config.eval_dataset
    ):
        raise EvalError(f"eval_dataset must be a dataset pin's name, got {config.eval_dataset!r}")
    if config.eval_fraction is not None and config.eval_dataset is not None:
        raise EvalError(
            f"pass eval_fraction ({config.eval_fraction}) or eval_dataset ({config.eval_dataset!r}), not both"
        )
    if config.mix is not None and (config.eval_fraction is not None or config.eval_dataset is not None):
        raise EvalError(
            "a held-out split of a --mix run is not implemented: hold the episodes out of the pins "
            "you mix, and score checkpoints with `pilake eval CHECKPOINT --dataset PIN`"
        )
    every = config.eval_every
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise EvalError(f"eval_every must be an int >= 0 (0: no eval during training), got {every!r}")
    samples = config.eval_samples
    if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 1):
        raise EvalError(f"eval_samples must be an int >= 1 (or None: every held-out sample), got {samples!r}")
