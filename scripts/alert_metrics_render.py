"""Render deploy/prometheus/alerts_test.yaml from the recorded series (the render half of
scripts/record_alert_metrics.py, which records them; see its docstring).

Each recorded scrape becomes one minute of promtool input (a case's "step_s": verify_stopped's
an hour, each scrape then served every minute of it); the seconds gauges are stretched with it,
and the Unix times rebased onto promtool's clock (scripts/alert_metrics_values.py); every alert of
alerts.yaml is evaluated on every case (PilakeStreamJobDown on those that run a stream job), 2
steps in (quiet) and at the last scrape (firing where FIRING says, quiet elsewhere). A run of
equal values is written in promtool's `vxN` notation (the long freshness_outage case stays small).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root
from scripts.alert_metrics_values import LEAD_STEPS, TIMESTAMPS, annotation_value, rebase

ROOT = Path(__file__).resolve().parents[1]
STRETCH = 60  # one scrape a second, one promtool minute a scrape (a case's scrape_s: 60 / scrape_s)
MIN_SCRAPES = 30  # a 15m window and a 10m `for` after the fault, and a quiet start
# series measured in seconds of wall time (a gauge of an age, a counter of seconds spent): one
# recorded second is one promtool minute, so their values are stretched with the time axis
SECONDS_GAUGES = ("pilake_uploader_oldest_spooled_seconds", "pilake_loader_wait_seconds_total")
# the labels a Prometheus scrape adds, per endpoint kind
TARGETS = {
    "uploader": {"job": "pilake-uploader", "instance": "robot-1:9461"},
    "stream": {"job": "pilake-stream", "instance": "taskmanager-0:9470"},
    "loader": {"job": "pilake-loader", "instance": "trainer-0:9480"},
    "flink": {"job": "flink", "instance": "jobmanager-0:9249"},
    # a Pushgateway's series (honor_labels: the pushed job label; the gateway's instance)
    "verify": {"job": "pilake-verify", "instance": "pushgateway:9091"},
}
# the order of the cases in the test file (the record's keys may come in any order)
CASE_ORDER = (
    "store_down",
    "uploader_never_acked",
    "broker_down",
    "healthy",
    "loader_healthy",
    "loader_starved",
    "loader_store_frozen",
    "verify_damaged",
    "sink_crash_looping",
    "checkpoints_failing",
    "job_down",
    "quarantine_rising",
    "store_down_backlog",
    "verify_stopped",
    "freshness_outage",
    "all_refused",
)


# The alerts that must fire at each case's last scrape; every other alert of alerts.yaml must
# stay quiet there (PilakeStreamJobDown, which fires on the absence of the stream job's series,
# is evaluated only on the cases that run one: a case without a stream job would fire it).
FIRING = {
    "store_down": {"PilakeStreamStalled"},
    "uploader_never_acked": {"PilakeUploaderNotAcknowledged", "PilakeUploaderBacklogOld"},
    "broker_down": {
        "PilakeUploaderSendFailing",
        "PilakeUploaderNotAcknowledged",
        "PilakeUploaderBacklogOld",
    },
    "healthy": set(),
    "loader_healthy": set(),
    "loader_starved": {"PilakeLoaderStarved"},
    "loader_store_frozen": {"PilakeLoaderStarved"},
    "verify_damaged": {"PilakeVerifyFoundDamage"},
    # a sink failing at once fails every checkpoint too: none completes while the job restarts
    "sink_crash_looping": {"PilakeStreamRestarting", "PilakeStreamCheckpointsFailing"},
    # a checkpoint that fails fails the job too (Flink tolerates no failed checkpoint by
    # default): it restarts after each
    "checkpoints_failing": {
        "PilakeStreamCheckpointsFailing",
        "PilakeStreamRestarting",
        "PilakeStreamCheckpointOld",
    },
    "job_down": {"PilakeStreamJobDown"},
    "quarantine_rising": {"PilakeQuarantineRising"},
    "store_down_backlog": {"PilakeStreamStalled", "PilakeStreamLagGrowing"},
    "verify_stopped": {"PilakeVerifyNotRunning"},
    "freshness_outage": {"PilakeFreshnessSlow"},
    # every episode refused (quarantined): nothing committed; and many quarantined
    "all_refused": {"PilakeStreamNotCommitting", "PilakeQuarantineRising"},
}
# evaluated only on the cases that run a stream job (it fires on the absence of its series)
STREAM_ABSENCE = ("PilakeStreamJobDown",)


def _rules() -> dict[str, dict[str, Any]]:
    import yaml

    doc = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yaml").read_text())
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


def _expect(
    rule: dict[str, Any], instance: str, value: str | None = None, series: dict[str, str] | None = None
) -> list[str]:
    """The expected alert; `series`: the labels of the series an unaggregated rule keeps."""
    labels = {"severity": rule["labels"]["severity"]}
    if "by (instance)" in rule["expr"]:
        labels["instance"] = instance
    labels = {**(series or {}), **labels}
    lines = ["        exp_alerts:", "          - exp_labels:"]
    lines += [f"              {k}: {json.dumps(v)}" for k, v in labels.items()]
    lines += ["            exp_annotations:"]
    for key in ("summary", "description"):
        text = rule["annotations"][key].replace("{{ $labels.instance }}", instance)
        for label, label_value in (series or {}).items():
            text = text.replace(f"{{{{ $labels.{label} }}}}", label_value)
        if "{{" in text and value is not None:
            text = text.replace("{{ $value }}", value)
        if "{{" in text:
            raise SystemExit(f"{rule['alert']}: render cannot fill {text!r}")
        lines += [f"              {key}: {json.dumps(text)}"]
    return lines


def _labels(key: str) -> dict[str, str]:
    """The labels of a recorded series key, name{a="x",b="y"} (values without quotes or commas)."""
    inner = key[key.index("{") + 1 : -1]
    return dict(
        (part.split("=", 1)[0], part.split("=", 1)[1].strip('"')) for part in inner.split(",") if part
    )


def _values(values: list[float | None], repeat: int = 1) -> str:
    """promtool's input notation; `repeat`: samples a minute apart per value (a scrape standing
    for an hour is served all hour, as a Pushgateway's or a textfile's series is: an hour between
    samples would leave the series stale, the 5-minute lookback, between them)."""
    if repeat > 1:
        return " ".join(("_" if v is None else repr(float(v))) + f"x{repeat - 1}" for v in values)
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while values[i] is not None and j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        v = values[i]
        # `vxN` is v followed by N more samples of v (N + 1 in all); `_` is written one by one
        out.append("_" if v is None else repr(float(v)) + (f"x{j - i}" if j - i >= 2 else ""))
        if 0 < j - i < 2:
            out.append(repr(float(v)))  # type: ignore[arg-type]
        i = j + 1
    return " ".join(out)


def _kind(rule: dict[str, Any], kinds: dict[str, Any]) -> str:
    """The endpoint kind whose series an alert reads (the first series its expression names)."""
    for prefix, kind in (
        ("flink_", "flink"),
        ("pilake_uploader_", "uploader"),
        ("pilake_loader_", "loader"),
        ("pilake_verify_", "verify"),
        ("pilake_stream_", "stream"),
    ):
        if prefix in rule["expr"] and kind in kinds:
            return kind
    return next(iter(kinds))


def _case_lines(name: str, case: dict[str, Any], rules: dict[str, dict[str, Any]]) -> list[str]:
    step_s = int(case.get("step_s", 60))  # promtool seconds per recorded scrape
    lead = LEAD_STEPS if "wall" in case else 0  # rebased Unix times: steps of nothing first
    lines = [
        f"  # {name}: recorded {case['recorded']}",
        "  - interval: 1m",
        "    input_series:",
    ]
    length = 0
    stretch = step_s / case.get("scrape_s", 60 / STRETCH)
    for kind, scrapes in case["scrapes"].items():
        length = len(scrapes)
        target = ",".join(f'{k}="{v}"' for k, v in TARGETS[kind].items())
        for key in sorted({k for scrape in scrapes for k in scrape}):
            brace = key.index("{")
            name_, labels = key[:brace], key[brace + 1 : -1]
            if name_ in TIMESTAMPS and "wall" not in case:
                continue  # an older record without wall times: a Unix time promtool cannot compare
            factor = stretch if name_ in SECONDS_GAUGES else 1
            values = [None] * lead + [None if sc.get(key) is None else sc[key] * factor for sc in scrapes]
            if name_ in TIMESTAMPS:
                unit = TIMESTAMPS[name_]
                values = [v if v is None else rebase(v, unit, case["wall"], stretch, step_s) for v in values]
            series = f"{name_}{{{labels + ',' if labels else ''}{target}}}"
            lines += [f"      - series: '{series}'", f"        values: '{_values(values, step_s // 60)}'"]
    if length < MIN_SCRAPES:
        raise SystemExit(f"{name}: {length} scrapes are too few (a 15m window and a 10m `for`)")
    lines += ["    alert_rule_test:"]
    instance = {kind: TARGETS[kind]["instance"] for kind in case["scrapes"]}
    for alert in rules:
        if alert in STREAM_ABSENCE and "stream" not in case["scrapes"]:
            continue  # a case without a stream job fires it, rightly
        # 2 steps in: nothing can have fired yet
        lines += [
            f"      - eval_time: {(lead + 2) * step_s // 60}m",
            f"        alertname: {alert}",
            "        exp_alerts: []",
        ]
        lines += [f"      - eval_time: {(lead + length - 1) * step_s // 60}m", f"        alertname: {alert}"]
        if alert in FIRING[name]:
            kind = _kind(rules[alert], instance)
            value = annotation_value(alert, case, kind, step_s, lead)
            kept: dict[str, str] | None = None
            if kind == "flink":  # Flink's rules keep their series' labels (no aggregation)
                kept = {**_labels(next(iter(case["scrapes"][kind][-1]))), **TARGETS[kind]}
            lines += _expect(rules[alert], instance[kind], value, kept)
        else:
            lines += ["        exp_alerts: []"]
    return lines


def render(doc: dict[str, Any]) -> str:
    """The promtool unit tests of the alerts over the recorded scrapes (text)."""
    rules = _rules()
    lines = [
        "# GENERATED by scripts/record_alert_metrics.py --render from testdata/alert_metrics.json.gz: do",
        "# not edit. The alerts over series recorded while each failure was produced (one scrape =",
        "# 1m; the seconds series, SECONDS_GAUGES, x60 with it). alerts_static_test.yaml has the rest.",
        "rule_files:",
        "  - alerts.yaml",
        "evaluation_interval: 1m",
        "tests:",
    ]
    for name in CASE_ORDER:
        if name in doc["cases"]:
            lines += _case_lines(name, doc["cases"][name], rules)
    return "\n".join(lines) + "\n"
