"""Local DP (paper 002): randomized response, its frequency estimator, DCA, DCAConv, learners, the digits check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks.core.dp_randomness import NOT_PRIVATE
from tasks.core.errors import PrivharError
from tasks.core.manifest import read_manifest
from tasks.core.params_files import load_plan
from tasks.ldp.dca import fit_dca
from tasks.ldp.dcaconv import fit_dcaconv
from tasks.ldp.randomized_response import (
    clip_and_normalise,
    estimate_counts,
    flip_probability,
    keep_probability,
    perturb,
)


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
    estimates = np.stack(
        [
            estimate_counts(perturb(values, d, epsilon, rng)[:, None], d, epsilon)[:, 0] / n
            for _ in range(trials)
        ]
    )
    p, q = keep_probability(d, epsilon), flip_probability(d, epsilon)
    standard_error = np.sqrt(
        (q * (1 - q) / (p - q) ** 2 + truth * (1 - p - q) / (p - q)) / n / trials
    )  # eq. 18
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


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: keep_probability(1, 1.0), "domain d = 1 must be an integer ≥ 2"),
        (lambda: keep_probability(16, 0.0), "ε = 0.0 must be positive"),
        (
            lambda: perturb(np.array([16]), 16, 1.0, np.random.default_rng(0)),
            r"values must lie in \[0, 15\]",
        ),
        (
            lambda: fit_dca(np.random.default_rng(0).normal(size=(40, 12)), np.arange(40) % 3, 4),
            "4 components asked, but the signal subspace of 3 classes",
        ),
    ],
)
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


@pytest.mark.parametrize(
    ("second", "pool", "shape"), [(4, 2, (8, 8)), (1, 2, (8, 8)), (3, 3, (9, 12))]
)
def test_dcaconv_codes_lie_in_the_domain_and_pooling_shapes_hold(
    second: int, pool: int, shape: tuple[int, int]
) -> None:
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 5, 300)
    images = (
        rng.normal(size=(300, *shape))
        + labels[:, None, None] * np.linspace(-1, 1, shape[1])[None, None, :]
    )
    encoder = fit_dcaconv(images, labels, first=3, second=second, pool=pool)
    codes = encoder.encode(images)
    assert encoder.domain == 2**second
    assert (
        codes.shape
        == (300, 3 * (shape[0] // pool) * (shape[1] // pool))
        == (300, encoder.features(shape))
    )
    assert codes.min() >= 0 and codes.max() <= 2**second - 1
    assert codes.max() == 2**second - 1  # the whole domain is used, not a part of it


def test_learners_on_clean_codes_and_the_paper_claims_are_decided() -> None:
    from tasks.ldp.digits import claims

    rows = [
        {"d": 16, "epsilon": e, "learner": learner, "mean": value}
        for e, values in {
            0.5: (0.4, 0.2, 0.1),
            3.0: (0.9, 0.9, 0.7),
            math.inf: (0.93, 0.92, 0.75),
        }.items()
        for learner, value in zip(("nb", "knn", "ncc"), values)
    ]
    lines = claims(rows)
    assert lines[0].startswith(
        "d = 16: KNN within 0.05 of its no-noise 0.920 for every ε ≥ ln(d + 1) = 2.83 — holds"
    )
    assert lines[1].startswith(
        "d = 16: NB beats KNN at small ε (≤ 1) — holds (ε 0.5: NB 0.400 vs KNN 0.200)"
    )


def test_the_digits_stage_writes_both_tables_the_claims_and_a_plot(tmp_path) -> None:
    from tasks.ldp.digits import ldp_digits
    from tests.conftest import sections, write_params

    params = write_params(
        tmp_path, {"ldp": {"repetitions": 2, "digits_epsilons": [0.5, 4.0, float("inf")]}}
    )
    rows = ldp_digits(**sections(params, base="base", params="ldp"), out=tmp_path / "out")
    assert {(row["d"], row["learner"], row["features"]) for row in rows} == {
        (d, learner, features)
        for d in (16, 2)
        for learner in ("nb", "knn", "ncc")
        for features in ("dcaconv", "raw_pixels", "hog_bovw")
    }
    clean = {
        row["d"]: row["mean"]
        for row in rows
        if row["learner"] == "knn" and math.isinf(row["epsilon"]) and row["features"] == "dcaconv"
    }
    assert clean[16] > 0.85  # DCAConv codes of the digits without noise
    text = (tmp_path / "out" / "digits.md").read_text()
    assert "## d = 16" in text and "## d = 2" in text and "NB beats KNN at small ε" in text
    assert (tmp_path / "out" / "digits.png").stat().st_size > 0


def test_the_video_stage_releases_seeded_codes_and_records_both_epsilons(
    tiny_decoded, tiny_public, tmp_path
) -> None:
    import csv

    from flows.stage_commands import stage_call

    ldp_video = stage_call("ldp")
    from tasks.privacy.budget import ldp_release
    from tests.conftest import write_params

    frames = tiny_decoded / "data" / "decode"
    params = write_params(tmp_path, {"privacy": {"randomness": "seeded"}})
    results = ldp_video(
        params_path=params,
        frames=frames,
        public=tiny_public,
        out=tmp_path / "data",
        report=tmp_path / "report",
    )
    assert {(r["features"], r["epsilon_per_feature"], r["learner"]) for r in results} == {
        (f, e, learner)
        for f in ("dcaconv", "raw_pixels", "hog_bovw")
        for e in (1.0, math.inf)
        for learner in ("nb", "knn", "ncc")
    }
    assert all(0.0 <= r["top1"] <= 1.0 for r in results)
    results = [
        r for r in results if r["features"] == "dcaconv"
    ]  # the released design; the baselines are compared
    features = results[0]["features_per_video"]
    assert features == 2 * (16 // 2) * (8 // 2)  # L1 · h̃p · w̃p with the default 2 × 2 pooling
    assert all(r["epsilon_per_video"] == r["epsilon_per_feature"] * features for r in results)
    released = np.load(tmp_path / "data" / "released_train_codes.npz")
    assert released["eps1.0"].max() <= 3 and released["epsinf"].shape == released["eps1.0"].shape
    again = ldp_video(
        params_path=params,
        frames=frames,
        public=tiny_public,
        out=tmp_path / "again",
        report=tmp_path / "report2",
    )
    assert np.array_equal(
        np.load(tmp_path / "again" / "released_train_codes.npz")["eps1.0"], released["eps1.0"]
    )
    assert [r for r in again if r["features"] == "dcaconv"] == results
    with (tmp_path / "report" / "ledger.csv").open() as handle:
        ledger = list(csv.DictReader(handle))
    # every code whose learners' scores are published is a release: DCAConv's and both baselines' (issue 30)
    from tasks.privacy.ldp_codes import baseline_feature_counts

    counts = {"dcaconv": features, **baseline_feature_counts((16, 8))}
    assert [(row["release"], float(row["epsilon_per_video"])) for row in ledger] == [
        (name, value)
        for code, count in counts.items()
        for name, value in (
            (ldp_release(1.0, code), count * 1.0),
            (ldp_release(math.inf, code), math.inf),
        )
    ]
    assert (
        counts["raw_pixels"] == 16 * 8 and counts["hog_bovw"] == 7 * 3
    )  # ((16 − 4)/2 + 1) · ((8 − 4)/2 + 1) blocks
    # issue 64: each finite ε's one-run audit of the randomized response, the same for every code
    audited = {row["epsilon_audited"] for row in ledger if row["epsilon_per_feature"] == "1.0"}
    assert len(audited) == 1 and 0 <= float(audited.pop()) <= 1.0
    assert {row["epsilon_audited"] for row in ledger if row["epsilon_per_feature"] == "inf"} == {""}
    assert all(
        row["randomness"] == NOT_PRIVATE and row["central_steps_on_private_data"].startswith("none")
        for row in ledger
    )
    from tasks.privacy.budget import planned_releases

    planned = {release.name: release.epsilon for release in planned_releases(load_plan(params))}
    for row in (
        ledger
    ):  # the budget plans each finite release with the ε the stage released; ∞ is no DP release
        assert planned.get(row["release"], math.inf) == float(row["epsilon_per_video"])


def test_the_video_stage_refuses_a_release_over_the_cap_before_any_work(
    tiny_decoded, tiny_public, tmp_path
) -> None:
    from flows.stage_commands import stage_call

    ldp_video = stage_call("ldp")
    from tests.conftest import write_params

    params = write_params(
        tmp_path,
        {
            "privacy": {"max_epsilon": 1e12, "allow_unprotected_releases": True},
            "dprp": {"epsilons": [2.0]},
            "private": {"methods": ["dp_sgd"], "epsilons": [1.0]},
            "federated": {"aggregations": ["fedavg"]},
        },
    )
    # the person-level plan before ldp is dominated by Video-DPRP's frames (~1e10 per person here): the cap holds it
    # all, and ldp-eps1 asks 64 per training video of each person on top
    import tasks.privacy.budget as budget

    spent = {}
    for planned in budget.planned_releases(load_plan(params))[:-1]:
        rows = [
            row
            for row in read_manifest(tiny_decoded / "data/decode/manifest.parquet")
            if row["split"] in planned.splits
        ]
        for person, value in planned.person_epsilons(rows).items():
            spent[person] = spent.get(person, 0.0) + value
    cap = min(spent.values()) + 10.0
    params = write_params(
        tmp_path,
        {
            "privacy": {"max_epsilon": cap, "allow_unprotected_releases": True},
            "dprp": {"epsilons": [2.0]},
            "private": {"methods": ["dp_sgd"], "epsilons": [1.0]},
            "federated": {"aggregations": ["fedavg"]},
        },
    )
    with pytest.raises(
        PrivharError,
        match=r"person \d+ has spent ε = .* before ldp-eps1, which requests ε = (64|128|192) more",
    ):
        ldp_video(
            params_path=params,
            frames=tiny_decoded / "data" / "decode",
            public=tiny_public,
            out=tmp_path / "o",
            report=tmp_path / "r",
        )
    assert not (tmp_path / "o").exists() and not (tmp_path / "r").exists()


def test_the_video_stage_refuses_more_filters_than_actions(
    tiny_decoded, tiny_public, tmp_path
) -> None:
    from flows.stage_commands import stage_call

    ldp_video = stage_call("ldp")
    from tests.conftest import write_params

    params = write_params(tmp_path, {"ldp": {"video_first_filters": 5}})
    with pytest.raises(
        PrivharError, match="ldp.video_first_filters = 5 .* must not exceed the 3 classes"
    ):
        ldp_video(
            params_path=params,
            frames=tiny_decoded / "data" / "decode",
            public=tiny_public,
            out=tmp_path / "o",
            report=tmp_path / "r",
        )
    assert not (tmp_path / "o").exists()


def test_the_filters_never_see_private_videos(tiny_decoded, tiny_public, tmp_path) -> None:
    """Issue 17: the DCAConv filters are a function of the public set alone — change every private video and they stay."""
    from flows.stage_commands import stage_call

    ldp_video = stage_call("ldp")
    from tests.conftest import write_params

    params = write_params(tmp_path, {"ldp": {"video_epsilons": [float("inf")]}})
    ldp_video(
        params_path=params,
        frames=tiny_decoded / "data" / "decode",
        public=tiny_public,
        out=tmp_path / "a",
        report=tmp_path / "ra",
    )
    ldp_video(
        params_path=params,
        frames=tiny_public,
        public=tiny_public,
        out=tmp_path / "b",
        report=tmp_path / "rb",
    )
    first, second = np.load(tmp_path / "a" / "filters.npz"), np.load(tmp_path / "b" / "filters.npz")
    assert all(np.array_equal(first[name], second[name]) for name in ("first", "second"))


def test_secure_coins_differ_from_run_to_run_and_from_the_seeded_ones(
    tiny_decoded, tiny_public, tmp_path
) -> None:
    from flows.stage_commands import stage_call

    ldp_video = stage_call("ldp")
    from tests.conftest import write_params

    released = {}
    for name, randomness in (("a", "secure"), ("b", "secure"), ("c", "seeded")):
        (tmp_path / name).mkdir()
        params = write_params(
            tmp_path / name,
            {"privacy": {"randomness": randomness}, "ldp": {"video_epsilons": [1.0]}},
        )
        ldp_video(
            params_path=params,
            frames=tiny_decoded / "data" / "decode",
            public=tiny_public,
            out=tmp_path / name / "o",
            report=tmp_path / name / "r",
        )
        released[name] = np.load(tmp_path / name / "o" / "released_train_codes.npz")["eps1.0"]
    assert not np.array_equal(released["a"], released["b"]) and not np.array_equal(
        released["a"], released["c"]
    )


def test_baseline_codes_lie_in_the_domain() -> None:
    from tasks.ldp.baselines import hog_bovw_codes, raw_pixel_codes

    rng = np.random.default_rng(0)
    train, test = rng.uniform(0, 16, (40, 8, 8)), rng.uniform(-2, 20, (10, 8, 8))
    for d in (2, 16):
        raw_train, raw_test = raw_pixel_codes(train, test, d)
        assert raw_train.shape == (40, 64) and raw_train.min() == 0 and raw_train.max() == d - 1
        assert (
            0 <= raw_test.min() and raw_test.max() <= d - 1
        )  # test values outside the training range are clipped
        words_train, words_test = hog_bovw_codes(train, test, d, seed=1)
        assert words_train.shape == (40, 9) and words_test.shape == (10, 9)
        assert 0 <= words_train.min() and words_train.max() <= d - 1


def test_real_footage_without_person_boxes_is_encoded_whole_frame(
    tiny_decoded, tiny_public, tmp_path
) -> None:
    """Issue 32: real clips carry no annotations; each camera then encodes its whole frame (paper 002's cameras see a
    scene) instead of the stage failing, and the attribute attacker says nan (no attributes to attack)."""
    import shutil

    from flows.stage_commands import stage_call

    ldp_video = stage_call("ldp")
    from tasks.core.manifest import write_manifest
    from tests.conftest import write_params

    real = tmp_path / "real"
    shutil.copytree(tiny_decoded / "data" / "decode", real)
    rows = [
        {
            key: (None if key == "annotations" else value)
            for key, value in row.items()
            if not key.startswith("attr_")
        }
        for row in read_manifest(real / "manifest.parquet")
    ]
    write_manifest(rows, real / "manifest.parquet")
    params = write_params(
        tmp_path, {"ldp": {"video_epsilons": [1.0]}, "privacy": {"randomness": "seeded"}}
    )
    results = ldp_video(
        params_path=params,
        frames=real,
        public=tiny_public,
        out=tmp_path / "o",
        report=tmp_path / "r",
    )
    assert results and all(0.0 <= row["top1"] <= 1.0 for row in results)
    assert all(math.isnan(row["attribute_cmap"]) for row in results)


def test_the_video_stage_that_fails_after_its_work_leaves_no_side_report(
    tiny_decoded, tiny_public, tmp_path, monkeypatch
) -> None:
    """A failed ldp stage left video.csv and metrics.json at their tracked paths (issue 82): they are written with
    the codes, once the codes are in place."""
    from flows.stage_commands import stage_call
    from tasks.ldp import video
    from tests.conftest import write_params

    def broken(*args, **kwargs):
        raise PrivharError("the audit broke")

    monkeypatch.setattr(video, "audit_response", broken)
    with pytest.raises(PrivharError, match="the audit broke"):
        stage_call("ldp")(
            params_path=write_params(tmp_path, {"privacy": {"randomness": "seeded"}}),
            frames=tiny_decoded / "data" / "decode",
            public=tiny_public,
            out=tmp_path / "data",
            report=tmp_path / "report",
        )
    assert not list(tmp_path.glob("report/*")) and not (tmp_path / "data").exists()
