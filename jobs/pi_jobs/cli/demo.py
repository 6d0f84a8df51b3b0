"""`pilake demo`: the whole path once, on the embedded stack.

simulate a fleet -> upload through the spool -> PyFlink stream job until idle -> SQL summary
from the catalog -> batches through pi_loader.Loader (2 workers) -> a PNG contact sheet of
the frames exactly as the loader returns them, and a JSON of the figures measured on the way.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pi_jobs.settings import Settings

log = logging.getLogger("pi_jobs.cli.demo")


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """What the demo simulates and where it writes its outputs.

    Example:
        >>> run_demo(Settings.from_env(), DemoConfig(robots=2, episodes_per_robot=1))
    """

    robots: int = 3
    episodes_per_robot: int = 2
    # 4 s at 50 Hz / 30 fps: 200 steps and 120 frames per camera, enough to see motion.
    duration_s: float = 4.0
    out_dir: Path = Path("demo-output")
    seed: int | None = None  # None: a fresh seed per run, so a re-run adds new episodes
    batch_size: int = 8
    loader_workers: int = 2

    def __post_init__(self) -> None:
        if self.robots < 1 or self.episodes_per_robot < 1:
            raise ValueError(
                f"robots and episodes must be >= 1, got {self.robots} and {self.episodes_per_robot}"
            )
        if not self.duration_s > 0:
            raise ValueError(f"duration_s must be > 0, got {self.duration_s}")


@dataclass
class DemoSummary:
    seed: int
    episodes: int
    stage_seconds: dict[str, float] = field(default_factory=dict)
    upload_mb: float = 0.0
    stream_mb_per_s: float = 0.0
    stream_episodes_per_s: float = 0.0
    stream_startup_s: float = 0.0
    committed: int = 0
    quarantined: int = 0
    lake_latency_s: dict[str, float] = field(default_factory=dict)
    loader_samples: int = 0
    contact_sheet: str = ""
    audit: dict[str, int] = field(default_factory=dict)
    validation: dict[str, str] = field(default_factory=dict)
    data_docs: str = ""


class _Stage:
    def __init__(self, summary: DemoSummary, name: str) -> None:
        self.summary, self.name = summary, name

    def __enter__(self) -> None:
        print(f"==> {self.name}", flush=True)
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - self.start
        self.summary.stage_seconds[self.name] = round(elapsed, 2)
        print(f"    {self.name}: {elapsed:.1f} s", flush=True)


def run_demo(settings: Settings, config: DemoConfig) -> DemoSummary:
    """Run the whole path; returns (and writes to out_dir/summary.json) the measured figures."""
    from pi_jobs.local.stack import broker_status, ensure_topics, start_broker, stop_broker

    seed = config.seed if config.seed is not None else int(time.time()) % 1_000_000
    summary = DemoSummary(seed=seed, episodes=config.robots * config.episodes_per_robot)
    config.out_dir.mkdir(parents=True, exist_ok=True)
    started_broker = not broker_status(settings).running
    try:
        with _Stage(summary, "stack"):
            from pi_jobs.local.stack import java_version
            from pi_jobs.stream.connector_jars import ensure_connector_jars

            print(f"    java: {java_version()}")
            ensure_connector_jars(settings.jar_dir)
            print(f"    {start_broker(settings).detail}")
            ensure_topics(settings.bootstrap_servers, settings.kafka.options)
        _run_path(settings, config, summary)
    finally:
        if started_broker:
            stop_broker(settings)
    (config.out_dir / "summary.json").write_text(json.dumps(asdict(summary), indent=2))
    _print_figures(summary, config.out_dir)
    return summary


def _run_path(settings: Settings, config: DemoConfig, summary: DemoSummary) -> None:
    from pi_ingest.simulator import SimulationConfig, write_fleet
    from pi_ingest.uploader import Uploader, UploaderConfig

    from pi_jobs.stream.config import stream_config
    from pi_jobs.stream.driver import run_stream_job

    bundle_dir = settings.home / "demo" / f"seed{summary.seed}"
    bundle_dir.mkdir(parents=True, exist_ok=True)
    with _Stage(summary, "simulate"):
        sim = SimulationConfig(
            robots=config.robots,
            episodes_per_robot=config.episodes_per_robot,
            duration_s=config.duration_s,
            seed=summary.seed,
        )
        paths = write_fleet(sim, bundle_dir, progress=True)
    uploader_config = UploaderConfig(
        bootstrap_servers=settings.bootstrap_servers,
        spool_dir=settings.home / "spool",
        client_options=settings.kafka.options,
    )
    with Uploader(uploader_config) as uploader:
        with _Stage(summary, "upload"):
            entries = [uploader.submit_bundle(p) for p in paths]
            uploader.send_pending()
            summary.upload_mb = round(sum(e.size_bytes for e in entries) / 1e6, 2)
            print(f"    {len(entries)} episodes, {summary.upload_mb} MB in the spool and sent")
        # The embedded mini-cluster, or the session cluster the settings name (`pilake up --flink`
        # and PILAKE_FLINK_URL / [flink] rest_url): the same job either way.
        where = f"session cluster {settings.flink_rest_url}" if settings.flink_rest_url else "mini-cluster"
        with _Stage(summary, f"stream (PyFlink on the {where}, until idle)"):
            submit = None
            if settings.flink_rest_url:
                from pi_jobs.local.flink_submit import submit_stream_job

                submit = functools.partial(submit_stream_job, url=settings.flink_rest_url)
            report = run_stream_job(
                stream_config(settings), until_idle=True, idle_timeout_s=3.0, submit=submit
            )
            print(f"    {report}")
        # busy time excludes the JVM/job startup and the idle wait that ends `--until-idle`
        if report.busy_s > 0:
            summary.stream_mb_per_s = round(report.bytes_in / 1e6 / report.busy_s, 2)
            summary.stream_episodes_per_s = round(report.episodes_committed / report.busy_s, 2)
        summary.stream_startup_s = round(report.startup_s, 2)
        with _Stage(summary, "confirmations"):
            ids = {e.episode_id for e in entries}
            result = uploader.run_until_confirmed(timeout_s=60.0)
            summary.quarantined = len(ids & set(result.quarantined))
            summary.committed = len(ids) - summary.quarantined - len(ids & set(result.pending))
            print(
                f"    committed {summary.committed}, quarantined {summary.quarantined}, "
                f"pending {len(result.pending)}"
            )
            if result.pending:
                raise RuntimeError(f"episodes not confirmed by the lake: {sorted(result.pending)}")
    _sql_summary(settings, summary)
    _load_batches(settings, config, summary)
    _quality(settings, summary)


def _sql_summary(settings: Settings, summary: DemoSummary) -> None:
    from pi_catalog import Catalog, format_table

    with _Stage(summary, "sql"):
        catalog = Catalog(settings.catalog_path)
        query = (
            "SELECT robot_id, count() AS episodes, sum(step_count) AS steps, "
            "round(sum(duration_s), 1) AS seconds, countIf(success) AS successes, "
            "round(avg((committed_at_ns - received_at_ns) / 1e9), 2) AS avg_commit_s "
            "FROM episodes WHERE startsWith(robot_id, {prefix:String}) "
            "GROUP BY robot_id ORDER BY robot_id"
        )
        print(f'    pilake sql "{query}"')
        table = catalog.query_arrow(query, {"prefix": f"sim{summary.seed}-"})
        print(format_table(table))
        lat = (
            catalog.query_arrow(
                "SELECT (committed_at_ns - received_at_ns) / 1e9 AS s FROM episodes "
                "WHERE startsWith(robot_id, {prefix:String})",
                {"prefix": f"sim{summary.seed}-"},
            )
            .column("s")
            .to_pylist()
        )
        if lat:
            lat.sort()
            summary.lake_latency_s = {
                "min": round(lat[0], 3),
                "median": round(lat[len(lat) // 2], 3),
                "max": round(lat[-1], 3),
            }


def _load_batches(settings: Settings, config: DemoConfig, summary: DemoSummary) -> None:
    from pi_loader import CacheConfig, Dataset, Loader, contact_sheet

    with _Stage(summary, "pi_loader"):
        # a lake on object storage is read through a disk cache (the endpoint and keys come from
        # the environment, as for every other pilake command); 1 GB holds the demo's files
        remote = "://" in settings.lake_root
        dataset = Dataset(
            settings.lake_root,
            sql="SELECT episode_id FROM episodes WHERE startsWith(robot_id, {prefix:String})",
            sql_parameters={"prefix": f"sim{summary.seed}-"},
            catalog=settings.catalog_path,
            seed=summary.seed,
            cache=CacheConfig(settings.home / "cache", 10**9) if remote else None,
        )
        loader = Loader(dataset, batch_size=config.batch_size, num_workers=config.loader_workers)
        samples: list[dict[str, Any]] = []
        batch: dict[str, Any] = {}
        for batch_index, batch in enumerate(loader):
            for i in range(len(batch["episode_id"])):
                samples.append({k: v[i] for k, v in batch.items()})
            if batch_index == 1:
                break
        summary.loader_samples = len(samples)
        shapes = {k: tuple(v.shape) for k, v in batch.items() if hasattr(v, "shape")}
        print(f"    {len(dataset)} samples in the dataset; batch shapes {shapes}")
        print(f"    resume state after 2 batches: {loader.get_state()}")
        sheet = contact_sheet(samples[:8], config.out_dir / "contact_sheet.png")
        summary.contact_sheet = str(sheet)


def _quality(settings: Settings, summary: DemoSummary) -> None:
    """Reconcile what was uploaded with the lake, then run the expectation suites (Data Docs)."""
    from pi_format import LakeLayout

    from pi_jobs.ops.audit import audit, format_report
    from pi_jobs.ops.validation import validate_table

    with _Stage(summary, "audit + validation"):
        report = audit(
            LakeLayout(settings.lake_root),
            spool_dirs=[settings.home / "spool"],
            catalog_path=settings.catalog_path,
        )
        print(format_report(report, lake_root=settings.lake_root))
        summary.audit = {
            "in": report.episodes_in,
            "visible": report.visible,
            "quarantined": report.quarantined,
            "missing": report.missing,
            "duplicated": report.duplicated,
        }
        if report.missing or report.duplicated:
            raise RuntimeError(f"audit found missing or duplicated episodes: {summary.audit}")
        for table in ("episodes", "steps"):
            result = validate_table(settings.lake_root, table, validation_dir=settings.validation_dir)
            failed = [o.describe() for o in result.failed]
            summary.validation[table] = "passed" if not failed else f"FAILED: {failed}"
            print(f"    validate {table}@v{result.version}: {result.rows} rows, {summary.validation[table]}")
            if result.docs_index is not None:
                summary.data_docs = str(result.docs_index)
        print(f"    Data Docs: {summary.data_docs}")


def _print_figures(summary: DemoSummary, out_dir: Path) -> None:
    print("\n=== pi-lake demo summary ===")
    for name, seconds in summary.stage_seconds.items():
        print(f"  {name:<32} {seconds:>8.2f} s")
    print(f"  episodes committed / quarantined   {summary.committed} / {summary.quarantined}")
    print(f"  uploaded                           {summary.upload_mb} MB")
    print(
        f"  stream job while busy              {summary.stream_mb_per_s} MB/s, "
        f"{summary.stream_episodes_per_s} episodes/s (job startup {summary.stream_startup_s} s)"
    )
    if summary.lake_latency_s:
        print(f"  manifest received -> committed     {summary.lake_latency_s} s")
    print(f"  loader samples read                {summary.loader_samples}")
    print(f"  contact sheet                      {summary.contact_sheet}")
    print(f"  audit                              {summary.audit}")
    print(f"  validation                         {summary.validation}")
    print(f"  Data Docs                          {summary.data_docs}")
    print(f"  figures                            {out_dir / 'summary.json'}")


def _cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    config = DemoConfig(
        robots=args.robots,
        episodes_per_robot=args.episodes,
        duration_s=args.duration_s,
        out_dir=Path(args.out),
        seed=args.seed,
    )
    run_demo(settings, config)
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this group's commands on the `pilake` parser."""
    p = sub.add_parser("demo", help="simulate, upload, stream, query, load: the whole path")
    p.add_argument("--robots", type=int, default=3)
    p.add_argument("--episodes", type=int, default=2, help="episodes per robot")
    p.add_argument("--duration-s", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=None, help="default: a fresh seed each run")
    p.add_argument("--out", default="demo-output", help="where the PNG and summary JSON go")
    p.set_defaults(func=_cmd_demo)
