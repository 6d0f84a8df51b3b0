"""The local development stack: the Tansu broker (start, stop, topics), a local Flink session
cluster (`flink_cluster`) and the stream job submitted to any session cluster (`flink_submit`),
a local S3 server for an s3:// lake (`object_store`, SeaweedFS), and `faults`, the
fault-injection scenarios on real processes that tests and benchmarks share."""

from pi_jobs.local.flink_cluster import (
    LocalClusterConfig,
    local_cluster_status,
    start_local_cluster,
    start_taskmanager,
    stop_local_cluster,
)
from pi_jobs.local.flink_submit import ClusterJob, ClusterStatus, cluster_status, submit_stream_job
from pi_jobs.local.object_store import (
    ObjectStoreConfig,
    ObjectStoreStatus,
    object_store_status,
    start_object_store,
    stop_object_store,
)
from pi_jobs.local.stack import broker_status, ensure_topics, start_broker, stop_broker

__all__ = [
    "ClusterJob",
    "ClusterStatus",
    "LocalClusterConfig",
    "ObjectStoreConfig",
    "ObjectStoreStatus",
    "broker_status",
    "cluster_status",
    "ensure_topics",
    "local_cluster_status",
    "object_store_status",
    "start_broker",
    "start_local_cluster",
    "start_object_store",
    "start_taskmanager",
    "stop_broker",
    "stop_local_cluster",
    "stop_object_store",
    "submit_stream_job",
]
