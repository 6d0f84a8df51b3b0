"""`timing.png`: the step-time decomposition as stacked bars over steps (one bar per window).

matplotlib is imported here only, with the Agg backend (no display on a training host):
`pyplot` and `save_figure` serve `plot_eval` (pi_train._eval_report) too.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pi_train._timing import PARTS

_COLORS = {
    "data_wait": "#d62728",
    "h2d": "#ff7f0e",
    "compute": "#1f77b4",
    "checkpoint": "#9467bd",
    "other": "#7f7f7f",
}
_LABELS = {
    "data_wait": "data wait",
    "h2d": "host→device",
    "compute": "compute",
    "checkpoint": "checkpoint",
    "other": "other",
}


def pyplot(what: str) -> Any:
    """matplotlib.pyplot on the Agg backend (files only, no display).

    Raises:
        ImportError: matplotlib is missing; the message names `what` and the extra to install.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError(f"{what} needs matplotlib: pip install 'pi-lake[train]'") from err
    return plt


def save_figure(fig: Any, path: Path) -> Path:
    """Lay out `fig`, write it to `path` (its folder made) and close it; returns `path`."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_timing(records: Sequence[dict[str, Any]], path: Path, *, title: str = "") -> Path:
    """Draw the windows of `timing.jsonl` (per-step ms of each part, max over ranks) as stacked
    bars, with samples/s on a second axis; returns `path`.

    Raises:
        ImportError: matplotlib is missing (pip install 'pi-lake[train]').

    Example:
        >>> plot_timing(read_jsonl(Path("runs/train/timing.jsonl")), Path("runs/train/timing.png"))
    """
    plt = pyplot("plot_timing")
    windows = [r for r in records if r.get("steps")]
    steps = [int(r["step"]) for r in windows]
    width = 0.8 * min((b - a for a, b in itertools.pairwise(steps)), default=1)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    bottom = [0.0] * len(windows)
    for part in PARTS:
        values = [float(r["ms_per_step"][part]) for r in windows]
        ax.bar(steps, values, width=width, bottom=bottom, color=_COLORS[part], label=_LABELS[part])
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_xlabel("step (end of window)")
    ax.set_ylabel("ms per step (max over ranks)")
    ax.legend(loc="upper left", fontsize=8)
    rate = ax.twinx()
    rate.plot(steps, [float(r["samples_per_s"]) for r in windows], "k.-", label="samples/s")
    rate.set_ylabel("samples/s")
    rate.set_ylim(bottom=0)
    ax.set_title(title or "step-time decomposition", fontsize=10)
    return save_figure(fig, path)
