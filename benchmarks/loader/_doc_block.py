"""The `loader_cpu` figures block: CPU per sample over the raw decode leg's (issue 35 item 1).

Rendered by `python -m benchmarks.render_docs` from `benchmarks/baselines/loader_cpu.json` (the
loader benchmark's CPU legs,
`--loaders raw,pi_loader,pi_loader_torch,pi_loader_torch_batches,pi_loader_trim_off`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LEGS = {
    "raw": "raw decode limit",
    "pi_loader": "`Loader`",
    "pi_loader_torch": "`DataLoader(Dataset, batch_size=32)`",
    "pi_loader_torch_batches": "`adapters.torch_dataloader(Loader)`",
    "pi_loader_trim_off": "`Loader`, workers' heap trim off (`PILAKE_LOADER_HEAP_TRIM=off`)",
}
TARGETS = {"pi_loader": 1.15, "pi_loader_torch": 1.3, "pi_loader_torch_batches": 1.3}


def _spread(f: dict[str, Any] | None, fmt: str) -> str:
    if not f:
        return "–"
    return f"{fmt.format(f['median'])} ({fmt.format(f['min'])}–{fmt.format(f['max'])})"


def _verdict(ratios: list[dict[str, Any]], target: float) -> str:
    if not ratios:
        return "not measured"
    if all(r["max"] <= target for r in ratios):
        return "met"
    if any(r["min"] > target for r in ratios):
        return "missed"
    return "undecided (a spread straddles it)"


def loader_cpu(b: Path) -> str:
    """Markdown: each leg's CPU ms per sample and its ratio to the raw leg's, 1 and 2 workers."""
    doc = json.loads((b / "loader_cpu.json").read_text())
    workers = sorted(doc["figures"], key=int)
    rows = []
    for name, label in LEGS.items():
        if not any(name in doc["figures"][w] for w in workers):
            continue  # a leg this run did not have
        cells = [label]
        ratios = []
        for w in workers:
            cells.append(_spread(doc["figures"][w].get(name, {}).get("cpu_ms_per_sample"), "{:.2f}"))
            ratio = doc["cpu_vs_raw"][w].get(name)
            if ratio:
                ratios.append(ratio)
            cells.append("1" if name == "raw" else _spread(ratio, "{:.2f}"))
        target = TARGETS.get(name)
        cells.append("" if target is None else f"≤ {target:g}: {_verdict(ratios, target)}")
        rows.append(cells)
    header = ["leg"]
    for w in workers:
        header += [f"{w} worker{'s' if w != '1' else ''}, ms", "× raw"]
    header.append("target")
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    load = doc.get("machine", {}).get("load_average_at_end", ["?"])[0]
    return (
        f"`baselines/loader_cpu.json` (process-tree CPU per sample, {doc['repeats']} interleaved "
        f"repeats, median (min–max); × raw: repeat by repeat over the raw decode leg's; "
        f"{doc['data']['episodes']} episodes, batch {doc['sample']['batch_size']}, "
        f"{doc['machine']['cpus']} cores, load average {load:g} at the end; a target is met only "
        f"when the whole spread clears it):\n\n" + "\n".join(lines)
    )
