"""Training seeds: where each seed's model lives, and the mean ± 95 % interval of a score over seeds.

One training run is one draw: CPU kernels differ between machines, and a model trained again from
another seed scores differently by more than the gaps the papers claim. So every trained row is
trained ``report.seeds`` times (issue 19) and reported as the mean with a Student-t 95 % confidence
interval over the seeds. Seed 0 is the model the pipeline registers and serves, at ``<key>/model.pt``;
seed i ≥ 1 lives at ``<key>/seed<i>/model.pt`` and is scored under the key ``<key>-seed<i>``.

A private model trained again is a second release of the same people: every seed of a DP method
is a release in the privacy budget and the ledger (:mod:`tasks.privacy.budget`).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scipy import stats

SEED_FOLDER = re.compile(r"seed([1-9][0-9]*)")
CONFIDENCE = 0.95


def seed_suffix(seed: int) -> str:
    """The key suffix of seed ``seed`` ("" for seed 0, the registered model).

    >>> seed_suffix(0), seed_suffix(2)
    ('', '-seed2')
    """
    return "" if seed == 0 else f"-seed{seed}"


def seed_keys(seed: int) -> tuple[object, ...]:
    """What a training seed adds to the keys its randomness is derived from: nothing for seed 0, so the registered
    model keeps the seeds it had before seeds existed.

    >>> seed_keys(0), seed_keys(2)
    ((), ('seed', 2))
    """
    return () if seed == 0 else ("seed", seed)


def seed_folder(folder: Path, seed: int) -> Path:
    """Where seed ``seed`` of the model in ``folder`` is saved."""
    return folder if seed == 0 else folder / f"seed{seed}"


def checkpoint_key(checkpoint: Path) -> str:
    """The key a checkpoint is scored under: its folder's name, with ``-seed<i>`` for a seed's sub-folder.

    >>> checkpoint_key(Path("data/train/baseline/model.pt")), checkpoint_key(Path("data/train/baseline/seed2/model.pt"))
    ('baseline', 'baseline-seed2')
    """
    folder = checkpoint.parent
    found = SEED_FOLDER.fullmatch(folder.name)
    return f"{folder.parent.name}-seed{found.group(1)}" if found else folder.name


def base_key(key: str) -> tuple[str, int]:
    """(the model's key, the seed) of a scored key.

    >>> base_key("dp_sgd-eps2.0-seed1"), base_key("baseline")
    (('dp_sgd-eps2.0', 1), ('baseline', 0))
    """
    found = re.fullmatch(r"(.+)-seed([1-9][0-9]*)", key)
    return (found.group(1), int(found.group(2))) if found else (key, 0)


def t_quantile(freedom: float) -> float:
    """t(0.975, ``freedom``): the Student-t quantile every 95 % interval over seeds is built from.

    >>> round(t_quantile(2), 4)
    4.3027
    """
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, freedom))


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
            return f"{100 * self.mean:.1f}"
        return f"{100 * self.mean:.1f} ± {100 * self.half_width:.1f}"


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


def seed_scores(metrics: dict[str, dict[str, float]], key: str, score: str) -> list[float]:
    """``score`` of the model ``key`` and of each of its seeds in evaluate's metrics (seed 0 first)."""
    found = [(0, metrics[key][score])] if score in metrics.get(key, {}) else []
    found += sorted(
        (seed, scores[score])
        for other, scores in metrics.items()
        for name, seed in [base_key(other)]
        if seed and name == key and score in scores
    )
    return [value for _, value in found]


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
