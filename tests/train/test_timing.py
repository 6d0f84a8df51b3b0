"""Step-time decomposition: windows and summary are maxima over ranks, the warm-up is apart,
the verdict names what bounds the step, and the plot is drawn."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pi_train import StepTimer, StepTimes, plot_timing, verdict


def _ms(data: float, compute: float, checkpoint: float = 0.0, h2d: float = 0.0, other: float = 0.0) -> dict:
    total = data + compute + checkpoint + h2d + other
    return {
        "data_wait": data,
        "h2d": h2d,
        "compute": compute,
        "checkpoint": checkpoint,
        "other": other,
        "total": total,
    }


@pytest.mark.parametrize(
    ("ms", "expected"),
    [
        (_ms(41, 30, other=29), "input-bound: 41% of step time waiting for data"),
        (_ms(10, 85, other=5), "compute-bound: 85% of step time in compute, 10% waiting for data"),
        (_ms(5, 20, h2d=75), "transfer-bound: 75% of step time copying batches to the device, 5% waiting"),
        (_ms(5, 20, checkpoint=75), "checkpoint-bound: 75% of step time writing checkpoints"),
        (_ms(5, 20, other=75), "overhead-bound: 75% of step time in logging and the loop"),
        (_ms(0, 0), "no steps measured"),
    ],
)
def test_verdict(ms: dict, expected: str) -> None:
    assert verdict(ms).startswith(expected)


def test_other_is_what_the_parts_leave() -> None:
    times = StepTimes(data_wait=0.2, h2d=0.01, compute=0.25, checkpoint=0.02, total=0.5)
    assert times.other == pytest.approx(0.02)
    assert StepTimes(data_wait=0.3, h2d=0.0, compute=0.3, total=0.5).other == 0.0  # never negative


def test_windows_take_the_slowest_rank_and_skip_the_warmup() -> None:
    other_rank = np.array([0.3, 0.0, 0.1, 0.0, 0.0, 0.45])  # per-step means on the other rank
    timer = StepTimer(global_batch=64, reduce_max=lambda v: np.maximum(v, other_rank), ranks=2)
    timer.add(StepTimes(data_wait=5.0, h2d=0.0, compute=9.0, total=14.0))  # warm-up (compilation)
    assert timer.window(step=1) is None
    for _ in range(4):
        timer.add(StepTimes(data_wait=0.1, h2d=0.01, compute=0.2, total=0.32))
    window = timer.window(step=5)
    assert window is not None and window["steps"] == 4 and window["ranks"] == 2
    assert window["ms_per_step"]["data_wait"] == pytest.approx(300.0)  # the other rank's
    assert window["ms_per_step"]["compute"] == pytest.approx(200.0)  # this rank's
    assert window["ms_per_step"]["total"] == pytest.approx(450.0)
    assert window["samples_per_s"] == pytest.approx(64 / 0.45, rel=1e-3)
    assert window["data_wait_fraction"] == pytest.approx(0.3 / 0.45, rel=1e-3)
    assert window["verdict"].startswith("input-bound: 67%")
    summary = timer.summary(step=5)
    assert summary["steps"] == 4 and summary["warmup_ms"][0]["compute"] == pytest.approx(9000.0)


def test_plot_draws_stacked_bars(tmp_path: Path) -> None:
    timer = StepTimer(global_batch=8, reduce_max=lambda v: v, warmup_steps=0)
    records = []
    for step in range(1, 9):
        timer.add(StepTimes(data_wait=0.01 * step, h2d=0.001, compute=0.05, total=0.07 + 0.01 * step))
        window = timer.window(step) if step % 2 == 0 else None
        if window is not None:
            records.append(window)
    path = plot_timing(records, tmp_path / "timing.png", title="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
