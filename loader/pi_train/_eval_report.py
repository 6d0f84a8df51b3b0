"""An evaluation's report for people: a text table (`format_eval`) and a plot (`plot_eval`).

matplotlib is imported in `plot_eval` only, with the Agg backend (no display needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pi_train._plot import pyplot, save_figure


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def format_eval(report: dict[str, Any]) -> str:
    """The report of `evaluate_checkpoint` as text: the overall figures, L1/L2 per horizon
    step, and one row per robot and per task.

    Example:
        >>> print(format_eval(report))
        checkpoint step 40 (torch) on pick-v1-val: 96 samples of 8 episodes, l2 loss 0.4120
        ...
    """
    lines = [
        f"checkpoint step {report['step']} ({report['framework']}) on {report['dataset']}: "
        f"{report['samples']} samples of {report['episodes']} episodes, "
        f"{report['loss_kind']} loss {_num(report['loss'])} (normalized actions, as in training)",
        "",
        "action error per horizon step (lake units):",
        f"  {'step':>4}  {'L1':>10}  {'L2':>10}  {'count':>6}",
    ]
    for row in report["horizon"]:
        lines.append(f"  {row['step']:>4}  {_num(row['l1']):>10}  {_num(row['l2']):>10}  {row['count']:>6}")
    lines.append(f"  {'all':>4}  {_num(report['l1']):>10}  {_num(report['l2']):>10}")
    for group in ("robot", "task"):
        table = report.get(f"by_{group}") or {}
        if not table:
            continue
        w = max(20, *(len(label) for label in table))  # task names are sentences
        lines += [
            "",
            f"per {group}:",
            f"  {group:<{w}}  {'samples':>7}  {'L1':>10}  {'L2':>10}  {'loss':>10}",
        ]
        for label, r in table.items():
            l1, l2, loss = _num(r["l1"]), _num(r["l2"]), _num(r["loss"])
            lines.append(f"  {label:<{w}}  {r['samples']:>7}  {l1:>10}  {l2:>10}  {loss:>10}")
    return "\n".join(lines)


def plot_eval(report: dict[str, Any], path: Path) -> Path:
    """L1 and L2 against the horizon step: overall (black) and per task and robot; returns `path`.

    Raises:
        ImportError: matplotlib is missing (pip install 'pi-lake[train]').

    Example:
        >>> plot_eval(report, Path("runs/train-torch/eval-val-step40/eval.png"))
    """
    plt = pyplot("plot_eval")
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, metric in zip(axes, ("l1", "l2"), strict=True):
        series = [("all", report["horizon"], {"color": "black", "linewidth": 2})]
        for group, style in (("task", "-"), ("robot", "--")):
            for label, r in (report.get(f"by_{group}") or {}).items():
                series.append((f"{group} {label}", r["horizon"], {"linestyle": style, "linewidth": 1}))
        for name, rows, kw in series:
            points = [(r["step"], r[metric]) for r in rows if r[metric] is not None]
            ax.plot([p[0] for p in points], [p[1] for p in points], label=name, **kw)
        ax.set_xlabel("horizon step (actions ahead)")
        ax.set_ylabel(f"action {metric.upper()} (lake units)")
        ax.set_ylim(bottom=0)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"step {report['step']} ({report['framework']}) on {report['dataset']}: {report['samples']} samples",
        fontsize=10,
    )
    return save_figure(fig, path)
