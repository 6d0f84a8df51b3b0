"""The `copy` figures block (`benchmarks.render_docs`): `pilake dataset copy` against a plain
parallel object copy, from benchmarks/baselines/copy.json."""

from __future__ import annotations

import json
from pathlib import Path


def copy_table(b: Path) -> str:
    """The block: ratio per end, median (min–max) of the interleaved repeats, and the verdict."""
    doc = json.loads((b / "copy.json").read_text())
    lake = doc["lake"]
    rows = []
    ends = [("s3", "local → SeaweedFS (s3://)", "plain"), ("local", "local → local", "plain")]
    if "local_fsync" in doc["ratio"]:  # the plain leg fsyncing each file as the copy does
        ends.append(("local_fsync", "local → local, plain leg with fsync", "plain_fsync"))
    for end, label, leg in ends:
        spread = doc["ratio"][end]
        side = end.split("_")[0]
        copy = sorted(r[f"{side}_copy_mib_s"] for r in doc["repeats"])
        plain = sorted(r[f"{side}_{leg}_mib_s"] for r in doc["repeats"])
        rows.append(
            f"| {label} | {copy[len(copy) // 2]} | {plain[len(plain) // 2]} | "
            f"{spread['median']:.3f} ({spread['min']:.3f}–{spread['max']:.3f}) | "
            f"{'met' if doc['met'][end] else 'missed'} |"
        )
    return (
        f"`baselines/copy.json`: a pin of {doc['episodes']} episodes, {doc['files']} files, "
        f"{doc['bytes'] / 2**20:,.0f} MiB ({lake['distinct']} one-minute {lake['size_px']} px episodes "
        f"committed {lake['replicas']} times each in group commits of {lake['group']}), {doc['workers']} "
        f"transfers in flight, {len(doc['repeats'])} interleaved repeats"
        + (
            " (every leg once untimed first; per repeat the SeaweedFS legs plain, copy, copy, plain or "
            "the reverse, their means compared)"
            if any("s3_plain_legs_s" in r for r in doc["repeats"])
            else ""
        )
        + f" on a shared {doc['cpus']}-core "
        f"machine (load average {doc['loadavg_start'][0]:.1f} at the start"
        + (
            f", {min(loads):.1f}–{max(loads):.1f} at the repeats' starts"
            if (loads := [r["loadavg_1m"] for r in doc["repeats"] if "loadavg_1m" in r])
            else ""
        )
        + (f"; {doc['load']}" if doc.get("load") else "")
        + "); ratio = plain seconds / "
        "copy seconds per repeat, median (min–max):\n\n"
        "| copy | copy MiB/s (median) | plain MiB/s (median) | ratio | ≥ "
        f"{doc['target']} on the whole spread |\n| --- | --- | --- | --- | --- |\n" + "\n".join(rows)
    )
