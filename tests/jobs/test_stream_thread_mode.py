"""What the stream job's Python needs to run in PyFlink's thread mode (PEMJA) as well as in a
worker process: the objects the JVM hands it there are Java objects. The job itself runs in
both modes in tests/jobs/test_stream_job.py; these stand-ins (named as such: a PEMJA-wrapped
Java object cannot be made without a JVM) pin the two conversions down."""

from __future__ import annotations

import datetime

from pi_jobs.stream._records import record_time_ns
from pi_jobs.stream._sink import subtask_index


class _JavaInstantStandIn:
    """Stands in for a java.time.Instant as PEMJA wraps it."""

    def getEpochSecond(self) -> int:  # the Java method names
        return 1_700_000_000

    def getNano(self) -> int:
        return 123_000_000


def test_record_time_of_every_shape_flink_passes() -> None:
    want = 1_700_000_000_123_000_000
    assert record_time_ns(_JavaInstantStandIn()) == want
    assert record_time_ns(datetime.datetime.fromtimestamp(want / 1e9, datetime.UTC)) == want
    assert record_time_ns(1_700_000_000_123) == want
    assert record_time_ns(None) is None and record_time_ns("not a time") is None


class _TaskInfoStandIn:
    def getIndexOfThisSubtask(self) -> int:
        return 3


class _JavaRuntimeContextStandIn:
    """Flink 2.0's RuntimeContext: the subtask index lives in getTaskInfo()."""

    def getTaskInfo(self) -> _TaskInfoStandIn:
        return _TaskInfoStandIn()


class _ThreadModeContextStandIn:
    """PyFlink 2.0's embedded runtime context, whose get_index_of_this_subtask calls a Java
    method Flink 2.0 no longer has."""

    _runtime_context = _JavaRuntimeContextStandIn()

    def get_index_of_this_subtask(self) -> int:
        raise AttributeError("'pemja.PyJObject' object has no attribute 'getIndexOfThisSubtask'")


class _ProcessModeContextStandIn:
    def get_index_of_this_subtask(self) -> int:
        return 1


def test_subtask_index_in_both_modes() -> None:
    assert subtask_index(_ThreadModeContextStandIn()) == 3
    assert subtask_index(_ProcessModeContextStandIn()) == 1
