"""What the stream job's Python needs to run in PyFlink's thread mode (PEMJA) as well as in a
worker process: the objects the JVM hands it there are Java objects. The job itself runs in
both modes in tests/jobs/test_stream_job.py; these stand-ins (named as such: a PEMJA-wrapped
Java object cannot be made without a JVM) pin the two conversions down."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
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


def _python_operators(config: Any) -> dict[str, str]:
    """Every operator of the job graph that runs Python, by name."""
    from pi_jobs.stream.job import build_job

    transformations = build_job(config)._j_stream_execution_environment.getTransformations()
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]

    operators = {}
    for i in range(transformations.size()):
        t = transformations.get(i)
        try:  # only one- and two-input transformations with a simple factory hold an operator
            kind = t.getOperatorFactory().getOperator().getClass().getSimpleName()
        except Py4JError:
            continue
        if "Python" in kind:
            operators[t.getName()] = kind
    return operators


@pytest.mark.integration
def test_the_mode_decides_where_the_python_operators_run(stack_settings: Any, tmp_path: Path) -> None:
    """The job graph (no job runs): thread mode puts the sink in PEMJA's embedded operator,
    process mode in a Beam worker operator; the episode key is computed in the JVM
    (`pi_jobs.stream._keying`), so the sink is the only Python operator in either mode (a Python
    key selector would send every record across twice). test_stream_job runs both."""
    from tests.fixtures.stream_jobs import small_stream_job

    def config(mode: str) -> Any:
        return small_stream_job(
            broker="127.0.0.1:1",  # never contacted: the graph is built, not run
            root=tmp_path / mode,
            jar_dir=stack_settings.jar_dir,
            raw_topic="raw",
            ack_topic="ack",
            group_id="g",
            python_execution_mode=mode,
        )

    assert _python_operators(config("thread")) == {
        "pilake-lake-sink": "EmbeddedPythonKeyedProcessOperator",
    }
    assert _python_operators(config("process")) == {
        "pilake-lake-sink": "ExternalPythonKeyedProcessOperator",
    }
