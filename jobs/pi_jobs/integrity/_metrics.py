"""What a `pilake verify` run found, as Prometheus series (`--metrics-file`, `--pushgateway`).

A scrub is a CronJob: its pod is gone before any Prometheus could scrape it, so the run leaves its
figures where Prometheus finds them afterwards: a text file in the exposition format (node
exporter's textfile collector reads a directory of `*.prom` files; the file is replaced by a
rename, so a scrape never reads half of it), or a Pushgateway (an HTTP PUT of the same text under
`/metrics/job/pilake-verify`, which replaces the last run's series). The alert
PilakeVerifyFoundDamage (deploy/prometheus/alerts.yaml) reads `pilake_verify_damaged_places`;
kube-state-metrics' failed-Job series (PilakeCronJobFailed) says the same where it runs.

Example:
    >>> text = verify_metrics_text(report, finished_at=time.time())
    >>> write_metrics_file(Path("/var/lib/node-exporter/pilake-verify.prom"), text)
"""

from __future__ import annotations

import contextlib
import http.client
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from pi_jobs.integrity.verify import VerifyReport

__all__ = ["METRIC_NAMES", "VerifyMetricsError", "push_metrics", "verify_metrics_text", "write_metrics_file"]

PUSH_JOB = "pilake-verify"
PUSH_TIMEOUT_S = 10.0  # a Pushgateway answers a PUT of a few lines in milliseconds; never hang the Job

# name -> help; every series a run exports (the dashboard test reads this)
_HELP = {
    "pilake_verify_last_run_timestamp_seconds": "Unix time the last verify run finished.",
    "pilake_verify_damaged_places": "Damaged places (page, chunk, file) the last run found; 0: clean.",
    "pilake_verify_corrupt_episodes": "Episode attempts the last verify run found damaged.",
    "pilake_verify_files_selected": "Files the last verify run's sample selected.",
    "pilake_verify_files_checked": "Files the last verify run checked itself (the rest were resumed).",
    "pilake_verify_bytes_checked": "Bytes the last verify run checked.",
    "pilake_verify_duration_seconds": "Seconds the last verify run took.",
}
METRIC_NAMES = tuple(_HELP)


class VerifyMetricsError(RuntimeError):
    """The run's figures could not be written or pushed (the scrub's own result stands)."""


def verify_metrics_text(report: VerifyReport, *, finished_at: float) -> str:
    """The run's figures in the Prometheus text exposition format (gauges, no labels)."""
    values = {
        "pilake_verify_last_run_timestamp_seconds": finished_at,
        "pilake_verify_damaged_places": len(report.faults),
        "pilake_verify_corrupt_episodes": len(report.corrupt_episodes),
        "pilake_verify_files_selected": report.files_selected,
        "pilake_verify_files_checked": report.files_checked,
        "pilake_verify_bytes_checked": report.bytes_checked,
        "pilake_verify_duration_seconds": round(report.seconds, 3),
    }
    lines = []
    for name, value in values.items():
        lines += [f"# HELP {name} {_HELP[name]}", f"# TYPE {name} gauge", f"{name} {float(value)!r}"]
    return "\n".join(lines) + "\n"


def write_metrics_file(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically (a temporary file beside it, then a rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):  # a parent that is not a directory fails this too
            tmp.unlink(missing_ok=True)
        raise VerifyMetricsError(
            f"cannot write the verify metrics file {path}: {err}; pass a writable --metrics-file "
            "(node exporter's --collector.textfile.directory)"
        ) from err


def push_metrics(url: str, text: str, *, job: str = PUSH_JOB) -> None:
    """PUT `text` to the Pushgateway at `url` (http://host:9091) under job `job`."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc or any(c <= " " for c in url):
        raise VerifyMetricsError(
            f"--pushgateway must be an http(s) URL such as http://pushgateway:9091 (no spaces or control "
            f"characters), got {url!r}"
        )
    target = f"{url.rstrip('/')}/metrics/job/{urllib.parse.quote(job, safe='')}"
    try:
        request = urllib.request.Request(
            target, data=text.encode(), method="PUT", headers={"Content-Type": "text/plain; version=0.0.4"}
        )
        with urllib.request.urlopen(request, timeout=PUSH_TIMEOUT_S) as response:
            response.read()
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as err:
        raise VerifyMetricsError(
            f"cannot push the verify metrics to {target!r}: {err}; is the Pushgateway up and reachable?"
        ) from err
