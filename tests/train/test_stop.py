"""`pi_train._stop`: the handler only notes the signal, the ranks agree on the maximum reason,
deadlines are checked against their clocks, and bad deadlines are refused with a reason."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from pi_train import DEADLINE_ENV, StopRequest, TrainConfig, deadline_from_env


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _identity(values: np.ndarray) -> np.ndarray:
    return values


def test_sigterm_only_sets_the_request_and_the_old_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    stop = StopRequest()
    with stop.installed():
        assert stop.agreed(_identity) is None
        os.kill(os.getpid(), signal.SIGTERM)  # without the handler this ends the test process
        os.kill(os.getpid(), signal.SIGTERM)  # a second one changes nothing
        assert stop.signal_name == "SIGTERM" and stop.signal_at is not None
        first = stop.signal_at
        assert stop.agreed(_identity) == "SIGTERM"
        assert stop.signal_at == first
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_maximum_over_ranks_decides() -> None:
    stop = StopRequest()  # this rank got nothing
    assert stop.agreed(lambda v: np.maximum(v, 2.0)) == "SIGTERM"  # another rank got SIGTERM
    assert stop.signal_at is None and stop.decided_at is not None
    assert StopRequest().agreed(lambda v: np.maximum(v, 1.0)) == "deadline"
    assert StopRequest().agreed(lambda v: np.maximum(v, 0.0)) is None


def test_stop_after_s_counts_from_the_request() -> None:
    clock = Clock()
    stop = StopRequest(stop_after_s=30.0, clock=clock)
    clock.now += 29.9
    assert stop.agreed(_identity) is None
    clock.now += 0.1
    assert stop.agreed(_identity) == "deadline"
    assert StopRequest(stop_after_s=0.0).agreed(_identity) == "deadline"


def test_a_unix_deadline_stops_at_and_after_it() -> None:
    wall = Clock(1_800_000_000.0)
    stop = StopRequest(deadline=1_800_000_010.0, wall=wall)
    assert stop.local_reason() is None
    wall.now = 1_800_000_010.0
    assert stop.local_reason() == "deadline"


def test_deadline_from_env() -> None:
    assert deadline_from_env({}) is None
    assert deadline_from_env({DEADLINE_ENV: " "}) is None
    assert deadline_from_env({DEADLINE_ENV: "1798761600"}) == 1798761600.0
    for bad in ("tomorrow", "-5", "0", "nan", "inf", "1e999", "12:00"):
        with pytest.raises(ValueError, match=f"{DEADLINE_ENV} must be a Unix time in seconds.*{bad!r}"):
            deadline_from_env({DEADLINE_ENV: bad})


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), True, "60"])
def test_stop_after_s_is_validated(bad: object) -> None:
    with pytest.raises(ValueError, match="stop_after_s must be a number of seconds >= 0"):
        TrainConfig(lake="lake", stop_after_s=bad)  # type: ignore[arg-type]
    config = TrainConfig(lake="lake", stop_after_s=90)
    assert TrainConfig.from_json(config.to_json()) == config


def test_install_again_takes_the_signal_back_and_uninstall_restores_the_first() -> None:
    before = signal.getsignal(signal.SIGTERM)
    stop = StopRequest()
    with stop.installed():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as a framework joining its group does
        stop.install()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.local_reason() == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before
