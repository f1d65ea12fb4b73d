"""ε of a client's DP-SGD with top-level sampling (paper 003 eq. 11, Algorithm 1 line 7).

TLS shuffles the client's N_k videos every local epoch and cuts them into batches of B: each
video is in exactly one batch per epoch. Batches have a fixed size, so adding or removing a
video is visible in the batch sizes; the neighbouring relation that fits is **replace-one**
(substitution: N_k fixed, one video swapped for another). Under it the clipped batch sum moves by
at most 2C, so one epoch is — for the one batch that holds the video — a Gaussian mechanism with
noise σC and sensitivity 2C, i.e. noise multiplier σ/2, and the other batches of the epoch do not
depend on the video. We claim no amplification by shuffling (the batch a video fell in is
treated as known: valid, not tight). A client that takes part in r rounds of E local epochs
composes r·E such mechanisms: the composition of Gaussians is exactly μ-GDP with
μ = 2·sqrt(r·E)/σ (Dong, Roth & Su 2019, Cor. 3.3), whose (ε, δ) curve is the analytic
Gaussian mechanism's (Balle & Wang 2018, Thm. 8; Dong et al. Cor. 2.13):

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)

The tests recompute it with Google's ``dp-accounting`` (privacy-loss distributions, replace-one).

**The person** (:func:`person_epsilon`). A person with m videos at a client can have them all in one
batch: that epoch's sum moves by up to 2mC. Spread over batches, the sensitivities s_i add up to 2mC
with Σ s_i² ≤ (2mC)². Either way μ = 2m·sqrt(r·E)/σ bounds the person (group privacy of Gaussian DP
is exact: μ scales by m), and a person split over several clients composes across them under the
same bound.

The paper's eq. 11, ε_TLS = (q/σ)·sqrt(2E ln(1/δ)) with q = B/N, is printed beside it and
labelled as the paper's approximation: it is not an upper bound (at q = 1 it is below the
Gaussian mechanism's own ε), and it ignores the rounds.
"""

from __future__ import annotations

import math

from scipy.optimize import brentq

from tasks.core.errors import PrivharError
from tasks.privacy.accounting import gdp_delta, gdp_epsilon

ACCOUNTANT = (
    "exact composition of Gaussian mechanisms (mu-GDP, Dong-Roth-Su 2019 Cor. 3.3 / 2.13); "
    "shuffled fixed-size batches, replace-one, sensitivity 2C, no amplification by shuffling"
)


def gdp_mu(noise_multiplier: float, epochs: int) -> float:
    """μ of ``epochs`` shuffled epochs at noise multiplier σ (replace-one: sensitivity 2C)."""
    return 2.0 * math.sqrt(epochs) / noise_multiplier


def delta_of(epsilon: float, mu: float) -> float:
    """δ(ε) of μ-GDP."""
    return gdp_delta(epsilon, mu)


def epsilon_of(noise_multiplier: float, epochs: int, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ ``delta`` after ``epochs`` shuffled epochs (0 epochs: nothing released)."""
    if epochs == 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    return gdp_epsilon(gdp_mu(noise_multiplier, epochs), delta)


def person_epsilon(noise_multiplier: float, epochs: int, videos: int, delta: float) -> float:
    """ε of a person with ``videos`` videos after ``epochs`` shuffled epochs: μ = 2·videos·sqrt(epochs)/σ."""
    if epochs == 0 or videos == 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    return gdp_epsilon(videos * gdp_mu(noise_multiplier, epochs), delta)


def calibrate(target_epsilon: float, epochs: int, delta: float) -> float:
    """σ whose ε after ``epochs`` shuffled epochs is ``target_epsilon`` (to 1e-6 in ε)."""
    if not target_epsilon > 0:
        raise PrivharError(f"federated.epsilon = {target_epsilon} is invalid: expected ε > 0")
    if math.isinf(target_epsilon):
        return 0.0
    low, high = 1e-3, 1.0
    while epsilon_of(high, epochs, delta) > target_epsilon:
        high *= 2
    return float(
        brentq(
            lambda sigma: epsilon_of(sigma, epochs, delta) - target_epsilon, low, high, xtol=1e-9
        )
    )


def paper_tls_epsilon(
    batch_size: int, count: int, noise_multiplier: float, epochs: int, delta: float
) -> float:
    """Paper 003 eq. 11, ε_TLS = (q/σ)·sqrt(2E ln(1/δ)), q = B/N — the paper's approximation, not a bound."""
    if noise_multiplier <= 0:
        return math.inf
    return (
        min(batch_size, count)
        / count
        / noise_multiplier
        * math.sqrt(2 * epochs * math.log(1 / delta))
    )
