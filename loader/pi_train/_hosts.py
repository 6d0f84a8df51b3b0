"""Several hosts in one run: who is who (`HostPlan`, torchrun's variables, `group_from_env`);
the rendezvous that checks them is `pi_train._rendezvous`.

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
silently. So before the process group is used, `_rendezvous.handshake` has every rank publish what it
was told (rank, world size, hosts, node rank and the options every host must share, `AGREED`)
through the framework's own key-value store, and waits — at most `rendezvous_timeout_s` — for
all ranks; a missing rank, a duplicate rank or any difference raises `RendezvousError` on every
rank, naming the ranks and values and what to fix. The data itself is agreed afterwards as on
one host (`Dataset.shared`: rank 0 resolves the snapshot and sends it; `pi_loader.agree` fails
loudly on a host that opened anything else).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from pi_train._config import ProcessGroup

TIMEOUT_ENV = "PILAKE_RENDEZVOUS_TIMEOUT"
# 300 s: hosts of one job start within a minute or two of each other (image pulls, scheduling);
# longer than that, something is misconfigured and an error beats a silent wait.
DEFAULT_TIMEOUT_S = 300.0


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
