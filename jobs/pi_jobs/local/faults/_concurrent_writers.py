"""Fault scenario: two processes commit to the same Delta tables at once (no stream job, no
broker: the race is on the lake's commits only)."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

from pi_jobs.local.faults._harness import run_audit
from pi_jobs.local.faults._messages import simulated
from pi_jobs.local.faults._result import FaultResult, make_result


# -- 4. two writers on one Delta table --------------------------------------------------------
def _writer_process(lake_root: str, episodes: list[Any], barrier: Any, markers: Any, out: Any) -> None:
    from pi_format import LakeLayout
    from pi_format.lake import STAGE_ROWS_WRITTEN, LakeWriter

    def both_ready_to_commit_markers(stage: str) -> None:
        # Both writers have read what is committed and neither has committed its markers: the
        # second to commit must lose Delta's conflict check (the lost-race branch runs).
        if stage == STAGE_ROWS_WRITTEN:
            markers.wait(timeout=120)

    from pi_jobs.stream.featurize import FeaturizeConfig, featurize

    config = FeaturizeConfig(video_width=64, video_height=64, chunk_frames=10)
    writer = LakeWriter(
        LakeLayout(lake_root), writer_id=f"writer-{os.getpid()}", on_stage=both_ready_to_commit_markers
    )
    featurized = [
        featurize(
            ep,
            attempt_id=f"{os.getpid()}-{ep.episode_id}",
            received_at_ns=time.time_ns(),
            raw_size_bytes=0,
            committed_at_ns=time.time_ns(),
            config=config,
        )
        for ep in episodes
    ]
    barrier.wait()  # both start committing at the same instant
    # one group commit of all its episodes: both groups hold the 3 shared episodes, so their
    # episodes commits race on the same application-transaction buckets
    result = writer.commit_episodes(featurized)
    versions = [result.version if f.episode_id in result.committed else -1 for f in featurized]
    out.put((versions, writer.commit_conflicts))


def concurrent_writers(home: Path, jar_cache: Path, *, seed: int = 7400) -> FaultResult:
    """Two processes commit to the same lake at once; 3 of their episodes overlap."""
    from pi_catalog import Catalog
    from pi_format import TABLE_SCHEMAS, LakeLayout
    from pi_format.wire import encode_episode
    from pi_ingest import Spool

    t0 = time.monotonic()
    episodes = simulated(seed, robots=3, episodes=3)  # 9
    home.mkdir(parents=True, exist_ok=True)
    layout = LakeLayout(str(home / "lake"))
    from deltalake import DeltaTable

    for name, schema in TABLE_SCHEMAS.items():  # created once, so the race is on commits only
        DeltaTable.create(layout.table(name), schema=schema, mode="ignore")
    spool = Spool(home / "spool-writers")  # the ledger of what was produced
    for ep in episodes:
        spool.add(ep.episode_id, encode_episode(ep))
    # the 3 shared episodes come first in both lists, so both writers race for the same commits
    parts = [episodes[3:6] + episodes[:3], episodes[3:]]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(parts))
    markers = ctx.Barrier(len(parts))
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_writer_process, args=(layout.root, part, barrier, markers, out)) for part in parts
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    exit_codes = [p.exitcode for p in procs]
    refused = sum(1 for versions, _ in results for v in versions if v < 0)
    conflicts = sum(c for _, c in results)
    catalog_path = str(home / "catalog")
    Catalog(catalog_path).rebuild_from_lake(layout)

    env = {**os.environ, "PILAKE_HOME": str(home)}  # its lake and catalog are home/lake, home/catalog
    report = run_audit(env, [home / "spool-writers"], topic=False)
    return make_result(
        "concurrent_writers",
        report,
        t0,
        {
            "writers": len(parts),
            "episodes": len(episodes),
            "commits_attempted": sum(len(p) for p in parts),
            "commits_refused_as_already_committed": refused,
            "commit_races_lost": conflicts,
            "writer_exit_codes": exit_codes,
            "episodes_table_version": DeltaTable(layout.episodes).version(),
        },
    )
