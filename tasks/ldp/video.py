"""Stage ``ldp``: local DP for video — each camera releases one randomized DCAConv code per clip (paper 002 on video).

    data/public/decode ─▶ motion images ─▶ DCAConv filters (out/filters.npz): fitted on the PUBLIC set only
    data/decode ─▶ person-centred grey crops (the box around the person over the clip, ldp.video_crop)
               ─▶ the clip's motion-energy image: the mean |frame difference| (Bobick & Davis)
               ─▶ DCAConv with the public filters ─▶ L1 · h̃p · w̃p codes in [0, 2^L2 − 1]
               ─▶ k-ary randomized response at each ε of ldp.video_epsilons, each camera's coins its own and secret
               ─▶ NB / KNN / nearest centroid fitted on the released training codes, Top-1 on clean test codes
               ─▶ the attribute attacker: Naive Bayes per ``attr_*`` label on the released codes (cMAP, F1)
    (and the same for paper 002's baselines on the same images: raw pixels and HOG visual words in the domain d)

Why this representation: codes of whole frames do not carry the action here — per-frame codes
pooled over time by their mode reached Top-1 0.20-0.22 without noise, whole-frame motion images
0.25-0.30; the person-centred motion image reaches 0.93 (NB). Temporal pooling happens before the
release, on the camera, so the code stays in the domain d and a clip releases one value per
feature: features × ε per video, not frames × features × ε. The person box is the camera's to find
(a person detector on a real camera; the annotations here). The per-feature ε and the total per
video (sequential composition) are both reported and written to the ledger, and so is the person:
v videos of a person, v × features × ε (pure ε-LDP composes exactly by addition).

No central step touches private data (paper 002 fits DCA centrally on the training data, which under
local DP would be a non-private release of everyone's videos and labels): the filters are fitted on
the public set (``data/public``: other people, the same actions), shipped to the cameras, and the
ledger says so. The coins come from :class:`tasks.core.dp_randomness.DpRandomness`: OS entropy unless
``privacy.randomness: seeded``. The learners run centrally on the released codes (post-processing).
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from tasks.core import stage_options as arg
from tasks.core.dp_params import LdpParams, PrivacyParams
from tasks.core.dp_randomness import DpRandomness
from tasks.core.errors import PrivharError
from tasks.core.item_randomness import derive_seed
from tasks.core.manifest import MANIFEST_NAME, attribute_names, read_manifest
from tasks.core.params import BaseParams
from tasks.core.scores import class_wise_f1, class_wise_map
from tasks.core.storage import atomic_directory, atomic_write_bytes, save_arrays
from tasks.core.tables import csv_bytes
from tasks.core.tracking import stage_run, stage_work
from tasks.ldp.baselines import hog_bovw_codes, raw_pixel_codes
from tasks.ldp.dcaconv import fit_dcaconv
from tasks.ldp.learners import NaiveBayes, NearestCentroid, knn_predict
from tasks.ldp.motion_images import motion_images, video_labels
from tasks.ldp.randomized_response import audit_response, check_domain, perturb
from tasks.privacy.budget import (
    BudgetPlan,
    check_budget,
    check_unprotected,
    ldp_release,
    record_made,
)
from tasks.privacy.one_run_audit import COLUMNS as AUDIT_COLUMNS
from tasks.video_models.clips import labels_of, split_rows

LOG = logging.getLogger(__name__)


CENTRAL_STEPS = (
    "none: the DCAConv filters (and the baselines' scaling and visual words) were fitted on the public set "
    "(data/public), the coins are each camera's own"
)


# the codes each ε releases: the paper's design and its two baselines (their scores are published beside it)
CODES = {
    "dcaconv": "DCAConv codes",
    "raw_pixels": "raw-pixel codes (paper 002 baseline)",
    "hog_bovw": "HOG visual-word codes (paper 002 baseline)",
}


def attribute_privacy(
    released: np.ndarray,
    rows: list[dict[str, Any]],
    test_codes: np.ndarray,
    test_rows: list[dict[str, Any]],
    domain: int,
    epsilon: float,
) -> dict[str, float]:
    """cMAP and class-wise F1 of a Naive Bayes attribute attacker fitted on the released codes (one per
    ``attr_*`` label, video level) and run on clean test codes: what the codes tell of the people."""
    names = attribute_names(rows)
    truth = np.stack([video_labels(row, names) for row in rows]).astype(int)
    test_truth = np.stack([video_labels(row, names) for row in test_rows])
    scores = np.stack(
        [
            NaiveBayes.fit(released, truth[:, column], domain, epsilon, 2).posteriors(test_codes)[
                :, 1
            ]
            for column in range(len(names))
        ],
        axis=1,
    )
    return {
        "cmap": class_wise_map(test_truth, scores),
        "f1": class_wise_f1(test_truth, scores >= 0.5),
    }


def baseline_codes(
    train: np.ndarray, test: np.ndarray, domain: int, seed: int, public: np.ndarray
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Paper 002's baselines on the same motion images, in the same domain, their scaling and visual words fitted on
    the ``public`` images. Their codes are randomized at every ε like DCAConv's and the learners' published scores
    come from them: each is a release of its own in the ledger and the budget."""
    return {
        "raw_pixels": raw_pixel_codes(train, test, domain, fit=public),
        "hog_bovw": hog_bovw_codes(
            train, test, domain, derive_seed(seed, "ldp", "hog_bovw"), fit=public
        ),
    }


def score_codes(
    name: str,
    train_codes: np.ndarray,
    test_codes: np.ndarray,
    domain: int,
    params: LdpParams,
    randomness: DpRandomness,
    train_rows: list[dict[str, Any]],
    test_rows: list[dict[str, Any]],
    classes: int,
    has_attributes: bool,
) -> tuple[list[dict[str, Any]], dict[str, np.ndarray], float]:
    """Release ``train_codes`` at every ε; Top-1 of each learner and the attribute attacker's cMAP / F1; the seconds
    perturbation took."""
    train_labels, test_labels = labels_of(train_rows).numpy(), labels_of(test_rows).numpy()
    features = train_codes.shape[1]
    results, released_codes, seconds = [], {}, 0.0
    for epsilon in params.video_epsilons:
        started = time.perf_counter()
        released = release(train_codes, train_rows, domain, epsilon, randomness)
        seconds += time.perf_counter() - started
        released_codes[f"eps{epsilon}"] = released
        guesses = {
            "nb": NaiveBayes.fit(released, train_labels, domain, epsilon, classes).predict(
                test_codes
            ),
            "knn": knn_predict(released, train_labels, test_codes, k=params.knn_k),
            "ncc": NearestCentroid.fit(released, train_labels, domain, epsilon, classes).predict(
                test_codes
            ),
        }
        attack = (
            attribute_privacy(released, train_rows, test_codes, test_rows, domain, epsilon)
            if has_attributes
            else {"cmap": float("nan"), "f1": float("nan")}
        )
        for learner, guess in guesses.items():
            results.append(
                {
                    "features": name,
                    "epsilon_per_feature": epsilon,
                    "features_per_video": features,
                    "domain": domain,
                    "epsilon_per_video": epsilon * features,
                    "learner": learner,
                    "top1": round(float((guess == test_labels).mean()), 4),
                    "attribute_cmap": round(attack["cmap"], 4),
                    "attribute_f1": round(attack["f1"], 4),
                }
            )
    return results, released_codes, seconds


def release(
    codes: np.ndarray,
    rows: list[dict[str, Any]],
    domain: int,
    epsilon: float,
    randomness: DpRandomness,
) -> np.ndarray:
    """Each owner perturbs its own code once, with its own generator (secret unless seeded: (seed, video_id, ε))."""
    return np.stack(
        [
            perturb(code, domain, epsilon, randomness.numpy("ldp", row["video_id"], epsilon))
            for code, row in zip(codes, rows)
        ]
    )


@dataclass(frozen=True)
class _Inputs:
    """What ldp_video reads, checked before any work: the params, the coins and the three sets of clips."""

    base: BaseParams
    params: LdpParams
    randomness: DpRandomness
    rows: list[dict[str, Any]]
    public_rows: list[dict[str, Any]]
    train_rows: list[dict[str, Any]]
    test_rows: list[dict[str, Any]]
    classes: int


def _checked_inputs(
    base: BaseParams,
    params: LdpParams,
    privacy: PrivacyParams,
    budget: BudgetPlan,
    frames: Path,
    public: Path,
) -> _Inputs:
    """Read the manifests and refuse, before any work, filters the public labels cannot fit, a domain randomized
    response cannot use and releases over privacy.max_epsilon."""
    randomness = DpRandomness(privacy.randomness, base.seed)
    rows = read_manifest(frames / MANIFEST_NAME)
    public_rows = read_manifest(public / MANIFEST_NAME)
    train_rows, test_rows = split_rows(rows, "train"), split_rows(rows, "test")
    if not train_rows or not test_rows:
        raise PrivharError(f"{frames / MANIFEST_NAME}: ldp needs videos in both splits")
    # DCA learns its filters from the public labels
    fitted_on = int(max(row["label"] for row in public_rows)) + 1
    if params.video_first_filters > fitted_on or params.video_second_filters > fitted_on:
        raise PrivharError(
            f"params.yaml: ldp.video_first_filters = {params.video_first_filters} and "
            f"ldp.video_second_filters = {params.video_second_filters} must not exceed the {fitted_on} "
            f"classes of the public set the filters are fitted on, {public / MANIFEST_NAME} (DCA's L_r ≤ K)"
        )
    for epsilon in params.video_epsilons:
        check_domain(2**params.video_second_filters, epsilon)
        for name in CODES:
            if math.isfinite(epsilon):  # privacy.max_epsilon, before any work
                check_budget(privacy, ldp_release(epsilon, name), rows, budget)
            else:
                check_unprotected(
                    privacy, f"{ldp_release(epsilon, name)} (codes without randomized response)"
                )
    classes = int(max(row["label"] for row in rows)) + 1
    return _Inputs(base, params, randomness, rows, public_rows, train_rows, test_rows, classes)


@dataclass(frozen=True)
class _Encoded:
    """The motion images of the three sets, the fitted DCAConv encoder and the seconds each step took."""

    train_images: np.ndarray
    test_images: np.ndarray
    public_images: np.ndarray
    encoder: Any
    train_codes: np.ndarray
    test_codes: np.ndarray
    seconds: dict[str, float]


def _encode(inputs: _Inputs, frames: Path, public: Path) -> _Encoded:
    """Crop the motion images (cameras), fit DCAConv on the public ones (centrally, no private data), encode."""
    params, size = inputs.params, tuple(inputs.params.video_crop)
    started = time.perf_counter()
    train_images = motion_images(inputs.train_rows, frames, size)
    test_images = motion_images(inputs.test_rows, frames, size)
    public_images = motion_images(inputs.public_rows, public, size)
    prepared = time.perf_counter() - started
    started = time.perf_counter()
    encoder = fit_dcaconv(
        public_images,
        labels_of(inputs.public_rows).numpy(),
        first=params.video_first_filters,
        second=params.video_second_filters,
        size=params.patch,
        pool=params.video_pool,
        seed=derive_seed(inputs.base.seed, "ldp", "filters"),
    )
    fitted = time.perf_counter() - started
    started = time.perf_counter()
    train_codes, test_codes = encoder.encode(train_images), encoder.encode(test_images)
    encoded = time.perf_counter() - started
    return _Encoded(
        train_images,
        test_images,
        public_images,
        encoder,
        train_codes,
        test_codes,
        {"prepared": prepared, "fitted": fitted, "encoded": encoded},
    )


def _score_every_code(
    inputs: _Inputs, encoded: _Encoded
) -> tuple[list[dict[str, Any]], dict[str, np.ndarray], float, dict[str, int]]:
    """Release and score DCAConv's codes and paper 002's two baselines: the rows, DCAConv's released codes, the
    seconds its perturbation took, and each code's features per video."""
    has_attributes = any(
        key.startswith("attr_") for key in inputs.rows[0]
    )  # else the columns say nan
    domain = encoded.encoder.domain

    def scored(name: str, train: np.ndarray, test: np.ndarray):
        return score_codes(
            name,
            train,
            test,
            domain,
            inputs.params,
            inputs.randomness,
            inputs.train_rows,
            inputs.test_rows,
            inputs.classes,
            has_attributes,
        )

    results, released_codes, perturb_seconds = scored(
        "dcaconv", encoded.train_codes, encoded.test_codes
    )
    sizes = {"dcaconv": encoded.train_codes.shape[1]}
    baselines = baseline_codes(
        encoded.train_images, encoded.test_images, domain, inputs.base.seed, encoded.public_images
    )
    for name, (train_baseline, test_baseline) in baselines.items():
        results += scored(name, train_baseline, test_baseline)[0]
        sizes[name] = train_baseline.shape[1]
    return results, released_codes, perturb_seconds, sizes


def _ledger(
    sizes: dict[str, int], params: LdpParams, domain: int, randomness: DpRandomness
) -> list[dict[str, Any]]:
    """One ledger row per code and ε: pure ε-LDP per feature, composed over the clip's features; each finite ε's
    one-run audit of the randomized response beside it (the same mechanism for every code)."""
    audits = {
        epsilon: audit_response(
            domain,
            epsilon,
            randomness.numpy("ldp-audit", epsilon),
            params.audit_canaries,
            params.audit_confidence,
        ).columns()
        for epsilon in params.video_epsilons
        if math.isfinite(epsilon) and params.audit_canaries
    }
    return [
        {
            "release": ldp_release(epsilon, name),
            "mechanism": f"k-ary randomized response (d = {domain}) on {CODES[name]}",
            "epsilon_per_feature": epsilon,
            "features_per_video": count,
            "epsilon_per_video": epsilon * count,
            "delta": 0.0,
            "accountant": "pure ε-LDP per feature (paper 002 eq. 3-4), sequential composition over features",
            "unit": "video (one camera's clip)",
            "relation": "replace-one (any other clip of the camera)",
            "randomness": randomness.label,
            "central_steps_on_private_data": CENTRAL_STEPS,
            "splits": "train",
            **audits.get(epsilon, dict.fromkeys(AUDIT_COLUMNS, "")),
        }
        for name, count in sizes.items()
        for epsilon in params.video_epsilons
    ]


def _log_results(results: list[dict[str, Any]], features: int, domain: int) -> None:
    """One line per ε: every code's learners and DCAConv's attribute attacker."""
    for r in results:
        if r["learner"] == "nb" and r["features"] == "dcaconv":
            LOG.info(
                f"ldp: ε = {r['epsilon_per_feature']:g} per feature ({r['epsilon_per_video']:g} per video, {features} "
                f"features, d = {domain}): "
                + ", ".join(
                    f"{x['features']} {x['learner'].upper()} {x['top1']:.3f}"
                    for x in results
                    if x["epsilon_per_feature"] == r["epsilon_per_feature"]
                )
                + f"; attribute attacker cMAP {r['attribute_cmap']:.3f}"
            )


def _speed(inputs: _Inputs, encoded: _Encoded, perturb_seconds: float) -> dict[str, float]:
    """Features encoded and randomized per second, and the seconds of fitting and cropping."""
    features, seconds = encoded.train_codes.shape[1], encoded.seconds
    released = features * len(inputs.train_rows) * len(inputs.params.video_epsilons)
    return {
        "encode_features_per_second": round(features * len(inputs.rows) / seconds["encoded"], 1),
        "perturb_features_per_second": round(released / max(perturb_seconds, 1e-9), 1),
        "fit_seconds": round(seconds["fitted"], 3),
        "crop_and_motion_seconds": round(seconds["prepared"], 3),
    }


@stage_work
def ldp_video(
    *,
    base: BaseParams,
    params: LdpParams,
    privacy: PrivacyParams,
    budget: BudgetPlan,
    frames: Annotated[
        Path, arg.folder("Folder of the decoded clips (with their annotations: the person's box).")
    ],
    public: Annotated[
        Path,
        arg.folder(
            "Folder of the decoded public clips: the DCAConv filters are fitted on them, never on private videos."
        ),
    ],
    out: Annotated[
        Path,
        arg.folder(
            "Where to write the fitted DCAConv filters and the released (perturbed) training codes.",
            "output",
        ),
    ],
    report: Annotated[
        Path, arg.folder("Where to write video.csv, metrics.json and ledger.csv.", "output")
    ],
) -> list[dict[str, Any]]:
    """Fit the filters on ``public``, release the private training split's codes at every ε, score learners;
    ``budget``: the plan every finite ε's codes are checked against."""
    inputs = _checked_inputs(base, params, privacy, budget, frames, public)
    params = inputs.params
    with stage_run("ldp", {"ldp": params}) as run, atomic_directory(out) as staging:
        encoded = _encode(inputs, frames, public)
        features, domain = encoded.train_codes.shape[1], encoded.encoder.domain
        save_arrays(
            staging / "filters.npz",
            first=encoded.encoder.first,
            second=encoded.encoder.second,
            pool=np.array(encoded.encoder.pool),
        )
        results, released_codes, perturb_seconds, sizes = _score_every_code(inputs, encoded)
        save_arrays(
            staging / "released_train_codes.npz",
            **released_codes,
            video_id=np.array([row["video_id"] for row in inputs.train_rows]),
        )
        speed = _speed(inputs, encoded, perturb_seconds)
        top1 = {
            f"{r['features']}_{r['learner']}_eps{r['epsilon_per_feature']:g}": r["top1"]
            for r in results
        }
        metrics = {"top1": top1, "speed": speed, "features_per_video": features, "domain": domain}
        ledger = _ledger(sizes, params, domain, inputs.randomness)
        logged = {
            f"{r['features']}.{r['learner']}.eps{r['epsilon_per_feature']:g}": r["top1"]
            for r in results
        }
        run.log_summary({**logged, **speed})  # per feature set, learner and ε: a table
        _log_results(results, features, domain)
    # the side reports once the codes are in place: a stage that failed leaves none at their tracked paths (issue 82)
    atomic_write_bytes(report / "video.csv", csv_bytes(results))
    atomic_write_bytes(
        report / "metrics.json", (json.dumps(metrics, indent=2, sort_keys=True) + "\n").encode()
    )
    atomic_write_bytes(report / "ledger.csv", csv_bytes(ledger))
    # the codes are out: each finite ε's release is made, in the budget's ledger
    record_made(
        privacy,
        [entry["release"] for entry in ledger if math.isfinite(entry["epsilon_per_feature"])],
        inputs.rows,
        budget,
    )
    return results
