"""Hosts that agree: every host of a run reads the same snapshot, in the same order.

Each host of a data-parallel run opens its own `Dataset`. Opened with SQL, each resolves the
selection itself, so a commit that lands between two hosts' opens gives them different episodes,
and since the order is a function of the selection, different orders: the shards then overlap
and miss samples without any error. This module closes that gap in two ways:

- `broadcast_snapshot` / `Dataset.shared`: rank 0 resolves the selection once and sends its
  `Snapshot` to the others, which open exactly that (the same as passing one `snapshot=` file
  or catalog name to every host).
- `agree` / `Dataset.check_agreement`: every host sends the fingerprint of what it opened (the
  snapshot's table versions and (episode, attempt) pairs, the sample spec and the seed; for a
  `Loader` also its shuffle options, shard count and position) to all the others, and every
  host raises `HostsDisagreeError` when they differ.

Both use `torch.distributed` when its process group is initialized, else JAX when it runs more
than one process (`jax.experimental.multihost_utils`), else there is one host and nothing to
exchange. Neither framework is imported here unless the caller already has (`sys.modules`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from pi_loader._errors import PiLoaderError
from pi_loader.selection._snapshot import Snapshot


class Agreeable(Protocol):
    """What hosts compare: a Dataset (samples) or a Loader (delivery) describes itself, so this
    module (below both) needs neither. `agreement_summary` returns (fingerprint, summary): the
    16-hex fingerprint hosts must share and a JSON-able summary shown when they do not."""

    def agreement_summary(self) -> tuple[str, dict[str, Any]]: ...


class OpenedDataset(Agreeable, Protocol):
    """What `open_shared` opens: something agreeable with the snapshot it read."""

    @property
    def snapshot(self) -> Snapshot: ...


BACKENDS = ("auto", "torch", "jax")
# Arguments of Dataset that choose the episodes; a host that opens rank 0's snapshot drops them.
_SELECTION_ARGUMENTS = ("sql", "sql_parameters", "episode_ids", "snapshot")

D = TypeVar("D", bound=OpenedDataset)


class HostsDisagreeError(PiLoaderError):
    """The hosts of a run opened different data (or options that give a different order).

    Attributes:
        rank: this host's rank.
        fingerprints: the fingerprint each rank opened, in rank order.
        summaries: what each rank opened, in rank order (versions, episode count, seed, ...).

    Example:
        >>> try:
        ...     ds.check_agreement()
        ... except HostsDisagreeError as err:
        ...     print(err.fingerprints)        # ['3f0c…', '3f0c…', 'b81d…', '3f0c…']
    """

    def __init__(
        self, message: str, *, rank: int, fingerprints: Sequence[str], summaries: Sequence[Mapping[str, Any]]
    ) -> None:
        super().__init__(message)
        self.rank = rank
        self.fingerprints = list(fingerprints)
        self.summaries = [dict(s) for s in summaries]


# -- fingerprints ------------------------------------------------------------------------------


def describe(obj: Agreeable | Snapshot) -> tuple[str, dict[str, Any]]:
    """(fingerprint, summary) of what a host opened: a Dataset, a Loader or a Snapshot.

    A Loader's fingerprint adds to its Dataset's what makes hosts step together: block size,
    drop_remainder, shard count, batches per epoch, epoch and position (compare them at start,
    before any batch, or right after `set_state`).
    """
    if isinstance(obj, Snapshot):
        return obj.fingerprint, {
            "kind": "Snapshot",
            "lake_root": obj.lake_root,
            "table_versions": dict(obj.table_versions),
            "episodes": len(obj.episode_ids),
            "episode_pairs": obj.fingerprint,
        }
    summary = getattr(obj, "agreement_summary", None)
    if summary is None:
        raise TypeError(f"agree needs a pi_loader Dataset, Loader or Snapshot, got {type(obj).__name__}")
    fingerprint, described = summary()
    return str(fingerprint), dict(described)


# -- the collectives -------------------------------------------------------------------------


class _Group:
    """The hosts of a run as one framework sees them: rank, size, all-gather and broadcast of
    JSON-able payloads."""

    def __init__(self, name: str, rank: int, size: int) -> None:
        self.name, self.rank, self.size = name, rank, size

    def all_gather(self, payload: Any) -> list[Any]:
        return [payload]

    def broadcast(self, payload: Any) -> Any:
        return payload


class _TorchGroup(_Group):
    def __init__(self, dist: Any, group: Any) -> None:
        super().__init__("torch.distributed", int(dist.get_rank(group)), int(dist.get_world_size(group)))
        self._dist, self._group = dist, group

    def all_gather(self, payload: Any) -> list[Any]:
        out: list[Any] = [None] * self.size
        self._dist.all_gather_object(out, payload, group=self._group)
        return out

    def broadcast(self, payload: Any) -> Any:
        box = [payload]
        src = 0 if self._group is None else int(self._dist.get_global_rank(self._group, 0))
        self._dist.broadcast_object_list(box, src=src, group=self._group)
        return box[0]


class _JaxGroup(_Group):
    def __init__(self, jax: Any) -> None:
        super().__init__("jax", int(jax.process_index()), int(jax.process_count()))
        from jax.experimental import multihost_utils

        self._utils = multihost_utils

    def all_gather(self, payload: Any) -> list[Any]:
        data = np.frombuffer(json.dumps(payload).encode(), np.uint8)
        lengths = np.asarray(self._utils.process_allgather(np.array([data.size], np.int32))).reshape(-1)
        padded = np.zeros(int(lengths.max()), np.uint8)
        padded[: data.size] = data
        rows = np.asarray(self._utils.process_allgather(padded)).reshape(self.size, -1)
        return [json.loads(bytes(row[:n]).decode()) for row, n in zip(rows, lengths.tolist(), strict=True)]

    def broadcast(self, payload: Any) -> Any:
        source = self.rank == 0
        data = np.frombuffer(json.dumps(payload).encode(), np.uint8) if source else np.zeros(0, np.uint8)
        length = self._utils.broadcast_one_to_all(np.array([data.size], np.int32), is_source=source)
        n = int(np.asarray(length).reshape(-1)[0])
        buffer = data if source else np.zeros(n, np.uint8)
        got = np.asarray(self._utils.broadcast_one_to_all(buffer, is_source=source)).astype(np.uint8)
        return json.loads(bytes(got[:n]).decode())


def _jax_is_multiprocess(jax: Any) -> bool:
    is_initialized = getattr(getattr(jax, "distributed", None), "is_initialized", None)
    if is_initialized is not None and is_initialized():
        return int(jax.process_count()) > 1
    # A TPU pod runs several processes without jax.distributed; only ask once JAX has started
    # its backends, so that asking never starts them before a later jax.distributed.initialize.
    try:
        from jax._src import xla_bridge

        started = bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        started = is_initialized is None
    return started and int(jax.process_count()) > 1


def hosts(backend: str = "auto", group: Any = None) -> _Group:
    """The hosts of this run: torch.distributed when initialized, else JAX with more than one
    process, else this process alone. `backend` forces one; `group` is a torch process group."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be 'auto', 'torch' or 'jax', got {backend!r}")
    dist: Any = sys.modules.get("torch.distributed")
    if backend == "torch" or (backend == "auto" and group is not None):
        if dist is None:
            import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            raise PiLoaderError(
                "backend='torch' needs torch.distributed initialized: call "
                "torch.distributed.init_process_group first"
            )
        return _TorchGroup(dist, group)
    if backend == "auto" and dist is not None and dist.is_available() and dist.is_initialized():
        return _TorchGroup(dist, None)
    jax: Any = sys.modules.get("jax")
    if backend == "jax":
        if jax is None:
            import jax
        return _JaxGroup(jax)
    if jax is not None and _jax_is_multiprocess(jax):
        return _JaxGroup(jax)
    return _Group("single process", 0, 1)


# -- agreement ---------------------------------------------------------------------------------


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


def _disagreement(
    rank: int, backend: str, fingerprints: Sequence[str], summaries: Sequence[Mapping[str, Any]]
) -> HostsDisagreeError:
    by_fingerprint: dict[str, list[int]] = {}
    for r, fp in enumerate(fingerprints):
        by_fingerprint.setdefault(fp, []).append(r)
    lines = []
    for fp, ranks in by_fingerprint.items():
        s = summaries[ranks[0]]
        shown = ", ".join(
            f"{k}={s[k]!r}"
            for k in ("table_versions", "episodes", "seed", "epoch", "position", "lake_root")
            if k in s
        )
        lines.append(f"  {_ranks(ranks)}: fingerprint {fp} ({shown})")
    keys = sorted({k for s in summaries for k in s})
    differ = [k for k in keys if len({json.dumps(s.get(k), sort_keys=True) for s in summaries}) > 1]
    data_differs = any(k in differ for k in ("table_versions", "episodes", "episode_pairs"))
    hint = (
        "The hosts opened different selections (e.g. each ran the SQL itself and a commit landed "
        "in between). Resolve the selection once and share it: open with "
        "`Dataset.shared(lake, sql=..., catalog=...)` (rank 0 resolves, the others open its "
        "snapshot), or pass the same `snapshot=` to every host (a file from "
        "`snapshot.save(path)` or a name from `snapshot.save_to_catalog(catalog, name)`) instead "
        "of re-running the SQL on each host."
        if data_differs
        else "Open the dataset and the loader with the same arguments on every host (and the same "
        "`set_state`, when resuming)."
    )
    return HostsDisagreeError(
        f"the {len(fingerprints)} hosts of this run ({backend}) opened different data or options "
        f"(this is rank {rank}):\n" + "\n".join(lines) + f"\nThey differ in: {', '.join(differ)}.\n" + hint,
        rank=rank,
        fingerprints=fingerprints,
        summaries=summaries,
    )


def agree(obj: Agreeable | Snapshot, *, backend: str = "auto", group: Any = None) -> str:
    """Check that every host of the run opened the same thing; returns the common fingerprint.

    Every host must call it (it is a collective: a host that never does makes the others wait
    for the framework's timeout). With torch.distributed it uses `all_gather_object` on `group`
    (default: the world; with NCCL, call `torch.cuda.set_device` first, or pass a gloo group);
    with JAX, `multihost_utils.process_allgather`; on a single process it only computes the
    fingerprint. `obj` is a Dataset (snapshot, spec, seed), a Loader (plus its shuffle options,
    shard count, batches per epoch, epoch and position) or a Snapshot.

    Raises:
        HostsDisagreeError: on every host, when any two hosts differ; it names the ranks, their
            fingerprints and what differs.

    Example:
        >>> torch.distributed.init_process_group("nccl")
        >>> ds = Dataset("/data/lake", snapshot="pick-v3", catalog="/data/catalog", seed=0)
        >>> loader = Loader(ds, batch_size=32, shard=ShardSpec.from_torch())
        >>> pi_loader.agree(loader)          # the same on every rank, or HostsDisagreeError
        '5be2c0a1d7e94f13'
    """
    fingerprint, summary = describe(obj)
    group_ = hosts(backend, group)
    if group_.size == 1:
        return fingerprint
    gathered = group_.all_gather({"fingerprint": fingerprint, "summary": summary})
    fingerprints = [str(g["fingerprint"]) for g in gathered]
    if len(set(fingerprints)) > 1:
        raise _disagreement(group_.rank, group_.name, fingerprints, [g["summary"] for g in gathered])
    return fingerprint


def broadcast_snapshot(snapshot: Snapshot | None, *, backend: str = "auto", group: Any = None) -> Snapshot:
    """Rank 0's `snapshot`, on every host: rank 0 passes the snapshot it resolved, the others
    pass None (what they pass is ignored). A collective: every host must call it.

    Example:
        >>> snap = Dataset(lake, sql=sql, catalog=cat).snapshot if rank == 0 else None
        >>> ds = Dataset(lake, snapshot=pi_loader.broadcast_snapshot(snap), spec=spec)
    """
    group_ = hosts(backend, group)
    if group_.rank == 0:
        if not isinstance(snapshot, Snapshot):
            problem = f"rank 0 must pass the Snapshot to share, got {type(snapshot).__name__}"
            if group_.size > 1:  # tell the others, who would wait for it
                group_.broadcast({"error": problem})
            raise TypeError(problem)
        if group_.size > 1:
            group_.broadcast({"snapshot": snapshot.to_json()})
        return snapshot
    message = group_.broadcast(None)
    if "error" in message:
        raise PiLoaderError(f"rank 0 shared no snapshot: {message['error']}")
    return Snapshot.from_json(str(message["snapshot"]))


def open_shared(
    factory: Callable[..., D],
    lake: Any,
    *,
    backend: str = "auto",
    group: Any = None,
    check: bool = True,
    **arguments: Any,
) -> D:
    """`Dataset.shared`: rank 0 opens `factory(lake, **arguments)` and broadcasts its snapshot;
    the other hosts open `factory(lake, snapshot=<rank 0's>, **the rest of arguments)`. Then,
    with `check`, every host checks the agreement. An error opening on any host is raised on
    every host (no host is left waiting in a collective)."""
    group_ = hosts(backend, group)
    if group_.size == 1:
        dataset = factory(lake, **arguments)
        return dataset
    dataset_or_none: D | None = None
    failure: BaseException | None = None
    if group_.rank == 0:
        try:
            dataset_or_none = factory(lake, **arguments)
            message: dict[str, Any] = {"snapshot": dataset_or_none.snapshot.to_json()}
        except Exception as err:
            failure, message = err, {"error": f"{type(err).__name__}: {err}"}
        group_.broadcast(message)
    else:
        message = group_.broadcast(None)
        if "error" not in message:
            rest = {k: v for k, v in arguments.items() if k not in _SELECTION_ARGUMENTS}
            try:
                shared = Snapshot.from_json(str(message["snapshot"]))
                dataset_or_none = factory(lake, snapshot=shared, **rest)
            except Exception as err:
                failure = err
    if "error" in message:
        if failure is not None:
            raise failure
        raise PiLoaderError(f"rank 0 could not open the dataset, so no host does: {message['error']}")
    # Every host says whether it opened, so that a failure on one is raised on all.
    if dataset_or_none is None or failure is not None:
        fingerprint, summary = "", {"error": f"{type(failure).__name__}: {failure}"}
    else:
        fingerprint, summary = describe(dataset_or_none)
    gathered = group_.all_gather({"fingerprint": fingerprint, "summary": summary})
    if failure is not None:
        raise failure
    failed = {r: g["summary"]["error"] for r, g in enumerate(gathered) if "error" in g["summary"]}
    if failed:
        raise PiLoaderError(f"rank 0's snapshot could not be opened on {_ranks(sorted(failed))}: {failed}")
    if dataset_or_none is None:  # unreachable: no failure means this host opened it
        raise PiLoaderError("the shared dataset was not opened")
    if check:
        fingerprints = [str(g["fingerprint"]) for g in gathered]
        if len(set(fingerprints)) > 1:
            raise _disagreement(group_.rank, group_.name, fingerprints, [g["summary"] for g in gathered])
    return dataset_or_none
