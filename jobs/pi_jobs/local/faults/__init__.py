"""Fault scenarios on the real local stack: each starts real processes, breaks them, and audits.

Shared by the fault tests (`tests/faults`, the assertions) and the fault report
(`benchmarks/faults/run.py`). Every scenario gets its own home (lake, catalog, spools, Flink work
dir) and its own Tansu broker on a free port, runs the stream job as `pilake stream` in a process
group of its own (driver, Flink JVM and Python workers), and ends with `pilake audit --json`
(`pi_jobs.ops.audit`, run as a subprocess): episodes in, visible, quarantined, lost (missing) and
duplicated.

| scenario | the fault |
| --- | --- |
| `kill_stream_job` | SIGKILL of the whole stream job mid-run, then a restart |
| `broker_restart` | the broker stops and restarts (losing every record) while two uploaders run |
| `bad_bytes` | corrupted, truncated, oversize, unknown-version messages and `kcat` garbage |
| `concurrent_writers` | two processes commit to the same Delta tables at once |
| `lake_unwritable` | the lake's files become immutable: the job must fail loudly, then resume |
| `crash_point` | the sink's worker dies at a point of a group commit (`CRASH_POINTS`) |
| `wire_attack` | hostile messages of a seeded `fuzz_plan` among valid episodes; worker memory sampled |

Each scenario is `scenario(home, jar_cache, *, seed=...) -> FaultResult`; `SCENARIOS` maps their
names to them. `FaultStack` and `StreamProcess` are the harness they are built on.

Example:
    >>> from pi_jobs.local.faults import kill_stream_job
    >>> result = kill_stream_job(tmp_path / "home", Path(".pilake/jars"))
    >>> result.lost, result.duplicated
    (0, 0)
"""

from pi_jobs.local.faults._concurrent_writers import concurrent_writers
from pi_jobs.local.faults._crash_points import CRASH_POINTS, crash_point
from pi_jobs.local.faults._harness import FaultStack, StreamProcess
from pi_jobs.local.faults._messages import KCAT_GARBAGE
from pi_jobs.local.faults._result import FaultResult
from pi_jobs.local.faults._scenarios import (
    SCENARIOS,
    bad_bytes,
    broker_restart,
    kill_stream_job,
    lake_unwritable,
)
from pi_jobs.local.faults._wire_attack import AttackSize, judge, wire_attack
from pi_jobs.local.faults._wire_fuzz import MUTATIONS, FuzzCase, FuzzPlan, case_counts, fuzz_plan

__all__ = [
    "CRASH_POINTS",
    "KCAT_GARBAGE",
    "MUTATIONS",
    "SCENARIOS",
    "AttackSize",
    "FaultResult",
    "FaultStack",
    "FuzzCase",
    "FuzzPlan",
    "StreamProcess",
    "bad_bytes",
    "broker_restart",
    "case_counts",
    "concurrent_writers",
    "crash_point",
    "fuzz_plan",
    "judge",
    "kill_stream_job",
    "lake_unwritable",
    "wire_attack",
]
