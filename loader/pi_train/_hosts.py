"""Several hosts in one run: who is who (`HostPlan`, torchrun's variables) and a rendezvous that
checks them before the framework's own collectives start.

A multi-host run is N launches, one per host (`pilake train --nnodes N --node-rank K
--master-addr HOST0 --master-port P`, or torchrun / a cluster launcher that sets the same
variables). Each host starts its `--nproc` processes with torchrun's environment (RANK =
node_rank x nproc + local rank, WORLD_SIZE = nnodes x nproc, LOCAL_RANK, LOCAL_WORLD_SIZE,
GROUP_RANK, MASTER_ADDR, MASTER_PORT); every process then joins the framework's process group
(torch.distributed over a TCPStore on MASTER_ADDR:MASTER_PORT, or `jax.distributed` with that
address as the coordinator).

A framework left alone turns a misconfiguration into a hang: a rank that never comes, a host
launched with another WORLD_SIZE or batch size, two processes claiming one rank wait in the
store or the first collective until a 10-30 minute timeout, or train on different shards
silently. So before the process group is used, `handshake` has every rank publish what it was
told (rank, world size, hosts, node rank and the options every host must share, `AGREED`)
through the framework's own key-value store, and waits — at most `rendezvous_timeout_s` — for
all ranks; a missing rank, a duplicate rank or any difference raises `RendezvousError` on every
rank, naming the ranks and values and what to fix. The data itself is agreed afterwards as on
one host (`Dataset.shared`: rank 0 resolves the snapshot and sends it; `pi_loader.agree` fails
loudly on a host that opened anything else).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pi_train._config import ProcessGroup, TrainConfig
from pi_train._errors import PiTrainError


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
TIMEOUT_ENV = "PILAKE_RENDEZVOUS_TIMEOUT"
# 300 s: hosts of one job start within a minute or two of each other (image pulls, scheduling);
# longer than that, something is misconfigured and an error beats a silent wait.
DEFAULT_TIMEOUT_S = 300.0
_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class HostPlan:
    """This host's place in a run of `nnodes` hosts with `nproc_per_node` processes each.

    Args:
        nnodes: hosts in the run.
        node_rank: this host, 0..nnodes-1 (host 0 runs rank 0, which hosts the rendezvous).
        nproc_per_node: training processes on each host (the same on every host).
        master_addr: the address of host 0 as the other hosts reach it.
        master_port: the rendezvous port on host 0; None: a free local port (one host only).
        rendezvous_timeout_s: how long a process waits for all others to join, then fails.

    Raises:
        ValueError: a value out of range (the message names it and the fix).

    Example:
        >>> HostPlan(nnodes=2, node_rank=1, nproc_per_node=4, master_addr="10.0.0.5", master_port=29500)
    """

    nnodes: int = 1
    node_rank: int = 0
    nproc_per_node: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    rendezvous_timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        _check_int("nnodes", self.nnodes, 1)
        _check_int("nproc_per_node", self.nproc_per_node, 1)
        _check_int("node_rank", self.node_rank, 0)
        if self.node_rank >= self.nnodes:
            raise ValueError(
                f"node_rank must be in 0..{self.nnodes - 1} (nnodes={self.nnodes}), got {self.node_rank}: "
                "number the hosts 0..nnodes-1, host 0 being MASTER_ADDR"
            )
        if not isinstance(self.master_addr, str) or not self.master_addr.strip():
            raise ValueError(f"master_addr must be host 0's address, got {self.master_addr!r}")
        if self.master_port is not None:
            _check_port(self.master_port)
        elif self.nnodes > 1:
            raise ValueError(
                f"a run of nnodes={self.nnodes} hosts needs master_port (--master-port or "
                "MASTER_PORT): the same free port of host 0 on every host"
            )
        _check_timeout(self.rendezvous_timeout_s)

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def rank_env(self, local_rank: int, port: int) -> dict[str, str]:
        """torchrun's variables for local process `local_rank` of this host (plus the timeout).

        Example:
            >>> plan = HostPlan(nnodes=2, node_rank=1, nproc_per_node=2, master_port=29500)
            >>> plan.rank_env(1, 29500)["RANK"]
            '3'
        """
        return {
            "RANK": str(self.node_rank * self.nproc_per_node + local_rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(self.nproc_per_node),
            "GROUP_RANK": str(self.node_rank),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(port),
            TIMEOUT_ENV: repr(float(self.rendezvous_timeout_s)),
        }


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def _check_port(port: object) -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"the rendezvous port must be an int in 1..65535, got {port!r}")


def _check_timeout(value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= 86400
    ):
        raise ValueError(f"rendezvous_timeout_s must be seconds in (0, 86400], got {value!r}")


def _env_int(env: Mapping[str, str], name: str, default: int | None, low: int) -> int:
    text = env.get(name)
    if text is None or (not text.strip() and default is not None):
        if default is None:
            raise ValueError(f"{name} is not set: the launcher must set it (pilake train or torchrun do)")
        return default
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise ValueError(
            f"{name} must be a whole number >= {low}, got {text!r}: check the launcher's environment"
        ) from None
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {text!r}: check the launcher's environment")
    return value


def group_from_env(environ: Mapping[str, str] | None = None) -> ProcessGroup:
    """This process's `ProcessGroup` from torchrun's variables (what `launch` sets).

    RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; the host's rank is GROUP_RANK
    (torchrun) or NODE_RANK, else RANK // LOCAL_WORLD_SIZE; `PILAKE_RENDEZVOUS_TIMEOUT` seconds.

    Raises:
        ValueError: a variable that is not what it must be (named, with its value).

    Example:
        >>> group_from_env({"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29500"}).rank
        1
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    rank = _env_int(env, "RANK", 0, 0)
    world = _env_int(env, "WORLD_SIZE", 1, 1)
    local_world = _env_int(env, "LOCAL_WORLD_SIZE", 1, 1)
    port = _env_int(env, "MASTER_PORT", 29500, 1)
    if port > 65535:
        raise ValueError(f"MASTER_PORT must be a TCP port in 1..65535, got {env.get('MASTER_PORT')!r}")
    address = env.get("MASTER_ADDR", "127.0.0.1").strip()
    if not address or any(c.isspace() or not c.isprintable() for c in address):
        raise ValueError(
            f"MASTER_ADDR must be host 0's address (e.g. 10.0.0.5), got {env.get('MASTER_ADDR')!r}"
        )
    if rank >= world:
        raise ValueError(
            f"RANK must be < WORLD_SIZE={world}, got RANK={rank}: check the launcher's environment"
        )
    if world % local_world:
        raise ValueError(
            f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local_world}: every host "
            "must run the same number of processes"
        )
    nnodes = world // local_world
    node_key = "GROUP_RANK" if "GROUP_RANK" in env else "NODE_RANK"
    node_rank = _env_int(env, node_key, rank // local_world, 0)
    if node_rank >= nnodes:
        raise ValueError(
            f"{node_key}={node_rank} is out of range for {nnodes} hosts (WORLD_SIZE={world} / "
            f"LOCAL_WORLD_SIZE={local_world}): number the hosts 0..{nnodes - 1}"
        )
    timeout_text = env.get(TIMEOUT_ENV, "").strip()
    try:
        timeout = float(timeout_text) if timeout_text else DEFAULT_TIMEOUT_S
        _check_timeout(timeout)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV} must be seconds in (0, 86400], got {timeout_text!r}") from None
    return ProcessGroup(
        rank=rank,
        world_size=world,
        address=address,
        port=port,
        local_world_size=local_world,
        node_rank=node_rank,
        rendezvous_timeout_s=timeout,
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
            raise

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
