"""The rendezvous of a run's processes, checked and bounded (see `pi_train._hosts` for the why).

Every rank publishes who it was told it is and the options every host must share (`AGREED`)
through the framework's own key-value store (torch's TCPStore on MASTER_ADDR:MASTER_PORT, JAX's
coordination service), then waits at most `rendezvous_timeout_s` for all the others; a missing
rank, a rank claimed twice, an unreachable coordinator or any difference is a `RendezvousError`
on every rank that names the ranks, the values and what to fix, instead of a hang.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pi_train._config import ProcessGroup, TrainConfig
from pi_train._errors import PiTrainError

_POLL_S = 0.05


class RendezvousError(PiTrainError):
    """The processes of a run could not join as one: a host or rank missing after the timeout,
    the coordinator unreachable, a rank claimed twice, or hosts launched with other options.

    Example:
        >>> raise RendezvousError("ranks [2, 3] of 4 did not join the rendezvous within 300 s: ...")
    """


# TrainConfig fields every host must share: they decide the global batch, the order, the model,
# the optimizer and the steps at which collectives happen. Paths, workers, threads and devices
# are per host (a host's own disks and cores).
AGREED: tuple[str, ...] = (
    "framework",
    "steps",
    "sql",
    "dataset",
    "mix",
    "checkpoint_every",
    "resume",
    "batch_size",
    "seed",
    "learning_rate",
    "loss",
    "normalization",
    "cameras",
    "action_horizon",
    "image_size",
    "log_every",
)


# -- the handshake -----------------------------------------------------------------------------


class KeyValue(Protocol):
    """The framework's rendezvous store as the handshake needs it (torch TCPStore, JAX's
    coordination service)."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> str | None:
        """The value, or None when the key is not there (yet); never blocks."""

    def add(self, key: str, amount: int) -> int: ...


def host_record(config: TrainConfig, group: ProcessGroup) -> dict[str, Any]:
    """What a rank publishes: who it was told it is, and the options every host must share."""
    options = {name: getattr(config, name) for name in AGREED}
    return {
        "rank": group.rank,
        "world_size": group.world_size,
        "local_world_size": group.local_world_size,
        "node_rank": group.node_rank,
        "host": os.uname().nodename,
        "options": json.loads(json.dumps(options)),  # tuples as lists, as every rank sees them
    }


def _differences(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    out = [
        f"{key} {theirs.get(key)!r} (here {mine.get(key)!r})"
        for key in ("world_size", "local_world_size")
        if mine.get(key) != theirs.get(key)
    ]
    a, b = mine.get("options", {}), theirs.get("options", {})
    keys = sorted(set(a) | set(b))
    out += [f"{key}={b.get(key)!r} (here {a.get(key)!r})" for key in keys if a.get(key) != b.get(key)]
    return out


def handshake(
    kv: KeyValue, record: Mapping[str, Any], timeout_s: float, *, prefix: str = "pilake/rendezvous"
) -> list[dict[str, Any]]:
    """Publish `record` (see `host_record`) and wait for every rank's; returns them in rank order.

    Raises:
        RendezvousError: on every rank, within `timeout_s`: a rank that did not join, a rank
            claimed by two processes, or a rank told another world size or other options.

    Example:
        >>> records = handshake(TorchKeyValue(store), host_record(config, group), 300)
    """
    rank, world = int(record["rank"]), int(record["world_size"])
    abort_key = f"{prefix}/abort"

    def fail(message: str) -> RendezvousError:
        kv.set(abort_key, message)
        return RendezvousError(message)

    claims = kv.add(f"{prefix}/claim/{rank}", 1)
    if claims > 1:
        raise fail(
            f"rank {rank} was claimed by {claims} processes (this one on host {record['host']!r}, "
            f"node rank {record['node_rank']}): give each host its own --node-rank 0..nnodes-1"
        )
    kv.set(f"{prefix}/join/{rank}", json.dumps(record))
    deadline = time.monotonic() + timeout_s
    records: dict[int, dict[str, Any]] = {}
    # rank 0 first: it always exists, so a host told another world size fails at once
    for wanted in (range(1), range(world)):
        while True:
            told = kv.get(abort_key)
            if told is not None:
                raise RendezvousError(f"another rank ended the rendezvous: {told}")
            for r in wanted:
                if r not in records and (text := kv.get(f"{prefix}/join/{r}")) is not None:
                    records[r] = json.loads(text)
                    if r != rank and (diff := _differences(record, records[r])):
                        raise fail(
                            f"rank {r} (host {records[r].get('host')!r}, node rank "
                            f"{records[r].get('node_rank')}) was started with {'; '.join(diff)}: every "
                            "host must be launched with the same --nnodes, --nproc and training options"
                        )
            missing = [r for r in wanted if r not in records]
            if not missing:
                break
            if time.monotonic() > deadline:
                raise fail(
                    f"ranks {missing} of {world} did not join the rendezvous at the coordinator within "
                    f"{timeout_s:g} s: start every host (--node-rank 0..nnodes-1) with the same "
                    "--master-addr/--master-port, reachable from all hosts (MASTER_ADDR, MASTER_PORT)"
                )
            time.sleep(_POLL_S)
    return [records[r] for r in range(world)]


class TorchKeyValue:
    """A torch.distributed Store as a `KeyValue`."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def set(self, key: str, value: str) -> None:
        self._store.set(key, value)

    def get(self, key: str) -> str | None:
        if not self._store.check([key]):
            return None
        return bytes(self._store.get(key)).decode()

    def add(self, key: str, amount: int) -> int:
        return int(self._store.add(key, amount))


class JaxKeyValue:
    """JAX's coordination-service client (`jax.distributed`) as a `KeyValue`."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def set(self, key: str, value: str) -> None:
        self._client.key_value_set(key, value, allow_overwrite=True)

    def get(self, key: str) -> str | None:
        try:
            return str(self._client.key_value_try_get(key))
        except Exception as err:  # NOT_FOUND comes as jaxlib's XlaRuntimeError
            if "NOT_FOUND" in str(err) or "not found" in str(err).lower():
                return None
            raise RendezvousError(
                f"lost the JAX coordinator during the rendezvous ({str(err).splitlines()[0][:200]}): "
                "host 0 (rank 0) probably failed; see its log"
            ) from err

    def add(self, key: str, amount: int) -> int:
        return int(self._client.key_value_increment(key, amount))


def torch_store(group: ProcessGroup, record: Mapping[str, Any]) -> Any:
    """The TCPStore of MASTER_ADDR:MASTER_PORT (rank 0 serves it unless torchrun's agent does),
    joined within the rendezvous timeout and checked by `handshake`; pass it to
    `init_process_group(store=...)`.

    Raises:
        RendezvousError: the coordinator unreachable, or the handshake's errors.
    """
    from datetime import timedelta

    import torch.distributed as dist

    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    timeout = timedelta(seconds=group.rendezvous_timeout_s)
    try:
        store = dist.TCPStore(
            group.address,
            group.port,
            None,
            group.rank == 0 and not agent,
            timeout=timeout,
            wait_for_workers=False,
        )
    except (RuntimeError, ValueError, OSError) as err:
        role = "serve" if group.rank == 0 else "reach"
        raise RendezvousError(
            f"rank {group.rank} could not {role} the rendezvous at {group.address}:{group.port} within "
            f"{group.rendezvous_timeout_s:g} s ({str(err).splitlines()[0]}): check MASTER_ADDR/--master-addr "
            "(host 0's address as this host reaches it), MASTER_PORT (free on host 0, open between hosts)"
        ) from err
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    handshake(TorchKeyValue(store), record, group.rendezvous_timeout_s, prefix=f"pilake/rendezvous/{restart}")
    return store


def jax_initialize(group: ProcessGroup, record: Mapping[str, Any]) -> None:
    """`jax.distributed.initialize` at MASTER_ADDR:MASTER_PORT within the rendezvous timeout,
    then `handshake` over JAX's coordination service.

    Raises:
        RendezvousError: the coordinator unreachable, or the handshake's errors.
    """
    import jax
    from jax._src import distributed

    if group.rank != 0:
        # JAX aborts the process (a C++ fatal error, no exception) when the coordinator stays
        # out of reach past its timeout; look for it first, so this is an error that says why.
        _wait_reachable(group)
    try:
        jax.distributed.initialize(
            f"{group.address}:{group.port}",
            num_processes=group.world_size,
            process_id=group.rank,
            initialization_timeout=max(1, math.ceil(group.rendezvous_timeout_s)),
        )
    except Exception as err:  # jaxlib raises its own XlaRuntimeError (DEADLINE_EXCEEDED, ...)
        raise RendezvousError(
            f"rank {group.rank} of {group.world_size} could not join jax.distributed at "
            f"{group.address}:{group.port} within {group.rendezvous_timeout_s:g} s "
            f"({str(err).splitlines()[0][:300]}): check MASTER_ADDR/--master-addr, MASTER_PORT, and "
            "that every host runs the same --nnodes/--nproc with its own --node-rank"
        ) from err
    client = distributed.global_state.client
    if client is None:  # pragma: no cover - initialize succeeded, so JAX has a client
        raise RendezvousError("jax.distributed.initialize returned without a coordination client")
    handshake(JaxKeyValue(client), record, group.rendezvous_timeout_s)


def _wait_reachable(group: ProcessGroup) -> None:
    """Wait until MASTER_ADDR:MASTER_PORT accepts a TCP connection, or `RendezvousError`."""
    deadline = time.monotonic() + group.rendezvous_timeout_s
    last: OSError | None = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(
                (group.address, group.port), timeout=min(2.0, group.rendezvous_timeout_s)
            ):
                return
        except OSError as err:
            last = err
            time.sleep(0.2)
    raise RendezvousError(
        f"rank {group.rank} could not reach the coordinator at {group.address}:{group.port} within "
        f"{group.rendezvous_timeout_s:g} s ({last}): check MASTER_ADDR/--master-addr (host 0's address "
        "as this host reaches it), MASTER_PORT (open between hosts), and that host 0 was started"
    )


def agree_on_latest(gather: Callable[[Any], list[Any]], latest: int | None, directory: object) -> int | None:
    """The newest checkpoint step, the same on every rank, or `CheckpointError`: each host reads
    the checkpoint directory (a shared volume in a multi-host run); a host that sees another
    newest step (its own local disk, a stale mount) would resume from other weights or data.
    """
    from pi_train._errors import CheckpointError

    seen = gather(latest)
    if len(set(seen)) > 1:
        raise CheckpointError(
            f"the ranks see different newest checkpoints in {directory}: {seen} (by rank); a multi-host "
            "run needs checkpoint_dir (--checkpoint-dir) on storage every host shares"
        )
    return latest
