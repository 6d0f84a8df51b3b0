"""Hosts that agree: fingerprints, the agreement check and the shared snapshot on two real
processes (torch.distributed gloo, multi-process JAX on CPU), and `set_epoch` reaching
persistent torch DataLoader workers."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pi_loader import (
    Dataset,
    HostsDisagreeError,
    Loader,
    PiLoaderError,
    SampleSpec,
    ShardSpec,
    agree,
    broadcast_snapshot,
)
from pi_loader.order._order import SharedEpoch
from pi_loader.selection._agreement import _disagreement, describe, hosts

from tests.fixtures.lake_factory import FakeLake, write_lake
from tests.loader.selection.agreement_child import CAMERAS, SIZE, SPEC, STEPS

ROOT = Path(__file__).resolve().parents[3]
SPEC_LOADER = SampleSpec(cameras=("front", "wrist"), action_horizon=2)


# -- fingerprints ------------------------------------------------------------------------------


def test_fingerprint_names_the_data_spec_and_seed_not_the_epoch_or_the_mount(
    loader_lake: FakeLake, tmp_path: Path
) -> None:
    ds = Dataset(loader_lake.layout, spec=SPEC_LOADER, seed=3)
    fp = ds.fingerprint
    assert len(fp) == 16 and int(fp, 16) >= 0
    # the same snapshot opened on a copy of the lake (another mount) is the same data
    copy = shutil.copytree(loader_lake.layout.root, tmp_path / "copy")
    moved = Dataset(str(copy), snapshot=ds.snapshot, spec=SPEC_LOADER, seed=3)
    assert moved.snapshot.lake_root != ds.snapshot.lake_root and moved.fingerprint == fp
    # cameras=None resolves to the same cameras: the resolved spec is what counts
    assert Dataset(loader_lake.layout, spec=SampleSpec(action_horizon=2), seed=3).fingerprint == fp
    ds.set_epoch(4)
    assert ds.fingerprint == fp
    others = [
        Dataset(loader_lake.layout, spec=SPEC_LOADER, seed=4),
        Dataset(loader_lake.layout, spec=SampleSpec(cameras=("front", "wrist"), action_horizon=3), seed=3),
        Dataset(loader_lake.layout, spec=SPEC_LOADER, seed=3, episode_ids=loader_lake.episode_ids[:-1]),
    ]
    assert len({fp, *(o.fingerprint for o in others)}) == 4
    # the snapshot's own fingerprint (used by loader states) is unchanged: data only
    assert others[0].snapshot.fingerprint == ds.snapshot.fingerprint


def test_loader_fingerprint_adds_shuffle_shards_and_position(loader_lake: FakeLake) -> None:
    ds = Dataset(loader_lake.layout, spec=SPEC_LOADER, seed=3)
    base = dict(batch_size=4, shard=ShardSpec(0, 2))
    fp, summary = describe(Loader(ds, **base))  # type: ignore[arg-type]
    assert summary["dataset_fingerprint"] == ds.fingerprint and summary["kind"] == "Loader"
    # another shard index of the same run: the same fingerprint
    assert describe(Loader(ds, batch_size=4, shard=ShardSpec(1, 2)))[0] == fp
    variants = [
        Loader(ds, block_size=3, **base),  # type: ignore[arg-type]
        Loader(ds, drop_remainder=True, **base),  # type: ignore[arg-type]
        Loader(ds, batch_size=4, shard=ShardSpec(0, 3)),
        Loader(ds, batch_size=5, shard=ShardSpec(0, 2)),  # batches per epoch
    ]
    moved = Loader(ds, **base)  # type: ignore[arg-type]
    next(iter(moved))
    variants.append(moved)
    assert len({fp, *(describe(v)[0] for v in variants)}) == 6
    assert agree(Loader(ds, **base)) == fp  # type: ignore[arg-type]


def test_one_process_agrees_with_itself(loader_lake: FakeLake) -> None:
    ds = Dataset(loader_lake.layout, spec=SPEC_LOADER, seed=3)
    assert hosts().size == 1
    assert agree(ds) == ds.check_agreement() == ds.fingerprint
    assert agree(ds.snapshot) == ds.snapshot.fingerprint
    assert broadcast_snapshot(ds.snapshot) is ds.snapshot
    with pytest.raises(TypeError, match="rank 0 must pass the Snapshot"):
        broadcast_snapshot(None)
    shared = Dataset.shared(loader_lake.layout, spec=SPEC_LOADER, seed=3)
    assert isinstance(shared, Dataset) and shared.fingerprint == ds.fingerprint
    with pytest.raises(ValueError, match="backend must be"):
        agree(ds, backend="mpi")
    with pytest.raises(TypeError, match="Dataset, Loader or Snapshot"):
        agree("ds")  # type: ignore[arg-type]


def test_torch_backend_needs_an_initialized_process_group(loader_lake: FakeLake) -> None:
    pytest.importorskip("torch")
    ds = Dataset(loader_lake.layout, spec=SPEC_LOADER, seed=3)
    with pytest.raises(PiLoaderError, match="init_process_group"):
        ds.check_agreement(backend="torch")


def test_jax_branch_on_one_process(loader_lake: FakeLake) -> None:
    """The JAX collectives (process_allgather, broadcast_one_to_all) on a single process; the
    two-process run is `test_two_hosts[jax]`."""
    pytest.importorskip("jax")
    group = hosts("jax")
    assert (group.name, group.rank, group.size) == ("jax", 0, 1)
    payload = {"fingerprint": "0123456789abcdef", "summary": {"episodes": 5, "lake_root": "/é/lake"}}
    assert group.all_gather(payload) == [payload]
    assert group.broadcast(payload) == payload
    ds = Dataset(loader_lake.layout, spec=SPEC_LOADER, seed=3)
    assert agree(ds, backend="jax") == ds.fingerprint


def test_disagreement_names_the_ranks_and_what_differs() -> None:
    summaries = [
        {"table_versions": {"episodes": 3}, "episodes": 5, "seed": 0},
        {"table_versions": {"episodes": 4}, "episodes": 6, "seed": 0},
        {"table_versions": {"episodes": 3}, "episodes": 5, "seed": 0},
    ]
    err = _disagreement(1, "torch.distributed", ["aaaa", "bbbb", "aaaa"], summaries)
    text = str(err)
    assert "ranks 0, 2: fingerprint aaaa" in text and "rank 1: fingerprint bbbb" in text
    assert "They differ in: episodes, table_versions." in text
    assert "snapshot=" in text and "Dataset.shared" in text and "this is rank 1" in text
    assert isinstance(err, HostsDisagreeError) and isinstance(err, PiLoaderError)
    assert err.rank == 1 and err.fingerprints == ["aaaa", "bbbb", "aaaa"]
    seeds = _disagreement(0, "jax", ["a", "b"], [{"seed": 0}, {"seed": 1}])
    assert "They differ in: seed." in str(seeds) and "Dataset.shared" not in str(seeds)


# -- two hosts, for real -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module", params=["torch", "jax"])
def two_hosts(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Runs agreement_child as rank 0 and rank 1 of one run; returns their results."""
    backend = request.param
    pytest.importorskip("torch" if backend == "torch" else "jax")
    tmp = tmp_path_factory.mktemp(f"hosts_{backend}")
    lake = write_lake(tmp / "lake", episodes=3, steps=STEPS, cameras=CAMERAS, size=SIZE)
    snapshot = Dataset(lake.layout, spec=SPEC).snapshot.save(tmp / "snapshot.json")
    address = f"file://{tmp / 'rendezvous'}" if backend == "torch" else f"127.0.0.1:{_free_port()}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "JAX_PLATFORMS": "cpu",
        "OMP_NUM_THREADS": "1",
    }
    children, logs = [], []
    for rank in range(2):
        config = {
            "backend": backend,
            "rank": rank,
            "world": 2,
            "address": address,
            "lake": lake.layout.root,
            "catalog": str(tmp / "catalog"),
            "snapshot": str(snapshot),
            "out": str(tmp / "result"),
        }
        log = open(tmp / f"rank{rank}.log", "w")  # noqa: SIM115 (closed below)
        logs.append(log)
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.loader.selection.agreement_child", json.dumps(config)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    try:
        codes = [child.wait(timeout=300) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        for log in logs:
            log.close()
    output = "\n".join(f"--- rank {r}\n{(tmp / f'rank{r}.log').read_text()[-3000:]}" for r in range(2))
    assert codes == [0, 0], output
    results = [json.loads((tmp / f"result.{r}.json").read_text()) for r in range(2)]
    return {"backend": backend, "results": results, "snapshot": str(snapshot)}


def test_two_hosts_on_one_snapshot_agree(two_hosts: dict[str, Any]) -> None:
    r0, r1 = two_hosts["results"]
    name = {"torch": "torch.distributed", "jax": "jax"}[two_hosts["backend"]]
    assert r0["backend"] == r1["backend"] == name
    named = [r["named"] for r in (r0, r1)]
    assert named[0] == named[1]
    assert named[0]["fingerprint"] == named[0]["own"]
    from pi_loader import Snapshot

    assert named[0]["snapshot"] == Snapshot.load(two_hosts["snapshot"]).fingerprint


def test_two_hosts_that_raced_a_commit_both_raise(two_hosts: dict[str, Any]) -> None:
    r0, r1 = two_hosts["results"]
    race = [r0["race"], r1["race"]]
    assert [r["episodes"] for r in race] == [3, 4]  # rank 1 opened after the commit
    for rank, r in enumerate(race):
        assert r["error"] == "HostsDisagreeError", r
        assert r["rank"] == rank
        assert len(set(r["fingerprints"])) == 2
        assert "They differ in:" in r["message"] and "table_versions" in r["message"]
        assert "snapshot=" in r["message"] and "Dataset.shared" in r["message"]
    assert race[0]["fingerprints"] == race[1]["fingerprints"]
    for key in ("seed", "loader_epoch"):
        for r in (r0[key], r1[key]):
            assert r["error"] == "HostsDisagreeError", (key, r)
            assert "Dataset.shared" not in r["message"]
    assert "They differ in: seed" in r0["seed"]["message"]
    assert "epoch" in r0["loader_epoch"]["message"].split("They differ in:")[1]


def test_two_hosts_share_rank_0s_snapshot_while_the_lake_changes(two_hosts: dict[str, Any]) -> None:
    r0, r1 = two_hosts["results"]
    s0, s1 = r0["shared"], r1["shared"]
    assert s0["fingerprint"] == s1["fingerprint"]
    assert s0["episode_ids"] == s1["episode_ids"] == ["ep-000", "ep-001", "ep-002", "ep-005"]
    assert s0["versions"] == s1["versions"]
    assert s1["sql"] == "SELECT episode_id FROM episodes"  # recorded in the shared snapshot
    assert s1["latest_episodes"] == 5  # rank 1 committed ep-006 right before it opened
    assert s0["broadcast"] == s1["broadcast"]
    assert r0["no_snapshot"]["error"] == "TypeError" and r1["no_snapshot"]["error"] == "PiLoaderError"
    assert "rank 0 shared no snapshot" in r1["no_snapshot"]["message"]
    f0, f1 = r0["rank0_fails"], r1["rank0_fails"]
    assert f0["error"] == "PiLoaderError" and "not committed" in f0["message"]
    assert f1["error"] == "PiLoaderError" and "rank 0 could not open the dataset" in f1["message"]


# -- set_epoch reaches every copy --------------------------------------------------------------


def _read_after(epoch: Any, ready: Any, done: Any, out: Any) -> None:
    ready.set()
    done.wait(30)
    out.put(epoch.get())


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # the child touches no JAX
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_shared_epoch_reaches_copies_in_other_processes(method: str) -> None:
    epoch = SharedEpoch(0)
    assert epoch.shared
    same_process = pickle.loads(pickle.dumps(epoch))
    epoch.set(2)
    assert same_process.get() == 2
    same_process.set(3)  # a copy may set it too
    assert epoch.get() == 3
    ctx: Any = multiprocessing.get_context(method)
    ready, done, out = ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_read_after, args=(epoch, ready, done, out))
    child.start()
    assert ready.wait(60)
    epoch.set(7)  # after the child got its copy
    done.set()
    assert out.get(timeout=60) == 7
    child.join(30)
    with pytest.raises(ValueError):
        epoch.set(-1)


def test_a_copy_whose_cell_is_gone_keeps_its_own_value() -> None:
    epoch = SharedEpoch(4)
    data = pickle.dumps(epoch)
    del epoch  # the owner's cell closes
    orphan = pickle.loads(data)
    assert orphan.get() == 4 and not orphan.shared
    orphan.set(5)
    assert orphan.get() == 5
    # a cell of another SharedEpoch is never mistaken for this one (token check)
    other = SharedEpoch(9)
    state = pickle.loads(pickle.dumps(other)).__getstate__()
    state["token"] = b"\x00" * 8
    imposter = SharedEpoch.__new__(SharedEpoch)
    imposter.__setstate__(state)
    assert imposter.get() == 9 and not imposter.shared
    imposter.set(1)
    assert other.get() == 9


def _ids(loader: Any) -> list[tuple[str, int]]:
    out = []
    for batch in loader:
        out += [(str(e), int(s)) for e, s in zip(batch["episode_id"], batch["step"].tolist(), strict=True)]
    return out


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # the workers touch no JAX
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_set_epoch_reaches_persistent_torch_workers(loader_lake: FakeLake, method: str) -> None:
    torch = pytest.importorskip("torch")
    spec = SampleSpec(cameras=(), action_horizon=2)  # no video: the order is what is tested
    ds = Dataset(loader_lake.layout, spec=spec, seed=5)
    kw = {"batch_size": 4, "num_workers": 2, "multiprocessing_context": method}
    persistent = torch.utils.data.DataLoader(ds, persistent_workers=True, **kw)
    epoch0 = _ids(persistent)
    assert epoch0 == [ds.locate(i) for i in range(len(ds))]
    ds.set_epoch(1)
    epoch1 = _ids(persistent)
    fresh = Dataset(loader_lake.layout, spec=spec, seed=5)
    fresh.set_epoch(1)
    fresh_epoch1 = _ids(torch.utils.data.DataLoader(fresh, **{**kw, "num_workers": 1}))
    assert epoch1 != epoch0 and sorted(epoch1) == sorted(epoch0)
    assert epoch1 == fresh_epoch1 == [ds.locate(i) for i in range(len(ds))]
    ds.set_epoch(0)  # back: the workers follow, they do not only count up
    assert _ids(persistent) == epoch0
    del persistent


def test_epoch_of_a_pickled_dataset_follows_the_original(loader_lake: FakeLake) -> None:
    ds = Dataset(loader_lake.layout, spec=SampleSpec(cameras=(), action_horizon=2), seed=5)
    copy = pickle.loads(pickle.dumps(ds))
    first = [copy.locate(i) for i in range(5)]
    ds.set_epoch(3)
    assert [copy.locate(i) for i in range(5)] == [ds.locate(i) for i in range(5)] != first
    assert copy.epoch == 3
    order = np.array([ds._flat(i) for i in range(len(ds))])
    assert sorted(order.tolist()) == list(range(len(ds)))
