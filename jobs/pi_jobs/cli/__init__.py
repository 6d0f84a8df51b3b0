"""`pilake`: the command line of pi-lake, one module per command group. Arguments are parsed
into typed options here, at the edge; every command calls the package APIs and imports its heavy
dependencies lazily, so `pilake sql` on a training host does not load PyFlink. The CLI is the
only code that may import every pi package; nothing imports it.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Sequence

from pi_format.jsonlog import EVENT_LOG_DIR_ENV

from pi_jobs.cli import (
    _annotate,
    _audit,
    _backfill,
    _catalog,
    _config,
    _dataset,
    _eval,
    _export,
    _freshness,
    _import,
    _ingest,
    _integrity,
    _maintenance,
    _quality,
    _quarantine,
    _runs,
    _stack,
    _stream,
    _trace,
    _train,
    _ui,
    demo,
)
from pi_jobs.cli._stream import stream_config_from_args
from pi_jobs.config import export_environment
from pi_jobs.errors import PiJobsError
from pi_jobs.settings import SETTINGS_KEYS, Settings

__all__ = ["build_parser", "main", "stream_config_from_args"]

# The order of `pilake --help`.
_COMMAND_GROUPS = (
    _stack,
    _config,
    _ingest,
    _import,
    _export,
    _stream,
    _backfill,
    _dataset,
    _annotate,
    _maintenance,
    _integrity,
    _quarantine,
    _catalog,
    _audit,
    _freshness,
    _trace,
    _quality,
    _train,
    _eval,
    _runs,
    _ui,
    demo,
)


def build_parser() -> argparse.ArgumentParser:
    """The `pilake` argument parser, every command group registered.

    Example:
        >>> build_parser().parse_args(["stream", "--until-idle"]).until_idle
        True
    """
    parser = argparse.ArgumentParser(
        prog="pilake",
        description="pi-lake: robots -> Kafka -> PyFlink -> Delta + ClickHouse -> pi_loader",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in _COMMAND_GROUPS:
        group.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `pilake` command."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        settings = Settings.from_env()  # the settings file + environment (pi_jobs.config)
        # pi_catalog and deltalake read credentials and S3 options from the environment, as do
        # the processes commands start (Flink workers): give them the file's values too.
        if getattr(args, "export_environment", True):
            export_environment(SETTINGS_KEYS, settings)
        # JSON event logs of every component this command runs (uploader, stream job workers,
        # loader) go to one directory, which `pilake trace` reads (pi_format.jsonlog)
        os.environ.setdefault(EVENT_LOG_DIR_ENV, str(settings.log_dir / "events"))
        return int(args.func(settings, args))
    except (PiJobsError, ValueError, OSError) as err:
        print(f"pilake {args.command}: error: {err}", file=sys.stderr)
        return 1
    except Exception as err:
        # Other packages' errors (catalog, ingest, format) are already readable; no traceback
        # for a user mistake, but keep the type so a bug is recognisable.
        print(f"pilake {args.command}: {type(err).__name__}: {err}", file=sys.stderr)
        if args.verbose:
            raise
        return 1
    finally:
        # Free what the command left in reference cycles (pyarrow dataset scanners, deltalake
        # tables) while pyarrow is still whole: collected only at interpreter teardown, their
        # threads made 1 in 3 `pilake annotate list` runs abort after printing (exit 134,
        # "terminate called without an active exception"; apache/arrow#34314).
        gc.collect()
