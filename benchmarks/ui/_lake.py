"""The lake the UI benchmark measures: real episodes written by the real write path, in the
layout a lake between two compactions has.

Every episode is benchmarks/scale's copied episode (`benchmarks.scale._grow.episode_copy`: one
simulated, featurized 2 s episode of 64 px video under a new id, robot, task, success and start
time), committed by `LakeWriter.commit_episodes` with its raw (bronze) rows, and recorded in a
real chdb catalog by `Catalog.record_episodes` and `Catalog.record_freshness`, as the stream
job's sink does after each group commit. Growing to each size:

* the bulk (everything but the last `tail_episodes`) is committed in group commits of
  `bulk_group` episodes (a backfill's group commits, larger than the stream sink's: one Delta
  commit per table per group, which is what makes 100,000 episodes take minutes instead of an
  hour), then
* `pi_jobs.maintenance.compact` (what `pilake compact` runs, its default `CompactConfig`)
  merges every small file group into ~128 MiB groups sorted by episode id and bin-packs the raw
  and quarantine tables' small files: the layout a lake has after its periodic compaction,
  whatever group size wrote it (a group commit below `small_group_bytes` is rewritten either way),
* the last `tail_episodes` are committed in the stream sink's group commits
  (`tail_group` = 32, `StreamConfig.group_commit_max_episodes`) and left uncompacted: what
  streamed in since the last compaction.

A lake with no bulk (the smallest size) is all tail: a young lake before its first compaction.
`quarantine_every`-th episode (1 %) is quarantined instead, as the sink does: its raw messages
go in with the group's raw rows under a fresh uuid attempt id, and its quarantine row is one
commit of its own (`LakeWriter.write_quarantine`). Raw message bytes are the template episode's
real wire chunks (`pi_format.wire.encode_episode`, ~27.5 kB an episode), so the raw table holds
what a stream job keeps for every episode.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.scale._grow import GrowConfig, delta_log_sizes, episode_copy, template_episode, template_rows

TOPIC = "episodes.raw.v1"
PARTITIONS = 4
REASONS = ("unknown_robot_type", "bad_magic", "checksum_mismatch", "action_out_of_range")


@dataclass(frozen=True, slots=True)
class LakeConfig:
    """How the measured lake is written (see the module docstring)."""

    bulk_group: int = 500
    tail_group: int = 32
    tail_episodes: int = 1000
    quarantine_every: int = 100


class LakeGrower:
    """Grows one lake and its catalog, size after size (`grow_to`)."""

    def __init__(self, lake: Path, catalog_dir: Path, config: LakeConfig, say: Callable[[str], None]):
        from pi_catalog import Catalog
        from pi_format import LakeLayout
        from pi_format.lake import LakeWriter
        from pi_format.wire.writer import encode_episode

        self.config = config
        self.grow_config = GrowConfig(sizes=(1,))
        episode = template_episode(self.grow_config)
        self.template = template_rows(self.grow_config, episode)
        self.messages = encode_episode(episode)
        self.layout = LakeLayout(str(lake))
        self.writer = LakeWriter(self.layout, writer_id="ui-benchmark")
        self.catalog = Catalog(str(catalog_dir))
        self.catalog.ensure_schema()
        self.say = say
        self.episodes = 0  # committed
        self.index = 0  # next episode index (committed or quarantined)
        self.quarantined = 0
        self.offsets = [0] * PARTITIONS
        self.phases: list[dict[str, Any]] = []

    def _raw(self, episode_id: str, attempt_id: str, partition: int) -> dict[str, list[Any]]:
        n = len(self.messages)
        first = self.offsets[partition]
        self.offsets[partition] += n
        now = time.time_ns()
        return {
            "episode_id": [episode_id] * n,
            "chunk_index": list(range(n)),
            "kafka_topic": [TOPIC] * n,
            "kafka_partition": [partition] * n,
            "kafka_offset": list(range(first, first + n)),
            "received_at_ns": [now] * n,
            "attempt_id": [attempt_id] * n,
            "message": list(self.messages),
        }

    def _group(self, n: int) -> tuple[float, float]:
        """Commit the next `n` episodes (quarantining every `quarantine_every`-th) as one group;
        returns (commit s, catalog s)."""
        from pi_format import QUARANTINE_SCHEMA, RAW_SCHEMA

        batch: list[Any] = []
        quarantine: list[dict[str, Any]] = []
        raw_cols: dict[str, list[Any]] = {name: [] for name in RAW_SCHEMA.names}
        for _ in range(n):
            i = self.index
            self.index += 1
            partition = i % PARTITIONS
            if i % self.config.quarantine_every == self.config.quarantine_every // 2:
                attempt = str(uuid.uuid4())  # the sink's attempt id for what it assembled
                eid = f"bad-{i:07d}"
                cols = self._raw(eid, attempt, partition)
                quarantine.append(
                    {
                        "quarantine_id": str(uuid.uuid4()),
                        "episode_id": eid,
                        "reason": REASONS[(i // self.config.quarantine_every) % len(REASONS)],
                        "details": f"episode {eid}: synthetic quarantine for the UI benchmark",
                        "kafka_topic": TOPIC,
                        "kafka_partition": partition,
                        "kafka_offsets": cols["kafka_offset"],
                        "raw_pointer": f"raw: attempt_id={attempt} topic={TOPIC} partition={partition}",
                        "size_bytes": sum(len(m) for m in self.messages),
                        "attempt_id": attempt,
                        "quarantined_at_ns": time.time_ns(),
                    }
                )
            else:
                rows = episode_copy(self.template, i, self.grow_config)
                batch.append(rows)
                cols = self._raw(rows.episode_id, f"scale-attempt-{i:07d}", partition)
            for name, values in cols.items():
                raw_cols[name].extend(values)
        raw = pa.table(raw_cols, schema=RAW_SCHEMA)
        published = time.time_ns()
        t0 = time.perf_counter()
        result = self.writer.commit_episodes(batch, raw=raw)
        committed_ns = time.time_ns()
        for row in quarantine:  # one commit per quarantine row, as the sink writes them
            self.writer.write_quarantine(pa.Table.from_pylist([row], schema=QUARANTINE_SCHEMA))
        t1 = time.perf_counter()
        if len(result.committed) != len(batch) or result.duplicates:
            raise RuntimeError(f"group commit: {len(result.committed)} of {len(batch)} committed")
        self.catalog.record_episodes(result.episodes, episodes_version=result.version)
        k = result.episodes.num_rows
        readable = time.time_ns()
        self.catalog.record_freshness(
            pa.table(
                {
                    "episode_id": result.episodes.column("episode_id"),
                    "attempt_id": result.episodes.column("attempt_id"),
                    "published_at_ns": pa.array(published - 2_000_000_000 - np.arange(k) * 10**7),
                    "lake_committed_at_ns": pa.array(np.full(k, committed_ns)),
                    "readable_at_ns": pa.array(np.full(k, readable)),
                    "episodes_version": pa.array(np.full(k, result.version)),
                }
            )
        )
        self.episodes += len(batch)
        self.quarantined += len(quarantine)
        return t1 - t0, time.perf_counter() - t1

    def _commit(self, count: int, group: int, phase: str) -> None:
        started, last = time.monotonic(), 0.0
        commit_s = catalog_s = 0.0
        groups = 0
        goal = self.index + count
        while self.index < goal:
            c, k = self._group(min(group, goal - self.index))
            commit_s, catalog_s, groups = commit_s + c, catalog_s + k, groups + 1
            now = time.monotonic()
            if now - last > 15 or self.index == goal:
                last = now
                rate = (count - (goal - self.index)) / (now - started)
                self.say(
                    f"  lake ({phase}, groups of {group}): {self.index:,} episodes "
                    f"({rate:.0f}/s, ETA {(goal - self.index) / rate:.0f} s)"
                )
        elapsed = time.monotonic() - started
        self.phases.append(
            {
                "phase": phase,
                "episodes": count,
                "group_commit_episodes": group,
                "group_commits": groups,
                "seconds": round(elapsed, 1),
                "episodes_per_s": round(count / elapsed, 1),
                "commit_s": round(commit_s, 1),
                "catalog_s": round(catalog_s, 1),
            }
        )

    def grow_to(self, size: int) -> None:
        """Grow to `size` episode indices (committed + quarantined): bulk, compaction, tail."""
        from pi_jobs.maintenance import compact

        add = size - self.index
        if add <= 0:
            return
        tail = min(self.config.tail_episodes, add)
        if add > tail:
            self._commit(add - tail, self.config.bulk_group, "bulk")
            self.say("  lake: compacting (pi_jobs.maintenance.compact, default CompactConfig)")
            report = compact(self.layout, progress=self.say)
            self.phases.append(
                {
                    "phase": "compact",
                    "seconds": round(report.seconds, 1),
                    "files_before": report.files_before,
                    "files_after": report.files_after,
                    "groups_merged": report.groups_merged,
                    "bytes_rewritten": report.bytes_rewritten,
                }
            )
        self._commit(tail, self.config.tail_group, "tail")

    def describe(self) -> dict[str, Any]:
        """The lake as measured: counts, how it was written, files and Delta logs per table."""
        return {
            "episodes": self.episodes,
            "quarantined": self.quarantined,
            "raw_messages_per_episode": len(self.messages),
            "raw_bytes_per_episode": sum(len(m) for m in self.messages),
            "steps_per_episode": self.template.steps.num_rows,
            "video_rows_per_episode": self.template.video.num_rows,
            "phases": list(self.phases),
            "tables": delta_log_sizes(Path(self.layout.root)),
        }

    def close(self) -> None:
        self.catalog.close()
