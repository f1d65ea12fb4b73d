"""Local DP (paper 002): randomized response, its frequency estimator, DCA, DCAConv, learners, the digits check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks.core.errors import PrivharError
from tasks.ldp.dca import fit_dca
from tasks.ldp.dcaconv import fit_dcaconv
from tasks.ldp.randomized_response import clip_and_normalise, estimate_counts, flip_probability, keep_probability, perturb


@pytest.mark.parametrize(("d", "epsilon"), [(2, 0.5), (16, 1.0), (16, 3.0), (4, 2.0)])
def test_transition_frequencies_match_p_and_q(d: int, epsilon: float) -> None:
    p = keep_probability(d, epsilon)
    assert p == pytest.approx(math.exp(epsilon) / (math.exp(epsilon) + d - 1))
    assert flip_probability(d, epsilon) == pytest.approx(1 / (math.exp(epsilon) + d - 1))
    n = 200_000
    rng = np.random.default_rng(7)
    released = perturb(np.zeros(n, dtype=np.int64), d, epsilon, rng)
    observed = np.bincount(released, minlength=d) / n
    tolerance = 5 * math.sqrt(max(p, 1 - p) / n)  # five binomial standard errors
    assert abs(observed[0] - p) < tolerance
    assert np.all(np.abs(observed[1:] - (1 - p) / (d - 1)) < tolerance)


def test_frequency_estimator_is_unbiased_and_matches_multi_freq_ldpy() -> None:
    from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Aggregator_MI

    d, epsilon, n, trials = 8, 1.0, 400, 2000
    truth = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.1, 0.05, 0.0])
    values = np.repeat(np.arange(d), (truth * n).astype(int))
    rng = np.random.default_rng(3)
    estimates = np.stack([estimate_counts(perturb(values, d, epsilon, rng)[:, None], d, epsilon)[:, 0] / n
                          for _ in range(trials)])
    p, q = keep_probability(d, epsilon), flip_probability(d, epsilon)
    standard_error = np.sqrt((q * (1 - q) / (p - q) ** 2 + truth * (1 - p - q) / (p - q)) / n / trials)  # eq. 18
    assert np.all(np.abs(estimates.mean(axis=0) - truth) < 4 * standard_error)
    released = perturb(values, d, epsilon, rng)
    ours = clip_and_normalise(estimate_counts(released[:, None], d, epsilon))[:, 0]
    assert np.allclose(ours, GRR_Aggregator_MI(list(released), d, epsilon), atol=1e-12)


def test_infinite_epsilon_keeps_codes_and_tiny_epsilon_makes_them_uniform() -> None:
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 16, (500, 20))
    assert np.array_equal(perturb(codes, 16, math.inf, rng), codes)
    released = perturb(np.zeros(160_000, dtype=np.int64), 16, 1e-9, rng)
    shares = np.bincount(released, minlength=16) / len(released)
    assert np.all(np.abs(shares - 1 / 16) < 5 * math.sqrt(1 / 16 / len(released)))


@pytest.mark.parametrize(("call", "message"), [
    (lambda: keep_probability(1, 1.0), "domain d = 1 must be an integer ≥ 2"),
    (lambda: keep_probability(16, 0.0), "ε = 0.0 must be positive"),
    (lambda: perturb(np.array([16]), 16, 1.0, np.random.default_rng(0)), r"values must lie in \[0, 15\]"),
    (lambda: fit_dca(np.random.default_rng(0).normal(size=(40, 12)), np.arange(40) % 3, 4),
     "4 components asked, but the signal subspace of 3 classes"),
])
def test_bad_input_is_one_line(call, message: str) -> None:
    with pytest.raises(PrivharError, match=message):
        call()


def test_dca_recovers_a_known_discriminant_direction_and_is_orthonormal_in_its_metric() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 3000)
    data = rng.normal(size=(3000, 6))
    data[:, 4] += 4.0 * labels  # the classes differ along e5 only
    dca = fit_dca(data, labels, 2)
    first = dca.components[:, 0] / np.linalg.norm(dca.components[:, 0])
    assert abs(first[4]) > 0.99
    assert np.allclose(dca.components.T @ dca.within @ dca.components, np.eye(2), atol=1e-8)
    assert dca.eigenvalues[0] >= dca.eigenvalues[1]


@pytest.mark.parametrize(("second", "pool", "shape"), [(4, 2, (8, 8)), (1, 2, (8, 8)), (3, 3, (9, 12))])
def test_dcaconv_codes_lie_in_the_domain_and_pooling_shapes_hold(second: int, pool: int, shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 5, 300)
    images = rng.normal(size=(300, *shape)) + labels[:, None, None] * np.linspace(-1, 1, shape[1])[None, None, :]
    encoder = fit_dcaconv(images, labels, first=3, second=second, pool=pool)
    codes = encoder.encode(images)
    assert encoder.domain == 2**second
    assert codes.shape == (300, 3 * (shape[0] // pool) * (shape[1] // pool)) == (300, encoder.features(shape))
    assert codes.min() >= 0 and codes.max() <= 2**second - 1
    assert codes.max() == 2**second - 1  # the whole domain is used, not a part of it


def test_learners_on_clean_codes_and_the_paper_claims_are_decided() -> None:
    from tasks.ldp.digits import claims

    rows = [{"d": 16, "epsilon": e, "learner": learner, "mean": value}
            for e, values in {0.5: (0.4, 0.2, 0.1), 3.0: (0.9, 0.9, 0.7), math.inf: (0.93, 0.92, 0.75)}.items()
            for learner, value in zip(("nb", "knn", "ncc"), values)]
    lines = claims(rows)
    assert lines[0].startswith("d = 16: KNN within 0.05 of its no-noise 0.920 for every ε ≥ ln(d + 1) = 2.83 — holds")
    assert lines[1].startswith("d = 16: NB beats KNN at small ε (≤ 1) — holds (ε 0.5: NB 0.400 vs KNN 0.200)")


def test_the_digits_stage_writes_both_tables_the_claims_and_a_plot(tmp_path) -> None:
    from tasks.ldp.digits import ldp_digits
    from tests.conftest import write_params

    params = write_params(tmp_path, {"ldp": {"repetitions": 2, "digits_epsilons": [0.5, 4.0, float("inf")]}})
    rows = ldp_digits(params_path=params, out=tmp_path / "out")
    assert {(row["d"], row["learner"]) for row in rows} == {(d, learner) for d in (16, 2) for learner in ("nb", "knn", "ncc")}
    clean = {row["d"]: row["mean"] for row in rows if row["learner"] == "knn" and math.isinf(row["epsilon"])}
    assert clean[16] > 0.85  # DCAConv codes of the digits without noise
    text = (tmp_path / "out" / "digits.md").read_text()
    assert "## d = 16" in text and "## d = 2" in text and "NB beats KNN at small ε" in text
    assert (tmp_path / "out" / "digits.png").stat().st_size > 0
