"""``privhar bench private-selection`` (issue 85): the ε of choosing the recipe among a random number of private
trials, checked against Papernot & Steinke's Theorem 2 computed here independently of dp-accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks import private_selection
from benchmarks.private_selection import selected_epsilon, selection_rows
from tasks.private.methods import Recipe

DELTA = 1e-4


def theorem_2(sigma: float, steps: int, delta: float, shape: float, mean: float) -> float:
    """Papernot & Steinke 2022, Thm 2, for a full-batch Gaussian run (RDP(λ) = steps·λ / 2σ²): the truncated
    negative binomial count of trials (shape η, mean E[K]; γ from the mean), RDP to (ε, δ) by Balle et al. 2020's
    conversion, both orders on a grid."""
    rho = steps / (2 * sigma**2)

    def mean_of(gamma: float) -> float:
        if shape == 0:
            return (1 / gamma - 1) / math.log(1 / gamma)
        return shape * (1 - gamma) / (gamma * (1 - gamma**shape))

    low, high = 1e-9, 1 - 1e-9  # mean_of falls as γ grows
    for _ in range(200):
        gamma = (low + high) / 2
        low, high = (gamma, high) if mean_of(gamma) > mean else (low, gamma)
    orders = np.concatenate([np.linspace(1.01, 10, 900), np.linspace(10, 400, 3900)])
    # the two terms of order λ̂ do not depend on λ: their minimum over λ̂ once
    hat = orders[orders >= 1]
    extra = np.min(
        (1 + shape) * (1 - 1 / hat) * rho * hat + (1 + shape) * math.log(1 / gamma) / hat
    )
    rdp = rho * orders + extra + math.log(mean) / (orders - 1)
    epsilon = (
        rdp + np.log((orders - 1) / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    )
    return float(epsilon.min())


@pytest.mark.parametrize(("shape", "mean"), [(0.0, 2.5), (1.0, 2.0), (1.0, 4.0)])
def test_the_selection_epsilon_is_theorem_2(shape, mean):
    for sigma in (3.0, 8.0):
        ours = theorem_2(sigma, 8, DELTA, shape, mean)
        assert selected_epsilon(sigma, 1.0, 8, DELTA, shape, mean) == pytest.approx(ours, rel=0.01)


def test_selecting_costs_each_trial_noise(monkeypatch):
    """At a total ε each trial gets more noise than one unselected run, and more so the more trials are expected."""
    monkeypatch.setattr(private_selection, "TOTALS", (2.0,))
    monkeypatch.setattr(
        private_selection, "SELECTIONS", (("geometric", 1.0, 2.0), ("geometric", 1.0, 4.0))
    )
    recipe = Recipe(
        epochs=8,
        batch_size=300,
        physical_batch_size=300,
        learning_rate=0.8,
        momentum=0.9,
        max_grad_norm=2.0,
        delta=DELTA,
        accountant="prv",
        public_size=200,
    )
    two, four = selection_rows(recipe, 200)
    assert 1 < two["sigma_ratio"] < four["sigma_ratio"]
    assert four["trial_epsilon"] < two["trial_epsilon"] < 2.0
    assert selected_epsilon(two["sigma_trial"], 1.0, 8, DELTA, 1.0, 2.0) == pytest.approx(
        2.0, abs=0.01
    )
