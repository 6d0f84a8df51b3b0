"""pi_jobs: the jobs that run pi-lake, split by role.

| subpackage | role |
| --- | --- |
| `pi_jobs.stream` | the PyFlink stream job: source, assembly, contract, featurize, lake sink |
| `pi_jobs.backfill` | the PyFlink batch job that re-featurizes episodes from the raw table |
| `pi_jobs.maintenance` | dataset pins, compaction, GC and episode deletion |
| `pi_jobs.ops` | operator tools: audit, quarantine, validation and drift |
| `pi_jobs.local` | the development stack (the local broker) and fault scenarios |
| `pi_jobs.cli` | the `pilake` command (the only code that imports every pi package) |

`settings`, `kafka_security` and `errors` are shared by every role. The commit protocol the
stream job writes with lives in `pi_format.lake`. Heavy dependencies (pyflink, deltalake,
confluent_kafka, av) are imported inside functions.
"""

from pi_jobs.errors import PiJobsError, StackError, StreamJobError
from pi_jobs.kafka_security import KafkaSecurity, KafkaSecurityError
from pi_jobs.ops import QuarantineError, ReleaseRejected, list_quarantine, release_episode
from pi_jobs.settings import Settings
from pi_jobs.stream import (
    FeaturizeConfig,
    RegistryError,
    RobotRegistry,
    RobotType,
    StreamJobConfig,
    StreamReport,
    align_frames,
    check_episode,
    ensure_connector_jars,
    featurize,
    load_registry,
    run_stream_job,
)

__all__ = [
    "FeaturizeConfig",
    "KafkaSecurity",
    "KafkaSecurityError",
    "PiJobsError",
    "QuarantineError",
    "RegistryError",
    "ReleaseRejected",
    "RobotRegistry",
    "RobotType",
    "Settings",
    "StackError",
    "StreamJobConfig",
    "StreamJobError",
    "StreamReport",
    "align_frames",
    "check_episode",
    "ensure_connector_jars",
    "featurize",
    "list_quarantine",
    "load_registry",
    "release_episode",
    "run_stream_job",
]
