"""deploy/k8s/verify.yaml: the nightly scrub runs `pilake verify` with flags the CLI accepts,
read-only (no repair), with the stream job's image, settings and credentials."""

from __future__ import annotations

import shlex

from tests.deploy.test_manifests import _one


def test_the_verify_cronjob_scrubs_a_rotating_sample_with_the_job_settings() -> None:
    cron = _one("CronJob", "pilake-verify")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    job = cron["spec"]["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0  # a damaged lake stays damaged: the failure is the signal
    pod = job["template"]["spec"]
    (container,) = pod["containers"]
    script = " ".join(container["args"])
    assert "pilake verify" in script and "repair" not in script
    words = shlex.split(script.replace('"$(date +%j)"', "123"))
    args = words[words.index("verify") :]
    from pi_jobs.cli import build_parser

    parsed = build_parser().parse_args(args)  # the CLI has this command and these flags
    assert 0 < parsed.sample < 1 and parsed.seed == 123 and parsed.state and parsed.report
    flink = _one("FlinkDeployment")
    assert container["image"] == flink["spec"]["image"]
    assert container["envFrom"] == flink["spec"]["podTemplate"]["spec"]["containers"][0]["envFrom"]
    mounted = {m["name"] for m in container["volumeMounts"]}
    assert {"pilake-config", "verify-state"} <= mounted
