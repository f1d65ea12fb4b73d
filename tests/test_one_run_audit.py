"""The one-run audit's bound (tasks/privacy/one_run_audit.py) against an independent computation, and on the mechanism
it is tight for: randomized response of each canary's bit (the randomness is seeded: tests only)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks.privacy.one_run_audit import audit, epsilon_bound, p_value


def binomial_tail(r: int, v: int, q: float) -> float:
    return sum(math.comb(r, k) * q**k * (1 - q) ** (r - k) for k in range(v, r + 1))


@pytest.mark.parametrize(("r", "v", "epsilon"), [(50, 40, 1.0), (200, 150, 0.5), (20, 20, 3.0)])
def test_the_p_value_without_delta_is_the_binomial_tail_of_randomized_response(r, v, epsilon):
    q = math.exp(epsilon) / (1 + math.exp(epsilon))
    assert p_value(1000, r, v, epsilon, 0.0) == pytest.approx(binomial_tail(r, v, q), rel=1e-9)


def test_delta_only_raises_the_p_value_and_so_lowers_the_bound():
    assert p_value(1000, 200, 170, 1.5, 1e-4) > p_value(1000, 200, 170, 1.5, 0.0)
    assert 0 < epsilon_bound(1000, 200, 170, 1e-4, 0.95) < epsilon_bound(1000, 200, 170, 0.0, 0.95)


def test_the_bound_is_where_the_p_value_crosses_the_level():
    found = epsilon_bound(1000, 400, 330, 1e-5, 0.95)
    assert (
        p_value(1000, 400, 330, found - 1e-6, 1e-5)
        < 0.05
        <= p_value(1000, 400, 330, found + 1e-3, 1e-5)
    )
    assert epsilon_bound(1000, 400, 200, 1e-5, 0.95) == 0.0  # a coin's score proves nothing


def randomized_response_scores(epsilon: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each canary's bit released by ε-randomized response: the tightest ε-DP mechanism of one bit."""
    generator = np.random.default_rng(seed)
    included = generator.random(m) < 0.5
    keep = generator.random(m) < math.exp(epsilon) / (1 + math.exp(epsilon))
    released = np.where(keep, included, ~included)
    return released + 0.01 * generator.random(m), included  # ties broken at random


def test_it_holds_on_randomized_response_and_catches_twice_its_epsilon():
    """Over 40 runs at ε = 1 (95 % each), ε̂ ≤ 1 in all but a few; the response made at ε = 2 while 1 is claimed is
    caught in most runs."""
    held = [
        audit(*randomized_response_scores(1.0, 2000, seed), 0.0).epsilon_audited
        for seed in range(40)
    ]
    assert sum(found > 1.0 for found in held) <= 4 and max(held) > 0.5
    caught = [
        audit(*randomized_response_scores(2.0, 2000, seed + 100), 0.0).epsilon_audited
        for seed in range(10)
    ]
    assert sum(found > 1.0 for found in caught) >= 8


def test_randomized_response_of_the_ldp_codes_holds_and_twice_its_epsilon_is_caught(monkeypatch):
    """tasks/ldp/randomized_response.audit_response, the LDP stage's audit: d = 16 as the codes, 1 000 canaries."""
    from tasks.ldp import randomized_response

    def found(epsilon: float) -> list[float]:
        return [
            randomized_response.audit_response(
                16, epsilon, np.random.default_rng(seed), 1000, 0.95
            ).epsilon_audited
            for seed in range(3)
        ]

    assert all(0.4 < value <= 1.0 for value in found(1.0))
    original = randomized_response.keep_probability
    monkeypatch.setattr(
        randomized_response, "keep_probability", lambda d, epsilon: original(d, 2 * epsilon)
    )
    assert all(value > 1.0 for value in found(1.0)) and all(value > 2.0 for value in found(2.0))


def test_an_audit_that_finds_nothing_says_how_many_guesses_it_made():
    """An ε̂ of 0 was logged as "0 of 0 guesses right, 300 canaries" (issue 82): the guesses are counted even then."""
    generator = np.random.default_rng(7)
    found = audit(generator.random(300), generator.random(300) < 0.5, 0.0)
    assert found.epsilon_audited == 0.0
    guesses = found.guessed_in + found.guessed_out
    assert guesses > 0 and 0 <= found.correct <= guesses
    assert f"{found.correct} of {guesses} guesses right, 300 canaries" in found.summary()
