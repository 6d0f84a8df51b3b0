"""`pilake up | down | status | setup`: the local development stack (broker, Java, connector jars,
with `up --flink` a local Flink session cluster, with `up --s3` a local S3 server)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from pi_jobs.errors import PiJobsError
from pi_jobs.settings import Settings

if TYPE_CHECKING:
    from pi_jobs.local.object_store import ObjectStoreConfig


def _cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.local.stack import ensure_topics, start_broker

    status = start_broker(settings)
    ensure_topics(settings.bootstrap_servers, settings.kafka.options, settings.ack_routes)
    print(f"up: {status.detail}; topics ready; state in {settings.home}")
    if args.flink:
        from pi_jobs.local.flink_cluster import LocalClusterConfig, cluster_log_dir, start_local_cluster

        cluster = start_local_cluster(settings, LocalClusterConfig(slots=args.slots))
        print(f"up: {cluster.detail}; logs in {cluster_log_dir(settings)}")
        print(f"up: submit the stream job with `pilake stream --cluster {cluster.url}`")
    if args.s3:
        _up_s3(settings, args.s3_port)
    return 0


def _s3_config(settings: Settings, port: int | None) -> ObjectStoreConfig:
    from urllib.parse import urlsplit

    from pi_jobs.local.object_store import DEFAULT_S3_PORT, ObjectStoreConfig, saved_s3_port

    if port is None:  # the running server's, the configured local endpoint's, else the usual one
        port = saved_s3_port(settings.run_dir)
    if port is None:
        parts = urlsplit(settings.s3_endpoint)
        local = parts.hostname in ("127.0.0.1", "localhost") and parts.port is not None
        port = parts.port if local and parts.port is not None else DEFAULT_S3_PORT
    return ObjectStoreConfig(
        settings.home / "s3",
        s3_port=port,
        access_key_id=settings.s3_access_key_id,
        secret_access_key=settings.s3_secret_access_key,
    )


def _up_s3(settings: Settings, port: int | None) -> None:
    """Start SeaweedFS and write <home>/s3.env: the settings an s3:// lake on it needs."""
    import dataclasses
    import os
    import secrets

    from pi_jobs.local.object_store import start_object_store

    config = _s3_config(settings, port)
    env_file = settings.home / "s3.env"
    if not config.access_key_id:  # none configured: this server's own, kept beside its data
        saved = _read_env_file(env_file)
        key = saved.get("AWS_ACCESS_KEY_ID") or f"pilake-{secrets.token_hex(4)}"
        secret = saved.get("AWS_SECRET_ACCESS_KEY") or secrets.token_urlsafe(24)
        config = dataclasses.replace(config, access_key_id=key, secret_access_key=secret)
    status = start_object_store(config, settings.run_dir)
    lines = {
        "PILAKE_LAKE": f"s3://{config.bucket}/lake",
        "AWS_ENDPOINT_URL": config.endpoint_url,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        # delta-rs commits with If-None-Match; etag also allows If-Match (SPEC.md §7)
        "AWS_CONDITIONAL_PUT": "etag",
        "AWS_ACCESS_KEY_ID": config.access_key_id,
        "AWS_SECRET_ACCESS_KEY": config.secret_access_key,
    }
    settings.home.mkdir(parents=True, exist_ok=True)
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # holds the secret key
    with os.fdopen(fd, "w") as out:
        out.write("".join(f"export {k}={v}\n" for k, v in lines.items()))
    print(f"up: {status.detail}; data in {config.data_dir}")
    print(
        f"up: for a lake on it: `source {env_file}` (PILAKE_LAKE=s3://{config.bucket}/lake, endpoint, keys)"
    )


def _read_env_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        name, sep, value = line.removeprefix("export ").partition("=")
        if sep:
            found[name.strip()] = value.strip()
    return found


def _cmd_down(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.local.flink_cluster import stop_local_cluster
    from pi_jobs.local.object_store import stop_object_store
    from pi_jobs.local.stack import stop_broker

    if stop_local_cluster(settings):
        print("down: Flink session cluster stopped")
    if stop_object_store(settings.run_dir):
        print(f"down: S3 server stopped (its data stays in {settings.home / 's3'})")
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
    print(f"s3     : {_s3_line(settings)}")
    print(f"lake   : {settings.lake_root}")
    print(f"catalog: {settings.catalog_path}")
    from pi_jobs.ops.metrics_view import metrics_lines

    print("\n".join(metrics_lines(settings)))  # live /metrics of the uploader, stream job, loader
    return 0 if status.running else 1


def _s3_line(settings: Settings) -> str:
    """The local S3 server's state when `pilake up --s3` started one, else the configured endpoint."""
    from pi_jobs.local.object_store import object_store_status

    if (settings.run_dir / "s3.json").exists():
        return object_store_status(_s3_config(settings, None), settings.run_dir).detail
    return settings.s3_endpoint or "no local S3 server (`pilake up --s3` starts one)"


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
    up.add_argument(
        "--s3",
        action="store_true",
        help="also start a local S3 server (SeaweedFS) for an s3:// lake; writes <home>/s3.env to source",
    )
    up.add_argument(
        "--s3-port",
        type=int,
        default=None,
        help="its S3 port (default: the port of AWS_ENDPOINT_URL when local, else 8333)",
    )
    up.set_defaults(func=_cmd_up)
    sub.add_parser(
        "down", help="stop the local broker (and the local Flink cluster, S3 server)"
    ).set_defaults(func=_cmd_down)
    sub.add_parser("status", help="health of the local stack").set_defaults(func=_cmd_status)
    sub.add_parser("setup", help="check Java, the broker binary, fetch connector jars").set_defaults(
        func=_cmd_setup
    )
