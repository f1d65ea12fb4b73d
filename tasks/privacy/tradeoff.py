"""Group privacy along a path of two neighbouring steps, composed as trade-off functions rather than as (ε, δ).

Why: a person replaced in m videos (MaskDP's replace-one relation) is two add/remove group steps away from the
data actually used — remove their contributions, then add the replacements. Composing (ε, δ) along that path
(2ε', δ'(1 + e^ε')) is 13-20× loose at the defaults; composing the whole trade-off curves is not.

Dong, Roth & Su (2022, "Gaussian differential privacy", JRSS-B; the step in the proof of their Theorem 2.14, group
privacy): if T(P, R) ≥ f and T(R, Q) ≥ g, then T(P, Q)(α) ≥ g(1 − f(α)). In powers β̄ = 1 − T (the most of Q a
test can catch while catching at most α of P): β̄_PQ(α) ≤ β̄_RQ(β̄_PR(α)). A power is bounded by the hockey-stick
curve of its pair, for every ε: β̄_PR(α) ≤ e^ε α + H_{e^ε}(R‖P) (any test φ has E_R φ − e^ε E_P φ ≤ H). And
δ(ε) = sup_α β̄_PQ(α) − e^ε α, so the path's (ε, δ) follows from the two steps' δ curves alone.

Everything is in log space: at person-level ε in the hundreds the tests that decide δ have α ≈ δ·e^{−ε}, far below
what a float holds. Every rounding is upward (grids of α and ε only ever loosen the bound): the answer is an upper
bound on ε whatever the grids, and the grids are fine enough to be within 2 % of the symmetric worst case
(tests/test_replace_one_groups.py).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

ALPHA_POINTS = 4000  # log-spaced tests from α = e^-(ceiling + 60) to 1
CHUNK = 256


class DeltaCurve(NamedTuple):
    """Upper bounds ``deltas`` on a pair's hockey-stick divergence H_{e^ε} at ``epsilons`` (≥ 0, ascending)."""

    epsilons: np.ndarray
    deltas: np.ndarray


def epsilon_grid(top: float, points: int = 2000) -> np.ndarray:
    """ε from 0 to ``top``: steps of 0.01 up to 20, then geometric (0.2 % apart at top = 1 500)."""
    if top <= 20:
        return np.linspace(0.0, top, points + 1)
    return np.unique(
        np.concatenate([np.linspace(0.0, 20.0, points + 1), np.geomspace(20.0, top, points)])
    )


def hockey_stick(
    losses: np.ndarray, probabilities: np.ndarray, infinity_mass: float, epsilons: np.ndarray
) -> np.ndarray:
    """H_{e^ε} = P(L = ∞) + Σ_{l > ε} p_l (1 − e^{ε − l}) of a privacy-loss pmf (``losses`` ascending), without
    dp-accounting's e^ε, which overflows past ε ≈ 709."""
    order = np.argsort(losses)
    losses, probabilities = (
        np.asarray(losses, float)[order],
        np.clip(np.asarray(probabilities, float)[order], 0, None),
    )
    above_mass = np.concatenate([np.cumsum(probabilities[::-1])[::-1], [0.0]])
    with np.errstate(divide="ignore"):
        log_terms = np.log(probabilities) - losses
    log_above = np.concatenate([np.logaddexp.accumulate(log_terms[::-1])[::-1], [-np.inf]])
    first = np.searchsorted(losses, epsilons, side="right")
    deltas = above_mass[first] - np.exp(np.minimum(epsilons + log_above[first], 0.0))
    return np.clip(deltas, 0.0, 1.0) + infinity_mass


def chernoff_hockey_stick(
    epsilons: np.ndarray, steps: int, orders: np.ndarray, log_mgf: np.ndarray
) -> np.ndarray:
    """H_{e^ε} of ``steps`` composed copies of a pair whose one-step loss has log E e^{λL} = ``log_mgf`` at λ = ``orders``.

    (1 − e^{ε−L})₊ ≤ e^{λ(L−ε)} · λ^λ / (1 + λ)^{1+λ} for every λ > 0, and E e^{λL} multiplies over the steps: valid
    in the far tail, where a discretised pmf only holds its truncation mass (Canonne, Kamath & Steinke 2020, Prop. 12).
    """
    lam = orders[:, None]
    log_bound = (
        steps * log_mgf[:, None]
        - lam * epsilons[None]
        + lam * np.log(lam)
        - (1 + lam) * np.log1p(lam)
    )
    return np.exp(np.minimum(log_bound.min(axis=0), 0.0))


def _log_power(log_alpha: np.ndarray, curve: DeltaCurve) -> np.ndarray:
    """log of the bound min_ε e^ε α + H_{e^ε} on the power at each α."""
    with np.errstate(divide="ignore"):
        log_deltas = np.log(np.clip(curve.deltas, 0.0, 1.0))
    out = np.empty_like(log_alpha)
    for start in range(0, len(log_alpha), CHUNK):
        block = log_alpha[start : start + CHUNK, None]
        out[start : start + CHUNK] = np.logaddexp(
            curve.epsilons[None] + block, log_deltas[None]
        ).min(axis=1)
    return np.minimum(out, 0.0)


def path_of_two_epsilon(away: DeltaCurve, back: DeltaCurve, delta: float, ceiling: float) -> float:
    """The smallest ε ≤ ``ceiling`` (to 0.01 %) with δ ≤ ``delta`` between P and Q, two steps apart through R.

    ``away`` bounds H(R‖P) — the first step's pair reversed — and ``back`` bounds H(Q‖R). ∞ when even ``ceiling``
    fails. A test's α between two grid points is charged the power of the upper one and the e^ε α of the lower one.
    """
    log_alpha = np.linspace(-(ceiling + 60.0), 0.0, ALPHA_POINTS)
    power = np.exp(_log_power(_log_power(log_alpha, away), back))

    def path_delta(epsilon: float) -> float:
        with np.errstate(over="ignore"):
            return max(float(power[0]), float(np.max(power[1:] - np.exp(epsilon + log_alpha[:-1]))))

    if path_delta(ceiling) > delta:
        return math.inf
    low, high = 0.0, ceiling
    while high - low > 1e-4 * max(1.0, high):
        middle = (low + high) / 2
        low, high = (middle, high) if path_delta(middle) > delta else (low, middle)
    return high
