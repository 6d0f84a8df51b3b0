"""`launch`: a data-parallel run of N local processes, each `python -m pi_train CONFIG.json`.

Each process gets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
GROUP_RANK, MASTER_ADDR, MASTER_PORT; several hosts: one `launch` per host with its node rank),
so the same config also runs under `torchrun --nproc-per-node N -m pi_train CONFIG.json` or a
cluster launcher that sets them. If one process fails, the others are stopped: a synchronous
data-parallel run cannot go on without it, and they would wait in a collective until timeout.

A SIGTERM to the launcher (what Kubernetes sends to a container's first process) is passed on
to every rank, which then stop together at a checkpoint (`pi_train._stop`); the launcher waits
for them and returns 0 when they all exited 0.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from pi_train._config import TrainConfig
from pi_train._files import atomic_write
from pi_train._hosts import DEFAULT_TIMEOUT_S, HostPlan
from pi_train._stop import StopRequest


def free_port() -> int:
    """A TCP port free on loopback now (for the process group's coordinator)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(
    config: TrainConfig,
    nproc: int,
    *,
    env: Mapping[str, str] | None = None,
    python: str = sys.executable,
    module: str = "pi_train",
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    rendezvous_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> int:
    """Run `config` in `nproc` local processes (ranks 0..nproc-1) and wait for them.

    With `nnodes` > 1 this host is host `node_rank` of a multi-host run: its processes are
    ranks node_rank x nproc .. + nproc-1 of nnodes x nproc, and join the others at
    `master_addr:master_port` (host 0's address and a free port there; the same on every host)
    within `rendezvous_timeout_s` (see `pi_train._hosts`).

    Writes `<out_dir>/config.json` and starts each rank with it (`python -m MODULE CONFIG.json`;
    `module` is pi_train's entry point unless a wrapper of `pi_train.train` is given). Returns 0
    when every rank succeeded, else the first failing rank's exit code (the others are
    terminated). A SIGTERM meanwhile is passed on to every rank (see the module docstring).

    Example:
        >>> launch(TrainConfig(lake=".pilake/lake", framework="jax", steps=100), nproc=2)
        0
    """
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ValueError(f"nproc must be an int >= 1, got {nproc!r}")
    plan = HostPlan(nnodes, node_rank, nproc, master_addr, master_port, rendezvous_timeout_s)
    path = Path(config.out_dir) / "config.json"
    text = config.to_json().encode()
    atomic_write(path, lambda f: f.write(text))
    port = plan.master_port if plan.master_port is not None else free_port()
    base = dict(os.environ if env is None else env)
    procs = []
    for rank in range(nproc):
        rank_env = dict(base, **plan.rank_env(rank, port))
        procs.append(subprocess.Popen([python, "-m", module, str(path)], env=rank_env))
    failed = 0
    stop = StopRequest()  # its handler only notes the signal; this loop passes it on
    forwarded = False
    try:
        with stop.installed():
            # poll every process (not any(...), which stops at the first one still running and
            # would never see a later rank's failure)
            while [p.poll() for p in procs].count(None):
                codes = [p.returncode for p in procs if p.returncode not in (None, 0)]
                if codes:
                    failed = codes[0]
                    break
                if stop.signal_at is not None and not forwarded:
                    for p in procs:
                        if p.poll() is None:
                            p.send_signal(signal.SIGTERM)
                    forwarded = True
                time.sleep(0.05 if forwarded else 0.2)
        if forwarded:
            print(
                f"pi_train.launch: SIGTERM passed on to {nproc} processes; they exited "
                f"{[p.returncode for p in procs]} {stop.since_request()} s after it",
                flush=True,
            )
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=30)
            if p.poll() is None:
                p.kill()
                p.wait()
    return failed or next((p.returncode for p in procs if p.returncode), 0)
