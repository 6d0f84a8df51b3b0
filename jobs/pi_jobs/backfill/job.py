"""The backfill job's graph: a bounded list of episodes -> key by episode -> BackfillFunction.

PyFlink in BATCH runtime mode: the source is the collection of (episode_id, raw attempt_id)
pairs the driver planned (`pi_jobs.backfill.driver`), keyed by episode so two subtasks never hold
the same one, and the keyed function (pi_jobs.backfill._function) rebuilds, featurizes and
commits them. The Python worker settings and the bounded restart strategy are the stream job's
(`pi_jobs.stream.job`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pi_jobs.backfill.config import BackfillConfig, BackfillSettings


def build_backfill_job(
    config: BackfillConfig, items: Sequence[tuple[str, str, str]], settings: BackfillSettings
) -> Any:
    """Set up the environment and the job graph over `items`; returns the
    StreamExecutionEnvironment (in BATCH mode)."""
    from pi_jobs.stream.job import prepare_python_workers, python_worker_configuration

    prepare_python_workers(config.log_dir)
    from pyflink.common import Types
    from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

    from pi_jobs.backfill._function import BackfillFunction, episode_of

    conf = python_worker_configuration()
    conf.set_string("parallelism.default", str(config.parallelism))
    # one slot per parallel subtask on the local mini-cluster
    conf.set_string("taskmanager.numberOfTaskSlots", str(config.parallelism))
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(config.parallelism)
    source = env.from_collection(
        [tuple(item) for item in items],
        type_info=Types.TUPLE([Types.STRING(), Types.STRING(), Types.STRING()]),
    )
    (
        source.key_by(episode_of, key_type=Types.STRING())
        .process(BackfillFunction(settings), output_type=Types.STRING())
        .name("pilake-backfill")
        .print()  # PyFlink needs a sink; the function emits nothing
    )
    return env
