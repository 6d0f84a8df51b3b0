"""The stream job (PyFlink): Kafka source -> key by episode -> assemble -> ingest contract ->
featurize -> lake sink (the commit protocol of `pi_format.lake`) -> catalog -> ack.

| module | owns |
| --- | --- |
| `config` | `StreamJobConfig`, `StreamReport`, `stream_config(settings)` |
| `job` | the Flink job graph (source table, key_by, the sink) |
| `driver` | `run_stream_job`: submit, watch progress, stop when drained |
| `offsets` | the raw topic's true end offsets and the group's committed offsets |
| `limits` | `StreamLimits`: what one sink subtask may hold in memory (SPEC.md §9.5) |
| `contract` | the ingest contract and the robot registry (SPEC.md §9) |
| `featurize` | an assembled episode -> the lake rows of one attempt |
| `connector_jars` | the two Flink Kafka connector jars the job loads |
| `_sink`, `_records`, `_acks`, `_logs`, `_held`, `_held_limits` | the worker-side sink and its parts |
"""

from pi_jobs.stream.config import StreamJobConfig, StreamReport, stream_config
from pi_jobs.stream.connector_jars import ensure_connector_jars
from pi_jobs.stream.contract import RegistryError, RobotRegistry, RobotType, check_episode, load_registry
from pi_jobs.stream.driver import run_stream_job
from pi_jobs.stream.featurize import FeaturizeConfig, align_frames, featurize
from pi_jobs.stream.limits import StreamLimits

__all__ = [
    "FeaturizeConfig",
    "RegistryError",
    "RobotRegistry",
    "RobotType",
    "StreamJobConfig",
    "StreamLimits",
    "StreamReport",
    "align_frames",
    "check_episode",
    "ensure_connector_jars",
    "featurize",
    "load_registry",
    "run_stream_job",
    "stream_config",
]
