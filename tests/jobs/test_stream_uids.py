"""The stream job's stateful operators carry fixed uids (issue 32), so the keyed state in a
savepoint maps back onto them after the job graph changes (deploy/k8s takes periodic savepoints).
Builds the real job graph with PyFlink (a JVM, no broker: nothing runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def _stream_node_uids(env: Any) -> dict[str, str | None]:
    graph = env._j_stream_execution_environment.getStreamGraph(False)
    nodes = graph.getStreamNodes().iterator()
    found: dict[str, str | None] = {}
    while nodes.hasNext():
        node = nodes.next()
        uid = node.getTransformationUID()
        found[str(node.getOperatorName())] = None if uid is None else str(uid)
    return found


def test_the_lake_sink_and_its_sink_have_fixed_uids(tmp_path: Path) -> None:
    from pi_jobs.stream import StreamJobConfig
    from pi_jobs.stream.connector_jars import CONNECTOR_JARS
    from pi_jobs.stream.job import build_job

    jars = Path(__file__).resolve().parents[2] / ".pilake" / "jars"
    if not all((jars / name).is_file() for name in CONNECTOR_JARS.values()):
        pytest.skip("the connector jars are not fetched in this checkout (pilake setup fetches them)")
    config = StreamJobConfig(
        bootstrap_servers="127.0.0.1:1",  # never contacted: the graph is only built
        lake_root=str(tmp_path / "lake"),
        catalog_path=str(tmp_path / "catalog"),
        work_dir=tmp_path,
        jar_dir=jars,
    )
    uids = _stream_node_uids(build_job(config))
    assert uids.get("pilake-lake-sink") == "pilake-lake-sink", uids
    assert "pilake-print-sink" in uids.values(), uids
