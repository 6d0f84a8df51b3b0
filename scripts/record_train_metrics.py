"""Record a real training run's /metrics for the alert's unit test, and render that test.

    .venv/bin/python scripts/record_train_metrics.py          # record two runs, then render
    .venv/bin/python scripts/record_train_metrics.py --render # render from the committed record

Records two tiny `pi_train.train` runs on lakes written by tests/fixtures/lake_factory, each
serving its live metrics (`metrics_port`) and scraped over HTTP every 0.25 s from another
thread, as Prometheus would (scraping between steps on the training thread would let the loader
work ahead meanwhile and hide the data wait); each run stops at its deadline (`stop_after_s`);
the scrapes before its first step (opening the lake) are left out but the last:

- input_bound: 320x240 frames decoded in the training process (workers=0) and resized to 32x32
  for a tiny model: the step waits for data;
- compute_bound: 32x32 frames read by one loader worker ahead of the step, resized up to 128x128:
  the step computes.

The step-time series (`pilake_train_step_seconds` sums and counts of every part, buckets of
data_wait and total, and `pilake_train_steps_total`) of every scrape go to
deploy/prometheus/testdata/train_metrics.json as they were served. `--render` writes
deploy/prometheus/train_alerts_test.yaml from that file:
each recorded scrape becomes one minute of promtool's input series. The runs last seconds, so
time is stretched; the alert is a ratio of two rates of the same scrapes, which a stretch of
the time axis leaves as it was. tests/deploy/test_prometheus.py checks that the committed test
file is what `--render` makes of the committed record, so no value in it is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "deploy" / "prometheus" / "testdata" / "train_metrics.json"
TEST_FILE = ROOT / "deploy" / "prometheus" / "train_alerts_test.yaml"
KEPT = ("pilake_train_step_seconds_sum", "pilake_train_step_seconds_count", "pilake_train_steps_total")
BUCKETS_OF = ("data_wait", "total")  # the parts whose buckets are kept (the others': sums, counts)
# the labels a Prometheus scrape adds to what the endpoint serves
TARGET = {"job": "pilake-train", "instance": "pilake-train-0.pilake-train:9490"}
CASES: dict[str, dict[str, Any]] = {
    "input_bound": {
        "lake": {"size": (320, 240), "cameras": ("front", "wrist")},
        "train": {"workers": 0, "image_size": (32, 32), "batch_size": 8},
    },
    "compute_bound": {
        "lake": {"size": (32, 32), "cameras": ("front",)},
        "train": {"workers": 1, "image_size": (128, 128), "batch_size": 8},
    },
}
RUN_S = 16.0  # each run's deadline: 4-6 s to start, then 30-40 scrapes (minutes of promtool time)
SCRAPE_EVERY_S = 0.25


def _scrape(port: int) -> dict[str, float]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            bucket = s.name == "pilake_train_step_seconds_bucket" and s.labels["part"] in BUCKETS_OF
            if s.name in KEPT or bucket:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}"] = s.value
    return out


def record() -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from pi_train import TrainConfig, train

    from tests.conftest import _free_port
    from tests.fixtures.lake_factory import write_lake

    cases: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in CASES.items():
            lake = write_lake(
                Path(tmp) / f"lake-{name}", episodes=4, steps=24, garbage_attempt=False, **case["lake"]
            )
            port = _free_port()
            scrapes: list[dict[str, float]] = []
            done = threading.Event()

            def scraper(p: int = port, out: list[dict[str, float]] = scrapes, stop: Any = done) -> None:
                while not stop.wait(SCRAPE_EVERY_S):
                    try:
                        out.append(_scrape(p))
                    except OSError:
                        continue  # not serving yet, or no more

            thread = threading.Thread(target=scraper, daemon=True)
            config = TrainConfig(
                lake=lake.layout.root,
                framework="torch",
                steps=1_000_000,
                stop_after_s=RUN_S,
                action_horizon=4,
                out_dir=str(Path(tmp) / f"run-{name}"),
                checkpoint_every=10,
                log_every=10,
                device="cpu",
                threads=1,
                plot=False,
                metrics_port=port,
                **case["train"],
            )
            thread.start()
            try:
                result = train(config)
            finally:
                done.set()
                thread.join()
            # from the last scrape before the first step (opening the lake, the warm-up step)
            steps = [sc.get('pilake_train_steps_total{rank="0"}', 0.0) for sc in scrapes]
            first = next(i for i, n in enumerate(steps) if n > 0)
            scrapes = scrapes[max(first - 1, 0) :]
            series = sorted(scrapes[-1])
            cases[name] = {
                "config": json.loads(config.to_json()) | {"lake": "(temporary)", "out_dir": "(temporary)"},
                "lake": {k: list(v) for k, v in case["lake"].items()},
                "data_wait_fraction": result.summary["data_wait_fraction"],
                "verdict": result.summary["verdict"],
                "series": {s: [scrape.get(s) for scrape in scrapes] for s in series},
            }
            print(f"{name}: {result.summary['verdict']} ({len(scrapes)} scrapes)", flush=True)
            shutil.rmtree(Path(tmp) / f"run-{name}", ignore_errors=True)
    return {
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": f"{platform.node()} {platform.machine()}, python {platform.python_version()}",
        "run_s": RUN_S,
        "scrape": f"every {SCRAPE_EVERY_S} s over HTTP from another thread while the run trains",
        "cases": cases,
    }


def _values(values: list[float | None]) -> str:
    return " ".join("_" if v is None else repr(float(v)) for v in values)


def _series(name: str, labels: str) -> str:
    extra = ",".join(f'{k}="{v}"' for k, v in TARGET.items())
    inner = f"{labels[1:-1]},{extra}" if labels != "{}" else extra
    return f"{name}{{{inner}}}"


def render(doc: dict[str, Any]) -> str:
    """The promtool unit test of PilakeTrainInputBound over the recorded scrapes (text)."""
    lines = [
        "# GENERATED by scripts/record_train_metrics.py --render from testdata/train_metrics.json: do",
        "# not edit. Unit tests of the training alert over a real tiny run's scrapes (one scrape = 1m).",
        "# Run: promtool test rules train_alerts_test.yaml (tests/deploy/test_prometheus.py runs it).",
        "rule_files:",
        "  - alerts.yaml",
        "evaluation_interval: 1m",
        "tests:",
    ]
    alert = {
        "summary": "A training run waits for data more than 20% of its step",
        "description": (
            "Rank 0 of pilake-train (pilake-train-0.pilake-train:9490) has spent more than 20% of its "
            "step time waiting for the loader for 10 minutes: the input pipeline does not keep up "
            "(more loader workers, the node-local cache, docs/training-metrics.md)."
        ),
    }
    for name, expect in (("input_bound", True), ("compute_bound", False)):
        case = doc["cases"][name]
        lines += [
            f"  # {name}: recorded {doc['recorded']}, {case['verdict']}",
            "  - interval: 1m",
            "    input_series:",
        ]
        for key, values in case["series"].items():
            brace = key.index("{")
            lines += [
                f"      - series: '{_series(key[:brace], key[brace:])}'",
                f"        values: '{_values(values)}'",
            ]
        lines += ["    alert_rule_test:"]
        # 5m of rate window and 10m of `for` have not passed yet: quiet either way
        lines += ["      - eval_time: 10m", "        alertname: PilakeTrainInputBound"]
        lines += ["        exp_alerts: []"]
        # the last recorded scrape: 5m of rate window and 10m of `for` must fit before it
        last = len(next(iter(case["series"].values()))) - 1
        if last < 17:
            raise SystemExit(f"{name}: {last + 1} scrapes are too few: raise RUN_S, record again")
        lines += [f"      - eval_time: {last}m", "        alertname: PilakeTrainInputBound"]
        if expect:
            lines += [
                "        exp_alerts:",
                "          - exp_labels:",
                "              severity: warning",
                '              rank: "0"',
                f"              job: {TARGET['job']}",
                f"              instance: {TARGET['instance']}",
                "            exp_annotations:",
                f'              summary: "{alert["summary"]}"',
                f'              description: "{alert["description"]}"',
            ]
        else:
            lines += ["        exp_alerts: []"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--render", action="store_true", help="render the test from the committed record")
    args = parser.parse_args(argv)
    if not args.render:
        doc = record()
        RECORD.parent.mkdir(parents=True, exist_ok=True)
        RECORD.write_text(json.dumps(doc, indent=1) + "\n")
    TEST_FILE.write_text(render(json.loads(RECORD.read_text())))
    print(f"wrote {TEST_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
