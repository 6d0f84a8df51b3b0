"""The docs block of the S3 bytes-per-sample benchmark (benchmarks/loader/s3_bytes.py), rendered
by `python -m benchmarks.render_docs` from benchmarks/baselines/s3_bytes.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _spread(node: dict[str, Any], fmt: str) -> str:
    return f"{fmt.format(node['median'])} ({fmt.format(node['min'])}–{fmt.format(node['max'])})"


def s3_bytes(b: Path) -> str:
    """Bytes fetched per sample from S3 (cold, warm) vs the encoded bytes the reader returned."""
    doc = json.loads((b / "s3_bytes.json").read_text())
    rows = []
    for name, what in (("spread", "one sample per episode (spread thin)"), ("shuffled", "4 per episode")):
        leg = doc[name]
        gets = [r["cold"]["range_requests_per_sample"] for r in leg["runs"]]
        requests = {"median": sorted(gets)[len(gets) // 2], "min": min(gets), "max": max(gets)}
        rows.append(
            f"| {what} | {_spread(leg['encoded_bytes_returned_per_sample'], '{:,.0f}')} "
            f"| {_spread(leg['cold_bytes_fetched_per_sample'], '{:,.0f}')} "
            f"| {_spread(leg['cold_fetched_over_returned'], '{:.2f}')}x "
            f"| {_spread(requests, '{:,.0f}')} "
            f"| {_spread(leg['warm_bytes_fetched_per_sample'], '{:,.0f}')} "
            f"| {'met' if leg['target_met'] else 'missed'} |"
        )
    return (
        f"{doc['episodes']} episodes compacted into {doc['files_after_compaction']['video']} video and "
        f"{doc['files_after_compaction']['steps']} steps file(s), on SeaweedFS; {doc['repeats']} "
        "interleaved repeats, median (min–max). Returned: the encoded bytes the reader asked for "
        "(footers, host-index columns, chunks, steps pages: the same on local disk).\n\n"
        "| samples | returned B/sample | cold fetched B/sample | cold fetched / returned | cold GETs/sample "
        "| warm fetched B/sample | target ≤ 1.5x |\n| --- | --- | --- | --- | --- | --- | --- |\n"
        + "\n".join(rows)
    )
