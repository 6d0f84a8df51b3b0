"""A misconfigured rendezvous is an error on every rank within the timeout, never a hang: an
unreachable coordinator, a rank that never comes, hosts told other world sizes or options, a
rank claimed twice. torch through its real TCPStore (ranks as threads of this process), JAX
through its real coordination service (ranks as processes: one JAX client per process).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pi_train import ProcessGroup, RendezvousError, TrainConfig
from pi_train._launch import free_port
from pi_train._rendezvous import host_record, torch_store

from tests.train.conftest import REPO, child_env

TIMEOUT_S = 2.0


def _group(rank: int, world: int, port: int, **changes: Any) -> ProcessGroup:
    return ProcessGroup(rank=rank, world_size=world, port=port, rendezvous_timeout_s=TIMEOUT_S, **changes)


def _join(ranks: list[tuple[ProcessGroup, TrainConfig]]) -> list[BaseException | None]:
    """Each (group, config) joins the TCPStore rendezvous on its own thread; their outcomes."""
    outcomes: list[BaseException | None] = [None] * len(ranks)
    stores: list[Any] = []

    def run(i: int, group: ProcessGroup, config: TrainConfig) -> None:
        try:
            stores.append(torch_store(group, host_record(config, group)))
        except BaseException as err:  # collected and asserted on by the test
            outcomes[i] = err

    threads = [threading.Thread(target=run, args=(i, g, c)) for i, (g, c) in enumerate(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10 * TIMEOUT_S + 30)  # bounded: a hang fails the assert below
    assert not any(t.is_alive() for t in threads), "a rank still waits past the rendezvous timeout"
    return outcomes


CONFIG = TrainConfig(lake="lake", batch_size=4)


def test_ranks_that_agree_join() -> None:
    port = free_port()
    assert _join([(_group(r, 2, port), CONFIG) for r in (0, 1)]) == [None, None]


def test_an_unreachable_coordinator_is_an_error_within_the_timeout() -> None:
    (err,) = _join([(_group(1, 2, free_port()), CONFIG)])  # rank 1, nobody serving the port
    assert isinstance(err, RendezvousError)
    assert "could not reach the rendezvous at 127.0.0.1" in str(err) and "MASTER_ADDR" in str(err)
    (err,) = _join([(_group(1, 2, 29500, address="no-such-host.invalid"), CONFIG)])
    assert isinstance(err, RendezvousError) and "no-such-host.invalid" in str(err)


def test_a_rank_that_never_comes_is_named() -> None:
    port = free_port()
    outcomes = _join([(_group(r, 3, port), CONFIG) for r in (0, 1)])  # rank 2 never starts
    for err in outcomes:
        assert isinstance(err, RendezvousError) and "ranks [2] of 3 did not join" in str(err), err


def test_hosts_told_another_world_size_fail_at_once_on_every_rank() -> None:
    port = free_port()
    outcomes = _join([(_group(0, 2, port), CONFIG), (_group(1, 3, port), CONFIG)])
    assert all(isinstance(err, RendezvousError) for err in outcomes), outcomes
    assert "world_size 2 (here 3)" in str(outcomes[1]) or "world_size 3 (here 2)" in str(outcomes[1])
    assert "world_size" in str(outcomes[0])


def test_hosts_launched_with_other_options_name_them() -> None:
    port = free_port()
    other = TrainConfig(lake="elsewhere", batch_size=8, workers=3)  # lake and workers are per host
    outcomes = _join([(_group(0, 2, port), CONFIG), (_group(1, 2, port), other)])
    assert all(isinstance(err, RendezvousError) for err in outcomes), outcomes
    assert all("batch_size=" in str(err) and "lake" not in str(err).split("(")[0] for err in outcomes)
    assert "workers" not in str(outcomes[0])


def test_a_rank_claimed_twice_is_refused() -> None:
    port = free_port()
    outcomes = _join(
        [(_group(0, 2, port), CONFIG), (_group(1, 2, port), CONFIG), (_group(1, 2, port), CONFIG)]
    )
    refused = [err for err in outcomes if err is not None]
    assert refused and all(isinstance(e, RendezvousError) for e in refused)
    assert any("rank 1 was claimed by 2 processes" in str(e) for e in refused)


_JAX_RANK = """
import sys
from pi_train import ProcessGroup, RendezvousError, TrainConfig
from pi_train._rendezvous import host_record, jax_initialize
rank, world, port, batch = map(int, sys.argv[1:5])
group = ProcessGroup(rank=rank, world_size=world, port=port, rendezvous_timeout_s=2.0)
try:
    jax_initialize(group, host_record(TrainConfig(lake="lake", framework="jax", batch_size=batch), group))
except RendezvousError as err:
    print("RendezvousError:", err, flush=True)
    import os
    os._exit(3)  # no jax.distributed shutdown barrier: the other rank is gone
print("joined", flush=True)
"""


def _jax_ranks(tmp_path: Path, *ranks: tuple[int, int, int]) -> list[subprocess.CompletedProcess[str]]:
    script = tmp_path / "jax_rank.py"
    script.write_text(_JAX_RANK)
    port = free_port()
    env = dict(child_env(), JAX_PLATFORMS="cpu")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(w), str(port), str(b)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r, w, b in ranks
    ]
    done = []
    for p in procs:
        out, _ = p.communicate(timeout=120)  # bounded: a hang fails here
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out))
    return done


def test_jax_an_unreachable_coordinator_is_an_error_not_an_abort(tmp_path: Path) -> None:
    (rank1,) = _jax_ranks(tmp_path, (1, 2, 4))
    assert rank1.returncode == 3, rank1.stdout[-2000:]  # JAX alone would abort (SIGABRT, 134)
    assert "could not reach the coordinator at 127.0.0.1" in rank1.stdout


@pytest.mark.parametrize(
    ("ranks", "message"),
    [(((0, 2, 4), (1, 2, 8)), "batch_size="), (((0, 2, 4), (1, 3, 4)), "world_size")],
)
def test_jax_hosts_that_disagree_fail(
    tmp_path: Path, ranks: tuple[tuple[int, int, int], ...], message: str
) -> None:
    done = _jax_ranks(tmp_path, *ranks)
    assert all(d.returncode != 0 for d in done), [d.stdout[-2000:] for d in done]
    assert message in done[0].stdout, done[0].stdout[-2000:]
