"""The one rule every benchmark and `check_baselines` use for the figures they report.

A ratio of two legs (pi_loader / the decode limit, 2 workers / 0) is reported only from legs run
interleaved in one process tree, repeat after repeat (`interleaved`), at least `MIN_REPEATS`
times each, as the median of the per-repeat ratios with their spread, min to max (`ratio`). A
single figure measured in repeats is a `Spread` the same way (`spread`). A target is met only
when the whole spread clears it (`judge`): a spread that straddles the threshold is
"undecided", which is not met; a best-of-2 that crosses a threshold on noise cannot pass.
`check_baselines` judges a rerun against a baseline with the same function (`regression`).

In the JSON a spread is `{"median", "min", "max", "repeats", "values"}`; a figure committed
before this rule (one run, or best of 2) is `{"legacy": value, "needs_rerun": reason}`
(`legacy`), which no target or check counts as measured.

    >>> s = ratio([2516.0, 2480.0, 2600.0], [2017.0, 2100.0, 1950.0], what="limit / pi_loader")
    >>> round(s.median, 3), round(s.low, 3), round(s.high, 3)
    (1.247, 1.181, 1.333)
    >>> judge(s, 1.2)["verdict"]
    'undecided'
    >>> judge(s, 1.1)["met"]
    True
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "MIN_REPEATS",
    "FiguresError",
    "Spread",
    "interleaved",
    "judge",
    "legacy",
    "ratio",
    "regression",
    "spread",
    "spread_of",
    "text_of",
]

# Three is the fewest repeats whose median is not one of two runs picked by noise, and whose
# min-max says how far a figure moves under this shared machine's load.
MIN_REPEATS = 3
T = TypeVar("T")


class FiguresError(ValueError):
    """A figure that the rule does not allow: too few repeats, legs not paired, not a number."""


@dataclass(frozen=True, slots=True)
class Spread:
    """A figure measured `len(values)` times: its median and its spread (min to max).

    Example:
        >>> spread([3.0, 1.0, 2.0], what="x").text("{:.1f}")
        '2.0 (1.0–3.0)'
    """

    median: float
    low: float
    high: float
    values: tuple[float, ...]

    def text(self, fmt: str = "{:.3g}") -> str:
        """'median (min–max)' with `fmt` for each number."""
        return f"{fmt.format(self.median)} ({fmt.format(self.low)}–{fmt.format(self.high)})"

    def to_json(self, digits: int = 4) -> dict[str, Any]:
        """The JSON form (see the module doc), numbers rounded to `digits` significant digits."""
        return {
            "median": _round(self.median, digits),
            "min": _round(self.low, digits),
            "max": _round(self.high, digits),
            "repeats": len(self.values),
            "values": [_round(v, digits) for v in self.values],
        }


def _round(value: float, digits: int) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, max(digits - 1 - math.floor(math.log10(abs(value))), 0))


def spread(values: Sequence[float], *, what: str) -> Spread:
    """The median and min-max of `values`, one per repeat.

    Raises:
        FiguresError: fewer than `MIN_REPEATS` values, or one is not a finite number.

    Example:
        >>> spread([1.0, 2.0], what="samples/s")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        FiguresError: samples/s: 2 repeat(s), at least 3 are needed for a median with its spread ...
    """
    numbers = [float(v) for v in values]
    if len(numbers) < MIN_REPEATS:
        raise FiguresError(
            f"{what}: {len(numbers)} repeat(s), at least {MIN_REPEATS} are needed for a median with "
            f"its spread (run with --repeats {MIN_REPEATS})"
        )
    bad = [v for v in numbers if not math.isfinite(v)]
    if bad:
        raise FiguresError(f"{what}: not a finite number in {numbers}")
    return Spread(statistics.median(numbers), min(numbers), max(numbers), tuple(numbers))


def ratio(numerators: Sequence[float], denominators: Sequence[float], *, what: str) -> Spread:
    """The ratio of two interleaved legs: repeat i of one over repeat i of the other (they ran
    back to back under the same load), as a `Spread` of the per-repeat ratios.

    Raises:
        FiguresError: the legs have different repeat counts (not interleaved), fewer than
            `MIN_REPEATS`, or a denominator is 0.

    Example:
        >>> ratio([2.0, 4.0, 3.0], [1.0, 2.0, 1.0], what="a / b").median
        2.0
    """
    if len(numerators) != len(denominators):
        raise FiguresError(
            f"{what}: the legs ran {len(numerators)} and {len(denominators)} times; a ratio needs "
            "the two legs interleaved, one of each per repeat"
        )
    if any(float(d) == 0 for d in denominators):
        raise FiguresError(f"{what}: a denominator is 0 in {list(denominators)}")
    return spread([float(n) / float(d) for n, d in zip(numerators, denominators, strict=True)], what=what)


def interleaved(legs: Sequence[T], repeats: int) -> Iterator[tuple[int, T]]:
    """(repeat, leg) in the order to run them: every leg once per repeat, the order rotated by
    one each repeat, so no leg always runs first (cold) or right after the same other leg.

    Raises:
        FiguresError: `repeats` below `MIN_REPEATS`.

    Example:
        >>> [leg for _, leg in interleaved(["a", "b"], 3)]
        ['a', 'b', 'b', 'a', 'a', 'b']
    """
    if repeats < MIN_REPEATS:
        raise FiguresError(f"repeats must be >= {MIN_REPEATS} for a median with its spread, got {repeats}")
    order = list(legs)
    for repeat in range(repeats):
        shift = repeat % len(order) if order else 0
        for leg in order[shift:] + order[:shift]:
            yield repeat, leg


def judge(figure: Spread | None, threshold: float, *, higher_is_better: bool = True) -> dict[str, Any]:
    """Whether `figure` meets `threshold`: "met" only when its whole spread clears it, "missed"
    when none of it does, "undecided" (not met) when the spread straddles it; "not measured"
    when there is no spread (a legacy figure or a leg that did not run).

    Returns:
        {"met": True / False / None, "verdict", "threshold", "median", "min", "max"}.

    Example:
        >>> judge(spread([0.65, 0.71, 0.68], what="x"), 0.7)["verdict"]
        'undecided'
    """
    if figure is None:
        return {"met": None, "verdict": "not measured", "threshold": threshold}
    worst, best = (figure.low, figure.high) if higher_is_better else (figure.high, figure.low)
    clears: Callable[[float], bool] = (
        (lambda v: v >= threshold) if higher_is_better else (lambda v: v <= threshold)
    )
    verdict = "met" if clears(worst) else "missed" if not clears(best) else "undecided"
    return {
        "met": verdict == "met",
        "verdict": verdict,
        "threshold": threshold,
        "median": figure.median,
        "min": figure.low,
        "max": figure.high,
    }


def regression(
    baseline: Spread, now: Spread, tolerance: float, *, higher_is_better: bool = True
) -> dict[str, Any]:
    """`judge` of a rerun against the baseline's median moved by `tolerance` (down where
    higher is better, up where lower is): "ok" only when the rerun's whole spread clears that
    bound; "regressed" when none of it does; "undecided" when it straddles (not ok: rerun with
    more repeats). `change` is the median's relative worsening (> 0: worse).

    Example:
        >>> base = spread([1.0, 1.1, 0.9], what="b")
        >>> regression(base, spread([0.5, 0.6, 0.55], what="n"), 0.25)["status"]
        'regressed'
    """
    bound = baseline.median * (1 - tolerance if higher_is_better else 1 + tolerance)
    verdict = judge(now, bound, higher_is_better=higher_is_better)["verdict"]
    worse = baseline.median - now.median if higher_is_better else now.median - baseline.median
    change = worse / abs(baseline.median) if baseline.median else (math.inf if worse > 0 else 0.0)
    status = {"met": "ok", "missed": "regressed", "undecided": "undecided"}[verdict]
    return {"status": status, "bound": bound, "change": change}


def legacy(value: float | None, reason: str) -> dict[str, Any]:
    """A figure committed before this rule, kept for the record and marked for a rerun; never
    a spread (see the module doc).

    Example:
        >>> legacy(0.711, "best of 2")
        {'legacy': 0.711, 'needs_rerun': 'best of 2'}
    """
    return {"legacy": value, "needs_rerun": reason}


def spread_of(node: object) -> Spread | None:
    """The `Spread` a JSON node holds, or None when it holds none (a bare number, a legacy
    figure, missing).

    Raises:
        FiguresError: the node claims to be a spread but is not a valid one.

    Example:
        >>> spread_of({"median": 2.0, "min": 1.0, "max": 3.0, "repeats": 3, "values": [1, 2, 3]}).high
        3.0
    """
    if not isinstance(node, Mapping) or "median" not in node:
        return None
    values = node.get("values")
    if not isinstance(values, list):
        raise FiguresError(f"a spread without its values: {dict(node)}")
    s = spread([float(v) for v in values], what="a spread in the JSON")
    stated = (float(node["median"]), float(node["min"]), float(node["max"]))
    found = (s.median, s.low, s.high)
    if not all(math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-9) for a, b in zip(stated, found, strict=True)):
        raise FiguresError(f"a spread whose median/min/max {stated} are not those of its values {values}")
    return s


def text_of(node: object, fmt: str = "{:.3g}") -> str:
    """How a JSON figure reads in a table: 'median (min–max)' for a spread, the value with
    "(needs rerun)" for a legacy figure (its reason is in the JSON), "-" for none.

    Example:
        >>> text_of({"legacy": 0.711, "needs_rerun": "best of 2"}, "{:.2f}")
        '0.71 (needs rerun)'
    """
    figure = spread_of(node)
    if figure is not None:
        return figure.text(fmt)
    if isinstance(node, Mapping) and "legacy" in node:
        value = node["legacy"]
        shown = "-" if value is None else fmt.format(value)
        return f"{shown} (needs rerun)"
    if isinstance(node, int | float) and not isinstance(node, bool):
        return fmt.format(node)
    return "-"
