"""Figure blocks of the million-episode lake (issue 33 item 3), from benchmarks/baselines/scale.json:
its compaction and the figures before it (`million_notes`, appended to the `scale` block) and
where a cold `Dataset` open's time goes (`cold_open`, the block in docs/read-at-scale.md).

Example:
    >>> print(cold_open(Path("benchmarks/baselines")))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _s(value: Any, fmt: str = "{:.2f}") -> str:
    return "—" if value is None else fmt.format(value)


def million_notes(m: dict[str, Any]) -> str:
    """Sentences on the lake's compaction and the open figures measured before it."""
    out = []
    c = m.get("earlier_compaction") or m.get("compaction")
    if c:
        out.append(
            f" Compaction, earlier session (`{c['command']}`): {c['groups_merged']:,} of "
            f"{c['groups_small']:,} small file groups merged in {c['s']:,.0f} s "
            f"({c['episodes_per_s']:,.0f} episodes/s, load "
            f"{c['load']}); episodes files {c['files_before']['episodes']:,} -> "
            f"{c['files_after']['episodes']:,}. {c['note']}"
        )
    speed = m.get("compaction_speed")
    if speed:
        old, new = speed["old"], speed["new"]
        out.append(
            f" Full-rewrite speed ({speed['how']}): before {_s(old['s_per_group'])} s a group, "
            f"{_s(old['mb_per_s'])} MB/s ({old['spread']}); after {_s(new['s_per_group'])} s a group, "
            f"{_s(new['mb_per_s'])} MB/s ({new['spread']}). {speed.get('note', '')}"
        )
    merge = m.get("marker_merge")
    if merge:
        out.append(
            f" Marker merge (`{merge['command']}`): episodes files {merge['files_before']['episodes']:,} -> "
            f"{merge['files_after']['episodes']:,} in {merge['s']:,.0f} s for the whole lake (steps and "
            f"video files untouched). {merge.get('note', '')}"
        )
    if m.get("open_note"):
        out.append(f" Open: {m['open_note']}.")
    b = m.get("before_compaction")
    if b:
        out.append(
            f" Before it (and before the open-path changes): Dataset open {_s(b.get('open_cold_s'))} s cold "
            f"host, {_s(b.get('open_warm_s'))} s warm host ({b.get('measured', '')})."
        )
    return "".join(out)


def cold_open(b: Path) -> str:
    """The cold open's steps, profiled before and after (million.cold_open_profile)."""
    doc = json.loads((b / "scale.json").read_text())
    prof = (doc.get("million") or {}).get("cold_open_profile")
    if not prof:
        return "No cold-open profile recorded yet (`python -m benchmarks.scale.cold_open_profile`)."
    legs = [(name, prof[name]) for name in ("before", "after", "after_marker_merge") if prof.get(name)]
    header = "| step | " + " | ".join(
        f"{name}: {leg['episodes_files']:,} episodes files, load {leg['load_before'][0]}"
        for name, leg in legs
    )
    lines = [header + " |", "|---|" + "---:|" * len(legs)]
    steps = [s["step"] for s in legs[0][1]["steps"]]
    for step in steps:
        cells = []
        for _, leg in legs:
            found = next((s["s"] for s in leg["steps"] if s["step"] == step), None)
            cells.append(_s(found))
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    lines.append(
        "| the same open again in the process | "
        + " | ".join(_s(leg.get("open_again_in_process_s")) for _, leg in legs)
        + " |"
    )
    notes = [f"{name}: {leg['note']}" for name, leg in legs if leg.get("note")]
    return "\n".join(lines) + ("\n\n" + " ".join(notes) if notes else "")
