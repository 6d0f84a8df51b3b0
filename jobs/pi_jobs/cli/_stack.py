"""`pilake up | down | status | setup`: the local development stack (broker, Java, connector jars)."""

from __future__ import annotations

import argparse

from pi_jobs.errors import PiJobsError
from pi_jobs.settings import Settings


def _cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.local.stack import ensure_topics, start_broker

    status = start_broker(settings)
    ensure_topics(settings.bootstrap_servers, settings.kafka.options)
    print(f"up: {status.detail}; topics ready; state in {settings.home}")
    return 0


def _cmd_down(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.local.stack import stop_broker

    print("down: broker stopped" if stop_broker(settings) else "down: broker was not running")
    return 0


def _cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    from pi_jobs.local.stack import broker_status, java_version

    status = broker_status(settings)
    print(f"broker : {status.detail}")
    try:
        print(f"java   : {java_version()}")
    except PiJobsError as err:
        print(f"java   : MISSING - {err}")
    print(f"lake   : {settings.lake_root}")
    print(f"catalog: {settings.catalog_path}")
    return 0 if status.running else 1


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
    sub.add_parser("up", help="start the local broker and create topics").set_defaults(func=_cmd_up)
    sub.add_parser("down", help="stop the local broker").set_defaults(func=_cmd_down)
    sub.add_parser("status", help="health of the local stack").set_defaults(func=_cmd_status)
    sub.add_parser("setup", help="check Java, the broker binary, fetch connector jars").set_defaults(
        func=_cmd_setup
    )
