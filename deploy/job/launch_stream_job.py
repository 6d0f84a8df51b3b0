"""The stream job's entry in the job image: what Flink's PythonDriver runs with `-py`.

The Flink Kubernetes Operator (deploy/k8s/flink-deployment.yaml, application mode) and
`flink run -py` on a session cluster both run this file in a Python client process. It builds the
same job graph as `pilake stream` (`pi_jobs.stream.job.build_job`) from the effective settings
(PILAKE_CONFIG, the environment: `pilake config show` prints them) and hands it to the cluster
that runs the client. Kafka source, lake, catalog, parallelism and checkpoint storage come from
the settings; the restart strategy is the job's own (pi_jobs.stream.job), and a deployed job never
gives up: it restarts at most every 30 s for as long as a dependency is down, and its sink rides
out a restart of the object store or ClickHouse by itself (StreamJobConfig.dependency_retry_s).
"""

from __future__ import annotations

from dataclasses import replace

from pi_jobs.config import export_environment
from pi_jobs.settings import SETTINGS_KEYS, Settings
from pi_jobs.stream.config import StreamJobConfig, stream_config

JOB_NAME = "pilake-stream"


def job_config() -> StreamJobConfig:
    """The stream job's config from the settings file and the environment of this process.

    `*_FILE` secrets are read here and exported as their variables (`export_environment`), so
    deltalake and pi_catalog in this client find them; the TaskManagers' Python workers read the
    plain variables from their own environment (the manifests set them from Secrets).
    """
    settings = Settings.from_env()
    export_environment(SETTINGS_KEYS, settings)
    return replace(stream_config(settings), restart_attempts=None)


def main() -> None:
    """Build the job and run it on the cluster this client belongs to (blocks in application
    mode until the job ends; returns at once under `flink run -d`)."""
    from pi_jobs.stream.job import build_job

    config = job_config()
    print(f"{JOB_NAME}: {config!r}, parallelism {config.parallelism}", flush=True)
    build_job(config).execute(JOB_NAME)


if __name__ == "__main__":
    main()
