"""Child process of test_agreement: one host of a 2-host run, over torch.distributed (gloo) or
multi-process JAX (CPU), going through the agreement scenarios in order.

Run as `python -m tests.loader.selection.agreement_child CONFIG_JSON`: CONFIG has "backend" ("torch" or
"jax"), "rank", "world", "address" (a file:// init method for torch, host:port of the JAX
coordinator), "lake", "catalog", "snapshot" (a snapshot file of the lake before any scenario)
and "out" (this rank writes its results, a JSON object per scenario, to OUT.<rank>.json).
Only rank 0 commits to the lake and touches the catalog, except where a scenario says.
"""

from __future__ import annotations

import json
import sys
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

from pi_loader import (
    Dataset,
    HostsDisagreeError,
    Loader,
    PiLoaderError,
    SampleSpec,
    ShardSpec,
    Snapshot,
    agree,
    broadcast_snapshot,
)
from pi_loader.selection._agreement import hosts

from tests.fixtures.lake_factory import append_episodes, make_episode

SPEC = SampleSpec(cameras=("front",), action_horizon=2)
CAMERAS = ("front",)
SIZE = (32, 32)
STEPS = 5


def commit_episode(lake: str, index: int) -> None:
    """Commit one more episode the way the stream job orders it (rows first, marker last)."""
    from pi_format import LakeLayout

    # through LakeWriter: the loader reads only episodes rows that carry locators
    ep = make_episode(index, steps=STEPS, cameras=CAMERAS, size=SIZE, seed=0)
    append_episodes(LakeLayout(lake), [ep], SIZE)


def _error(err: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {"error": type(err).__name__, "message": str(err)}
    if isinstance(err, HostsDisagreeError):
        out.update(rank=err.rank, fingerprints=err.fingerprints)
    return out


def main(config: dict[str, Any]) -> None:
    backend, rank, world = config["backend"], int(config["rank"]), int(config["world"])
    lake: str = config["lake"]
    results: dict[str, Any] = {}
    if backend == "torch":
        import torch.distributed as dist

        dist.init_process_group(
            "gloo", init_method=config["address"], rank=rank, world_size=world, timeout=timedelta(seconds=60)
        )

        def barrier() -> None:
            dist.barrier()

    else:
        import jax
        from jax.experimental import multihost_utils

        jax.distributed.initialize(
            coordinator_address=config["address"], num_processes=world, process_id=rank,
            initialization_timeout=60,
        )  # fmt: skip
        assert jax.process_count() == world

        def barrier() -> None:
            multihost_utils.sync_global_devices("pi_loader-agreement-test")

    results["backend"] = hosts().name

    # named: every host opens the same snapshot file -> they agree (Dataset, Loader, Snapshot).
    snap = Snapshot.load(config["snapshot"])
    ds = Dataset(lake, snapshot=snap, spec=SPEC, seed=1)
    loader = Loader(ds, batch_size=2, shard=ShardSpec(rank, world))
    results["named"] = {
        "fingerprint": ds.check_agreement(),
        "own": ds.fingerprint,
        "loader": agree(loader),
        "snapshot": agree(snap),
    }

    # race: rank 0 opens, then a commit lands, then rank 1 opens: both must refuse to go on.
    barrier()
    if rank == 0:
        raced = Dataset(lake, spec=SPEC, seed=1)
    barrier()
    if rank == 0:
        commit_episode(lake, 5)
    barrier()
    if rank != 0:
        raced = Dataset(lake, spec=SPEC, seed=1)
    try:
        results["race"] = {"fingerprint": raced.check_agreement()}
    except HostsDisagreeError as err:
        results["race"] = _error(err)
    results["race"]["episodes"] = len(raced.episode_ids)

    # seed: the same snapshot with a different seed per host (another order) -> disagree.
    try:
        reseeded = Dataset(lake, snapshot=snap, spec=SPEC, seed=rank)
        results["seed"] = {"fingerprint": reseeded.check_agreement()}
    except HostsDisagreeError as err:
        results["seed"] = _error(err)

    # epoch: the same dataset, loaders at different epochs -> disagree.
    stepped = Loader(ds, batch_size=2, shard=ShardSpec(rank, world))
    stepped.set_epoch(rank)
    try:
        results["loader_epoch"] = {"fingerprint": agree(stepped)}
    except HostsDisagreeError as err:
        results["loader_epoch"] = _error(err)

    # shared: rank 0 resolves SQL over the catalog; rank 1 commits an episode right before it
    # opens (after rank 0 resolved), and still opens exactly rank 0's selection.
    if rank == 0:
        from pi_catalog import Catalog
        from pi_format import LakeLayout

        Catalog(config["catalog"]).rebuild_from_lake(LakeLayout(lake))
    barrier()

    class CommitFirst(Dataset):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if rank == 1:
                commit_episode(lake, 6)
            super().__init__(*args, **kwargs)

    shared = CommitFirst.shared(
        lake, sql="SELECT episode_id FROM episodes", catalog=config["catalog"], spec=SPEC, seed=1
    )
    results["shared"] = {
        "fingerprint": shared.fingerprint,
        "episode_ids": list(shared.episode_ids),
        "versions": shared.table_versions,
        "sql": shared.sql,
        "latest_episodes": len(Dataset(lake, spec=SPEC).episode_ids),
    }
    barrier()
    mine = Dataset(lake, spec=SPEC).snapshot if rank == 0 else None
    results["shared"]["broadcast"] = broadcast_snapshot(mine).to_json()
    try:  # rank 0 forgot its snapshot: no host waits for it
        broadcast_snapshot(None)
        results["no_snapshot"] = {"error": None}
    except (TypeError, PiLoaderError) as err:
        results["no_snapshot"] = _error(err)

    # rank 0 cannot open: every host raises instead of waiting for rank 0's snapshot.
    try:
        Dataset.shared(lake, episode_ids=["no-such-episode"], spec=SPEC)
        results["rank0_fails"] = {"error": None}
    except PiLoaderError as err:
        results["rank0_fails"] = _error(err)

    barrier()
    Path(f"{config['out']}.{rank}.json").write_text(json.dumps(results))
    if backend == "torch":
        dist.destroy_process_group()
    else:
        jax.distributed.shutdown()


if __name__ == "__main__":
    try:
        main(json.loads(sys.argv[1]))
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
