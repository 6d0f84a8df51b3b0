"""pi_jobs: the PyFlink stream job, the lake writer, the local stack and the `pilake` CLI.

Heavy dependencies (pyflink, deltalake, confluent_kafka, av) are imported inside functions.
"""

from pi_jobs.connector_jars import ensure_connector_jars
from pi_jobs.errors import PiJobsError, StackError, StreamJobError
from pi_jobs.featurize import FeaturizeConfig, FeaturizedEpisode, align_frames, featurize
from pi_jobs.lake_writer import LakeWriter
from pi_jobs.settings import Settings
from pi_jobs.stream_job import StreamJobConfig, StreamReport, run_stream_job

__all__ = [
    "FeaturizeConfig",
    "FeaturizedEpisode",
    "LakeWriter",
    "PiJobsError",
    "Settings",
    "StackError",
    "StreamJobConfig",
    "StreamJobError",
    "StreamReport",
    "align_frames",
    "ensure_connector_jars",
    "featurize",
    "run_stream_job",
]
