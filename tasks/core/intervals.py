"""The mean ± 95 % Student-t interval of a score over training seeds, how many seeds an interval needs (Stein), and
whether one score is higher than another (Welch) — every interval the report, the tables and the benchmarks print."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from scipy import stats

CONFIDENCE = 0.95


def t_quantile(freedom: float) -> float:
    """t(0.975, ``freedom``): the Student-t quantile every 95 % interval over seeds is built from.

    >>> round(t_quantile(2), 4)
    4.3027
    """
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, freedom))


def percent(share: float) -> str:
    """``share`` in percent to one decimal, a half rounded up, from its value to 6 digits: a mean read back from a
    table (kept to 6 digits) and the same mean computed from the seeds print alike (``.1f`` of 88.85 printed 88.8 from
    one and 88.9 from the other).

    >>> percent(0.8885), percent(0.888500000001), percent(0.88849)
    ('88.9', '88.9', '88.8')
    """
    if not math.isfinite(share):
        return f"{100 * share:.1f}"
    return str(Decimal(repr(round(100 * share, 6))).quantize(Decimal("0.1"), ROUND_HALF_UP))


@dataclass(frozen=True)
class Interval:
    """A score over seeds: its mean, standard error and the 95 % Student-t half-width (nan for one seed)."""

    mean: float
    standard_error: float
    seeds: int

    @property
    def half_width(self) -> float:
        if self.seeds < 2:
            return math.nan
        return t_quantile(self.seeds - 1) * self.standard_error

    def percent(self) -> str:
        """``71.3 ± 2.1`` in percent; the mean alone for one seed."""
        if self.seeds < 2:
            return percent(self.mean)
        return f"{percent(self.mean)} ± {percent(self.half_width)}"


def interval(values: Sequence[float]) -> Interval:
    """Mean ± t(0.975, n−1)·s/√n over the seeds' scores.

    >>> round(interval([0.6, 0.7, 0.8]).half_width, 4)  # s = 0.1, t(0.975, 2) = 4.3027
    0.2484
    """
    if not values:
        raise ValueError("no scores to summarise")
    count = len(values)
    mean = sum(values) / count
    if count == 1:
        return Interval(mean, math.nan, 1)
    spread = math.sqrt(sum((value - mean) ** 2 for value in values) / (count - 1))
    return Interval(mean, spread / math.sqrt(count), count)


def stein_seeds(pilot: Sequence[float], half_width: float, most: int) -> int:
    """Stein's two-stage rule (Stein 1945, *Ann. Math. Statist.* 16: 243-258): the seeds a row needs for a 95 %
    interval of ``half_width`` around its mean, from the spread s₀ of its first n₀ = ``len(pilot)`` seeds' scores:
    max(n₀, ⌈(t(0.975, n₀ − 1) · s₀ / half_width)²⌉), at most ``most``. The pilot's spread is independent of the
    seeds still to come, so the mean over all of them keeps the interval's 95 % (for normal scores).

    >>> stein_seeds([0.6, 0.7, 0.8], 0.1, 50)  # s0 = 0.1, t(0.975, 2) = 4.303: 4.303² = 18.5
    19
    >>> stein_seeds([0.9] * 10, 0.03, 30), stein_seeds([0.6, 0.7, 0.8], 0.1, 12)  # no spread; the cap
    (10, 12)
    """
    count = len(pilot)
    if count < 2:
        raise ValueError("Stein's rule needs a pilot of at least 2 seeds")
    spread = statistics.stdev(pilot)
    quantile = t_quantile(count - 1)
    return min(most, max(count, math.ceil((quantile * spread / half_width) ** 2)))


def gap_interval(first: Interval, second: Interval) -> tuple[float, float]:
    """95 % Welch interval of ``first.mean − second.mean``: how large a difference the seeds leave possible.

    An undecided comparison says no more than this: a gap outside the interval is ruled out at 95 %.

    >>> low, high = gap_interval(interval([0.70, 0.71, 0.72]), interval([0.50, 0.52, 0.51]))
    >>> round(low, 3), round(high, 3)
    (0.177, 0.223)
    """
    if first.seeds < 2 or second.seeds < 2:
        return (-math.inf, math.inf)
    gap, error, freedom = _welch(first, second)
    if error == 0:
        return (gap, gap)
    half = t_quantile(freedom) * error
    return (gap - half, gap + half)


def _welch(first: Interval, second: Interval) -> tuple[float, float, float]:
    """The gap of the means, its standard error and Welch-Satterthwaite's degrees of freedom (nan without spread)."""
    a, b = first.standard_error**2, second.standard_error**2
    if a + b == 0:
        return first.mean - second.mean, 0.0, math.nan
    freedom = (a + b) ** 2 / (a**2 / (first.seeds - 1) + b**2 / (second.seeds - 1))
    return first.mean - second.mean, math.sqrt(a + b), freedom


def compare(claimed_higher: Interval, other: Interval) -> str:
    """Whether ``claimed_higher`` beats ``other``: Welch's two-sided t-test on the seeds' means at 95 %.

    "holds" when the claimed winner is significantly higher, "reversed" when significantly lower,
    "undecided" otherwise, and always with one seed: one run decides nothing.

    >>> compare(interval([0.70, 0.71, 0.72]), interval([0.50, 0.52, 0.51]))
    'holds (p = 0.000)'
    >>> compare(interval([0.70, 0.60, 0.80]), interval([0.65, 0.75, 0.55]))
    'undecided (p = 0.57)'
    """
    if claimed_higher.seeds < 2 or other.seeds < 2:
        return "undecided (one seed)"
    gap, error, freedom = _welch(claimed_higher, other)
    if error == 0:
        return (
            "holds (no spread)"
            if gap > 0
            else "reversed (no spread)"
            if gap < 0
            else "undecided (no spread)"
        )
    p_value = float(2 * stats.t.sf(abs(gap) / error, freedom))
    if p_value >= 1 - CONFIDENCE:
        return f"undecided (p = {p_value:.2f})"
    return f"holds (p = {p_value:.3f})" if gap > 0 else f"reversed (p = {p_value:.3f})"
