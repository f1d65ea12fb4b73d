"""The one-run audit read as f-DP: a lower bound μ̂ on a Gaussian mechanism's μ from one run's canary guesses, and ε̂ at
δ from it (Mahloujifar, Melis & Chaudhuri, "Auditing f-differential privacy in one run", ICML 2025, arXiv 2410.22235).

Steinke, Nasr & Jagielski's bound (:mod:`tasks.privacy.one_run_audit`) tests the hypothesis "(ε, δ)-DP", whose
worst case is randomized response with a δ tail: it caps ε̂ near 3 with 1 000 canaries whatever the attack. This one
tests "μ-GDP" (Dong, Roth & Su 2022), the trade-off curve G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) that composed Gaussian
mechanisms meet exactly: DP-SGD without subsampling (q = 1: every unit in every step) is μ-GDP with μ = √T·Δ/(σC)
(Δ = C under add/remove, 2C under replace-one), and its (ε, δ) is that curve's. Under that hypothesis the chance of
``correct`` or more right guesses of ``guesses`` (abstaining on the rest of m canaries) is bounded by the recursion of
their main theorem for guesses with abstention (two-way guesses: in or out), :func:`rejects`; μ̂ is the largest μ it rejects at the level,
and ε̂ = ε_δ(μ̂).

What it assumes: the mechanism's trade-off is at least G_μ for the μ of its claimed ε. That holds for the
composition of Gaussian mechanisms (it is then exact) and not for a subsampled one, whose curve crosses the Gaussian of
the same (ε, δ): there the bound may exceed a true ε and is not computed (:func:`gaussian_trade_off`).
"""

from __future__ import annotations

import math

from scipy.special import ndtr, ndtri

from tasks.privacy.accounting import gdp_epsilon

MU_CEILING = 64.0  # μ beyond which no one-run bound is sought (ε_δ(64) is in the thousands)


def _blown_down(power: float, mu: float) -> float:
    """The least type-II slack a μ-GDP test keeps at type-I slack ``power``: Φ(Φ⁻¹(x) − μ), the inverse of the blow-up
    function x ↦ Φ(Φ⁻¹(x) + μ) of G_μ (the paper's §4, Gaussian case)."""
    if power >= 1.0:
        return 1.0
    return float(ndtr(ndtri(power) - mu))


def rejects(mu: float, canaries: int, guesses: int, correct: int, level: float) -> bool:
    """Whether ``correct`` right of ``guesses`` guesses over ``canaries`` canaries has chance below ``level`` under
    μ-GDP (arXiv 2410.22235's recursion with an alphabet of two, in / out; as jax_privacy's ``auditing.py`` computes it).

    From the last correct guess down (i = v − 1 … 0), h (the mass of wrong guesses) rises to the least a μ-GDP run can
    pair with r (the mass of right ones), and r rises with it in the proportion i / (r' − i); the hypothesis is
    rejected when r + h passes the share of canaries guessed. Stops early once h stops rising (nothing moves after).

    >>> rejects(1.0, 1000, 200, 200, 0.05), rejects(8.0, 1000, 200, 200, 0.05)
    (True, False)
    """
    if not 0 <= correct <= guesses <= canaries or guesses == 0:
        raise ValueError(
            f"need 0 <= correct <= guesses <= canaries, guesses > 0; got {correct}, {guesses}, {canaries}"
        )
    right = level * correct / canaries
    wrong = level * (guesses - correct) / canaries
    for index in range(correct - 1, -1, -1):
        raised = max(wrong, _blown_down(right, mu))
        if raised == wrong:
            break
        right = min(right + index / (guesses - index) * (raised - wrong), 1.0)
        wrong = raised
    return right + wrong > guesses / canaries


def mu_bound(canaries: int, guesses: int, correct: int, level: float) -> float:
    """μ̂: the largest μ that :func:`rejects` (bisection: rejection only gets harder as μ grows); 0 when even μ → 0
    explains the guesses.

    >>> round(mu_bound(1000, 200, 200, 0.05), 3)
    1.536
    """
    if not rejects(1e-9, canaries, guesses, correct, level):
        return 0.0
    low, high = 0.0, 1.0
    while rejects(high, canaries, guesses, correct, level):
        low, high = high, 2 * high
        if high > MU_CEILING:
            return math.inf
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (
            (middle, high) if rejects(middle, canaries, guesses, correct, level) else (low, middle)
        )
    return low


def epsilon_bound(
    canaries: int, guesses: int, correct: int, delta: float, level: float
) -> tuple[float, float]:
    """(ε̂, μ̂): μ̂ of :func:`mu_bound` at ``level`` (1 − confidence, after any split over plans) and the ε of μ̂-GDP at
    ``delta``."""
    mu = mu_bound(canaries, guesses, correct, level)
    return gdp_epsilon(mu, delta), mu


def gaussian_trade_off(sample_rate: float) -> bool:
    """Whether a DP-SGD run's trade-off is the Gaussian one this bound tests: every unit in every step (q = 1). A
    Poisson-subsampled run's is not (its privacy-loss tails are heavier than the Gaussian's of the same (ε, δ))."""
    return sample_rate >= 1.0
