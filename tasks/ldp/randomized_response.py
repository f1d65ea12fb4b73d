"""k-ary randomized response (paper 002 eq. 3) and its unbiased frequency estimator (eq. 13-14).

Each data owner perturbs each of its features once, independently: the true value is kept with
probability p = e^ε / (e^ε + d − 1), otherwise replaced by one of the other d − 1 values uniformly
(q = 1 / (e^ε + d − 1) each). The ratio p / q = e^ε makes each feature ε-LDP (eq. 4); a sample
releasing m features is (m·ε)-LDP by sequential composition.
"""

from __future__ import annotations

import math

import numpy as np

from tasks.core.errors import PrivharError
from tasks.privacy.one_run_audit import Audit, audit


def check_domain(d: int, epsilon: float) -> None:
    """One line for a domain below 2 or an ε that is not positive (∞ is allowed: no perturbation)."""
    if int(d) != d or d < 2:
        raise PrivharError(f"randomized response: domain d = {d} must be an integer ≥ 2")
    if not epsilon > 0:
        raise PrivharError(
            f"randomized response: ε = {epsilon} must be positive (use inf for no perturbation)"
        )


def keep_probability(d: int, epsilon: float) -> float:
    """p of eq. 3; 1 when ε = ∞."""
    check_domain(d, epsilon)
    if math.isinf(epsilon):
        return 1.0
    return 1.0 / (1.0 + (d - 1) * math.exp(-epsilon))


def flip_probability(d: int, epsilon: float) -> float:
    """q of eq. 3: the probability of each particular other value."""
    return (1.0 - keep_probability(d, epsilon)) / (d - 1)


def perturb(values: np.ndarray, d: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Randomized response on every entry of ``values`` (integers in [0, d − 1]), independently."""
    values = np.asarray(values)
    if values.size and (values.min() < 0 or values.max() >= d):
        raise PrivharError(
            f"randomized response: values must lie in [0, {d - 1}], found [{values.min()}, {values.max()}]"
        )
    keep = rng.random(values.shape) < keep_probability(d, epsilon)
    # another value, uniform over the d − 1 others: shift by 1 … d − 1 modulo d
    other = (values + rng.integers(1, d, size=values.shape)) % d if d > 1 else values
    return np.where(keep, values, other).astype(values.dtype)


def estimate_counts(observed: np.ndarray, d: int, epsilon: float) -> np.ndarray:
    """Eq. 13-14: unbiased counts ĉ(v) = (Σ_v − n q) / (p − q) of each value v along axis 0 of ``observed`` (n × m).

    Returns (d, m) estimates; they may be negative or not sum to n — :func:`clip_and_normalise` makes them a distribution.
    """
    observed = np.asarray(observed)
    n = observed.shape[0]
    p, q = keep_probability(d, epsilon), flip_probability(d, epsilon)
    counts = np.stack([(observed == value).sum(axis=0) for value in range(d)]).astype(np.float64)
    return (counts - n * q) / (p - q)


def clip_and_normalise(counts: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """Estimated counts → frequencies: negatives clipped to ``floor``, each column rescaled to sum to 1
    (a column whose estimates are all ≤ 0 becomes uniform)."""
    clipped = np.maximum(counts, floor)
    totals = clipped.sum(axis=0, keepdims=True)
    uniform = np.full_like(clipped, 1.0 / clipped.shape[0])
    return np.where(totals > 0, clipped / np.where(totals > 0, totals, 1.0), uniform)


def audit_response(
    d: int, epsilon: float, rng: np.random.Generator, canaries: int, confidence: float
) -> Audit:
    """The one-run audit of :func:`perturb` at ``epsilon`` (:mod:`tasks.privacy.one_run_audit`): ``canaries`` features,
    each 0 when in and 1 when out (replace-one: the feature's value changed), drawn in with probability ½ from ``rng``
    (the stage's secret coins), released through :func:`perturb`; the auditor scores +1 for a 0 released, −1 for a 1
    and 0 for any other value (ties broken at random). ε̂ bounds the ε per feature, pure (δ = 0)."""
    included = rng.random(canaries) < 0.5
    released = perturb(np.where(included, 0, 1), d, epsilon, rng)
    scores = (released == 0).astype(float) - (released == 1) + 1e-3 * rng.random(canaries)
    return audit(scores, included, 0.0, confidence)
