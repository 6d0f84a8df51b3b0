"""The wire attack scenario: a `fuzz_plan` sent through the real broker into `pilake stream`
while the job's Python worker's memory is sampled; then every case is judged against the lake.

Shared by the wire fuzz test (tests/faults/test_wire_fuzz.py, CI-sized) and the attack
benchmark (benchmarks/attack/run.py, thousands of cases by seed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pi_jobs.local.faults._harness import STREAM_START_TIMEOUT_S, FaultStack, _group_pids
from pi_jobs.local.faults._messages import simulated
from pi_jobs.local.faults._result import FaultResult, make_result
from pi_jobs.local.faults._wire_fuzz import FuzzPlan, Message, case_counts, encode_fuzz, fuzz_plan

log = logging.getLogger("pi_jobs.local.faults")


@dataclass(frozen=True, slots=True)
class AttackSize:
    """How big one attack is, and the limits the job runs with (small, so they are reached)."""

    cases: int = 60
    valid_episodes: int = 6
    flood_keys: int = 60
    # the job's limits for the attack (pilake stream flags)
    max_episode_mb: float = 4.0
    max_held_mb: float = 8.0
    max_held_episodes: int = 40
    max_chunks_per_episode: int = 4096
    incomplete_timeout_s: float = 5.0
    # mutation classes to draw from (default: all of MUTATIONS)
    only: tuple[str, ...] = ()
    # how long the job may take to drain everything sent (a loaded 2-core machine)
    drain_timeout_s: float = 400.0

    def stream_args(self) -> list[str]:
        return [
            "--incomplete-timeout-s", str(self.incomplete_timeout_s),
            "--max-episode-mb", str(self.max_episode_mb),
            "--max-held-mb", str(self.max_held_mb),
            "--max-held-episodes", str(self.max_held_episodes),
            "--max-chunks-per-episode", str(self.max_chunks_per_episode),
        ]  # fmt: skip


def _python_workers(pgid: int, driver_pid: int) -> list[int]:
    """The job's Python worker processes: python processes of the job's group but the driver."""
    out = []
    for pid in _group_pids(pgid):
        if pid == driver_pid:
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and b"python" in Path(cmd[0].decode(errors="replace")).name.encode():
            out.append(pid)
    return out


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class RssSampler:
    """Samples the resident memory of the stream job's Python workers every `interval_s`."""

    def __init__(self, pgid: int, driver_pid: int, interval_s: float = 0.25) -> None:
        self.pgid, self.driver_pid, self.interval_s = pgid, driver_pid, interval_s
        self.peak_bytes = 0
        self.samples = 0
        self.workers_seen: set[int] = set()
        self.timeline: list[tuple[float, int]] = []  # (seconds since start, summed RSS), ~1 per second
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for pid in _python_workers(self.pgid, self.driver_pid):
                self.workers_seen.add(pid)
                rss = _rss_bytes(pid)
                total += rss
                self.peak_bytes = max(self.peak_bytes, rss)
            self.samples += 1
            now = time.monotonic() - self._t0
            if not self.timeline or now - self.timeline[-1][0] >= 1.0:
                self.timeline.append((round(now, 1), total))
            self._stop.wait(self.interval_s)


def _produce(
    bootstrap: str, messages: list[Message], valid: Collection[str]
) -> tuple[dict[int, int], dict[str, float]]:
    """Send `messages`; (largest offset delivered per partition, delivery time of the last
    message of each episode in `valid`)."""
    from confluent_kafka import Producer
    from pi_format import RAW_TOPIC

    producer = Producer(
        {"bootstrap.servers": bootstrap, "message.max.bytes": 4_000_000, "linger.ms": 5, "acks": "all"}
    )
    ends: dict[int, int] = {}
    sent_at: dict[str, float] = {}
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
            return
        p, o = int(msg.partition()), int(msg.offset())
        ends[p] = max(ends.get(p, -1), o)
        key = msg.key()
        if key is not None and key.decode(errors="replace") in valid:
            sent_at[key.decode()] = time.time()

    for key, value, partition in messages:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(RAW_TOPIC, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(60) or errors:
        raise RuntimeError(f"fuzz messages not delivered: {errors[:5]}")
    return ends, sent_at


def _caught_up(progress: dict[str, Any], ends: dict[int, int]) -> bool:
    offsets = progress.get("offsets", {})
    return all(int(offsets.get(str(p), -1)) >= end for p, end in ends.items())


def judge(plan: FuzzPlan, lake_root: str) -> dict[str, Any]:
    """Every case and valid episode against the lake: failures (empty when all is as expected)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from pi_format import LakeLayout

    layout = LakeLayout(lake_root)
    eps = DeltaTable(layout.episodes).to_pyarrow_table(
        columns=["episode_id", "attempt_id", "committed_at_ns"]
    )
    visible: dict[str, list[tuple[str, int]]] = {}
    for row in eps.to_pylist():
        visible.setdefault(row["episode_id"], []).append((row["attempt_id"], int(row["committed_at_ns"])))
    reasons: dict[str, set[str]] = {}
    rows_without_id = 0
    quarantine = DeltaTable(layout.quarantine)
    q_rows = quarantine.to_pyarrow_table(columns=["episode_id", "reason"])
    # quarantines are group-committed (format/SPEC.md 9.5): commits, not one per row
    q_commits = sum(1 for h in quarantine.history() if h.get("operation") != "CREATE TABLE")
    for row in q_rows.to_pylist():
        if row["episode_id"] is None:
            rows_without_id += 1
        reasons.setdefault(row["episode_id"] or "<no id>", set()).add(row["reason"])
    failures: list[str] = []
    outcome: dict[str, dict[str, int]] = {}
    for case in plan.cases:
        got = outcome.setdefault(case.mutation, {"committed": 0, "quarantined": 0, "cases": 0})
        got["cases"] += 1
        if case.key is None:  # keyless garbage: counted by offset; checked in total below
            got["quarantined"] += 1
            continue
        n_visible = len(visible.get(case.key, []))
        why = reasons.get(case.key, set())
        if n_visible > 1:
            failures.append(f"{case.mutation} {case.key}: committed {n_visible} times")
        elif n_visible == 1:
            got["committed"] += 1
            if case.expect == "quarantine":
                failures.append(f"{case.mutation} {case.key}: committed, expected quarantine")
        else:
            got["quarantined"] += 1 if why else 0
            if case.expect == "commit":
                failures.append(f"{case.mutation} {case.key}: not committed (quarantined as {sorted(why)})")
            elif not why:
                failures.append(f"{case.mutation} {case.key}: neither committed nor quarantined")
            elif case.reasons and not why & case.reasons:
                failures.append(
                    f"{case.mutation} {case.key}: reasons {sorted(why)}, expected {sorted(case.reasons)}"
                )
    garbage = sum(1 for c in plan.cases if c.key is None)
    if rows_without_id < garbage:
        failures.append(
            f"{garbage} keyless garbage messages, {rows_without_id} quarantine rows without an id"
        )
    wanted = {eid: visible[eid][0][0] for eid in plan.valid if len(visible.get(eid, [])) == 1}
    raw = DeltaTable(layout.raw).to_pyarrow_table(
        columns=["episode_id", "attempt_id", "chunk_index", "message"]
    )
    raw = raw.filter(pc.is_in(raw["episode_id"], pa.array(sorted(wanted), pa.string())))
    stored: dict[str, dict[int, bytes]] = {eid: {} for eid in wanted}
    for row in raw.to_pylist():
        eid = row["episode_id"]
        if eid in wanted and row["attempt_id"] == wanted[eid] and row["chunk_index"] is not None:
            stored[eid][int(row["chunk_index"])] = row["message"]
    for eid, msgs in plan.valid.items():
        n = len(visible.get(eid, []))
        if n != 1:
            failures.append(f"valid {eid}: committed {n} times, expected once")
        elif [stored[eid].get(i) for i in range(len(msgs))] != msgs:
            failures.append(f"valid {eid}: its raw messages differ from what was sent")
        if reasons.get(eid):
            failures.append(f"valid {eid}: quarantined as {sorted(reasons[eid])}")
    return {
        "failures": failures,
        "by_mutation": outcome,
        "committed_at_ns": {eid: visible[eid][0][1] for eid in wanted},
        "quarantine_reasons": sorted({r for v in reasons.values() for r in v}),
        "quarantine_rows": q_rows.num_rows,
        "quarantine_commits": q_commits,
    }


def wire_attack(
    home: Path,
    jar_cache: Path,
    *,
    seed: int = 3100,
    size: AttackSize | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> FaultResult:
    """Send a seeded fuzz plan through the broker into a running `pilake stream`, wait until
    every partition is processed and nothing is held, then judge and audit.

    Example:
        >>> r = wire_attack(tmp_path / "home", Path(".pilake/jars"), seed=1)
        >>> r.observed["failures"], r.audit["ok"]
        ([], True)
    """
    from pi_jobs.stream.limits import StreamLimits

    size = size or AttackSize()
    t0 = time.monotonic()
    # two donors for the mutations, one warm-up episode, the valid ones
    episodes = simulated(seed, robots=1, episodes=size.valid_episodes + 3)
    limits = StreamLimits(
        max_episode_bytes=round(size.max_episode_mb * 1e6),
        max_held_bytes=round(size.max_held_mb * 1e6),
        max_held_episodes=size.max_held_episodes,
        max_chunks_per_episode=size.max_chunks_per_episode,
    )
    plan = fuzz_plan(
        seed,
        cases=size.cases,
        donors=episodes[:2],
        valid=episodes[3:],
        limits=limits,
        flood_keys=size.flood_keys,
        only=size.only,
    )
    # sent first and waited for: the job is up and committing before the attack starts
    warm_id = episodes[2].episode_id
    warm: list[Message] = [(warm_id.encode(), m, None) for m in encode_fuzz(episodes[2])]
    plan.valid[warm_id] = [v for _, v, _ in warm if v is not None]
    log.info(
        "wire attack: %d messages, %.1f MB, cases %s", len(plan.messages), plan.bytes / 1e6, case_counts(plan)
    )
    with FaultStack(home, jar_cache=jar_cache) as stack:
        stack.start_broker()
        stream = stack.start_stream(*size.stream_args())
        with RssSampler(stream.pid, stream.pid) as rss:
            _produce(stack.bootstrap, warm, ())
            stack.wait_progress(
                stream, lambda p: p.get("committed", 0) >= 1, STREAM_START_TIMEOUT_S, "the warm-up commit"
            )
            started = time.monotonic()
            ends, sent_at = _produce(stack.bootstrap, plan.messages, plan.valid)
            sent_s = time.monotonic() - started

            def drained(p: dict[str, Any]) -> bool:
                if on_progress is not None:
                    on_progress(p)
                return _caught_up(p, ends) and not p.get("incomplete") and not p.get("buffered")

            progress = stack.wait_progress(stream, drained, size.drain_timeout_s, "the attack to drain")
            drain_s = time.monotonic() - started
        alive = stream.alive()
        stream.stop()
        verdict = judge(plan, stack.settings.lake_root)
        report = stack.audit()
    freshness = sorted(
        max(0.0, verdict["committed_at_ns"][eid] / 1e9 - sent_at[eid])
        for eid in verdict["committed_at_ns"]
        if eid in sent_at
    )
    return make_result(
        "wire_attack",
        report,
        t0,
        {
            "seed": seed,
            "size": {
                "cases": size.cases,
                "valid_episodes": size.valid_episodes,
                "flood_keys": size.flood_keys,
                "messages": len(plan.messages),
                "megabytes": round(plan.bytes / 1e6, 2),
            },
            "limits": {
                "max_episode_bytes": limits.max_episode_bytes,
                "max_held_bytes": limits.max_held_bytes,
                "max_held_episodes": limits.max_held_episodes,
                "max_chunks_per_episode": limits.max_chunks_per_episode,
                "incomplete_timeout_s": size.incomplete_timeout_s,
            },
            "cases_by_mutation": case_counts(plan),
            "failures": verdict["failures"],
            "by_mutation": verdict["by_mutation"],
            "quarantine_reasons": verdict["quarantine_reasons"],
            "quarantine_rows": verdict["quarantine_rows"],
            "quarantine_commits": verdict["quarantine_commits"],
            "partitions": {str(p): e for p, e in sorted(ends.items())},
            "progress_offsets": dict(progress.get("offsets", {})),
            "partitions_caught_up": _caught_up(progress, ends),
            "stream_job_alive_after": alive,
            "flink_restarts": stack.flink_restarts(),
            "peak_worker_rss_bytes": rss.peak_bytes,
            "peak_held_bytes": int(progress.get("peak_held_bytes", 0)),
            "limits_acted": dict(progress.get("limits_acted", {})),
            "rss_samples": rss.samples,
            "rss_timeline": rss.timeline,
            "python_workers_seen": len(rss.workers_seen),
            "valid_freshness_s": [round(f, 3) for f in freshness],
            "send_s": round(sent_s, 2),
            "drain_s": round(drain_s, 2),
        },
    )
