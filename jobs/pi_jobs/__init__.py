"""pi_jobs: the PyFlink stream job, the lake writer, the local stack and the `pilake` CLI.

Heavy dependencies (pyflink, deltalake, confluent_kafka, av) are imported inside functions.
"""

from pi_jobs.connector_jars import ensure_connector_jars
from pi_jobs.contract import RegistryError, RobotRegistry, RobotType, check_episode, load_registry
from pi_jobs.errors import PiJobsError, StackError, StreamJobError
from pi_jobs.featurize import FeaturizeConfig, FeaturizedEpisode, align_frames, featurize
from pi_jobs.kafka_security import KafkaSecurity, KafkaSecurityError
from pi_jobs.lake_writer import LakeWriter
from pi_jobs.quarantine import QuarantineError, ReleaseRejected, list_quarantine, release_episode
from pi_jobs.settings import Settings
from pi_jobs.stream_job import StreamJobConfig, StreamReport, run_stream_job

__all__ = [
    "FeaturizeConfig",
    "FeaturizedEpisode",
    "KafkaSecurity",
    "KafkaSecurityError",
    "LakeWriter",
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
