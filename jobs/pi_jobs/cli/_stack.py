"""`pilake up | down | status | setup`: the local development stack (broker, Java, connector jars,
and with `up --flink` a local Flink session cluster)."""

from __future__ import annotations

import argparse

from pi_jobs.errors import PiJobsError
from pi_jobs.settings import Settings


def _cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.local.stack import ensure_topics, start_broker

    status = start_broker(settings)
    ensure_topics(settings.bootstrap_servers, settings.kafka.options)
    print(f"up: {status.detail}; topics ready; state in {settings.home}")
    if args.flink:
        from pi_jobs.local.flink_cluster import LocalClusterConfig, cluster_log_dir, start_local_cluster

        cluster = start_local_cluster(settings, LocalClusterConfig(slots=args.slots))
        print(f"up: {cluster.detail}; logs in {cluster_log_dir(settings)}")
        print(f"up: submit the stream job with `pilake stream --cluster {cluster.url}`")
    return 0


def _cmd_down(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.local.flink_cluster import stop_local_cluster
    from pi_jobs.local.stack import stop_broker

    if stop_local_cluster(settings):
        print("down: Flink session cluster stopped")
    print("down: broker stopped" if stop_broker(settings) else "down: broker was not running")
    return 0


def _cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.local.stack import broker_status, java_version

    status = broker_status(settings)
    print(f"broker : {status.detail}")
    print(f"flink  : {_flink_line(settings)}")
    try:
        print(f"java   : {java_version()}")
    except PiJobsError as err:
        print(f"java   : MISSING - {err}")
    print(f"lake   : {settings.lake_root}")
    print(f"catalog: {settings.catalog_path}")
    from pi_jobs.ops.metrics_view import metrics_lines

    print("\n".join(metrics_lines(settings)))  # live /metrics of the uploader, stream job, loader
    return 0 if status.running else 1


def _flink_line(settings: Settings) -> str:
    """The Flink session cluster `pilake stream` would use: the configured one, else the local one."""
    from pi_jobs.local.flink_cluster import local_cluster_status
    from pi_jobs.local.flink_submit import cluster_status

    if settings.flink_rest_url:
        return cluster_status(settings.flink_rest_url).detail
    local = local_cluster_status(settings)
    return (
        local.detail
        if local.running
        else "no session cluster (`pilake stream` runs the embedded mini-cluster)"
    )


def _cmd_setup(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.local.stack import broker_binary, java_version
    from pi_jobs.stream.connector_jars import ensure_connector_jars

    print(f"java            : {java_version()}")
    print(f"broker binary   : {broker_binary()}")
    for jar in ensure_connector_jars(settings.jar_dir):
        print(f"connector jar   : {jar}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    up = sub.add_parser("up", help="start the local broker and create topics")
    up.add_argument(
        "--flink",
        action="store_true",
        help="also start a local Flink session cluster (REST at PILAKE_FLINK_URL, default http://127.0.0.1:8081)",
    )
    up.add_argument("--slots", type=int, default=2, help="task slots of its TaskManager (default 2)")
    up.set_defaults(func=_cmd_up)
    sub.add_parser("down", help="stop the local broker (and the local Flink cluster)").set_defaults(
        func=_cmd_down
    )
    sub.add_parser("status", help="health of the local stack").set_defaults(func=_cmd_status)
    sub.add_parser("setup", help="check Java, the broker binary, fetch connector jars").set_defaults(
        func=_cmd_setup
    )
