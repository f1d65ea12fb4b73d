"""Stage ``ldp-digits``: paper 002's check on scikit-learn's bundled handwritten digits (Tables 1-2 in shape).

For d = 16 (L2 = 4) and d = 2 (L2 = 1): DCAConv fitted on the training split (and the paper's baselines,
raw pixels and HOG visual words in the same domain: tasks/ldp/baselines.py), every training code
perturbed by k-ary randomized response at each per-feature ε, Naive Bayes, KNN and the nearest-
centroid classifier fitted on the perturbed codes and tested on clean test codes; ``ldp.repetitions``
repetitions (a fresh stratified split, filters and perturbation each), mean ± std. Two claims are
checked and reported: KNN approaches its no-noise accuracy once ε ≥ ln(d + 1); NB beats KNN at small ε.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from tasks.core import stage_options as arg
from tasks.core.dp_params import LdpParams
from tasks.core.figures import plt, png_bytes
from tasks.core.item_randomness import derive_seed
from tasks.core.params import BaseParams
from tasks.core.storage import atomic_write_bytes
from tasks.core.tables import csv_bytes
from tasks.core.tracking import stage_run, stage_work
from tasks.ldp.baselines import hog_bovw_codes, raw_pixel_codes
from tasks.ldp.dcaconv import fit_dcaconv
from tasks.ldp.learners import NaiveBayes, NearestCentroid, knn_predict
from tasks.ldp.randomized_response import perturb

LOG = logging.getLogger(__name__)

LEARNERS = ("nb", "knn", "ncc")
CLOSE = 0.05  # "approaches the no-noise value": within 5 points


def codes_of(
    representation: str,
    train_x: np.ndarray,
    test_x: np.ndarray,
    train_y: np.ndarray,
    bits: int,
    params: LdpParams,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Training and test codes in [0, 2^bits − 1]: DCAConv, or one of paper 002's baselines."""
    if representation == "dcaconv":
        encoder = fit_dcaconv(
            train_x,
            train_y,
            first=params.first_filters,
            second=bits,
            size=params.patch,
            pool=params.digits_pool,
            seed=seed,
        )
        return encoder.encode(train_x), encoder.encode(test_x)
    if representation == "raw_pixels":
        return raw_pixel_codes(train_x, test_x, 2**bits)
    return hog_bovw_codes(train_x, test_x, 2**bits, seed)


def one_repetition(
    images: np.ndarray,
    labels: np.ndarray,
    bits: int,
    epsilons: list[float],
    params: LdpParams,
    seed: int,
) -> dict[tuple[str, float, str], float]:
    train_x, test_x, train_y, test_y = train_test_split(
        images,
        labels,
        test_size=params.digits_test_fraction,
        stratify=labels,
        random_state=seed % 2**32,
    )
    accuracy = {}
    for representation in params.digits_representations:
        train_codes, test_codes = codes_of(
            representation, train_x, test_x, train_y, bits, params, seed
        )
        rng = np.random.default_rng(derive_seed(seed, representation))
        for epsilon in epsilons:
            released = perturb(train_codes, 2**bits, epsilon, rng)
            guesses = {
                "nb": NaiveBayes.fit(released, train_y, 2**bits, epsilon, 10).predict(test_codes),
                "knn": knn_predict(released, train_y, test_codes, k=params.knn_k),
                "ncc": NearestCentroid.fit(released, train_y, 2**bits, epsilon, 10).predict(
                    test_codes
                ),
            }
            for learner, guess in guesses.items():
                accuracy[(representation, epsilon, learner)] = float((guess == test_y).mean())
    return accuracy


def digits_table(params: LdpParams, seed: int) -> list[dict[str, Any]]:
    images, labels = load_digits(return_X_y=True)
    images = images.reshape(-1, 8, 8)
    rows = []
    for domain in params.digits_domains:
        bits = int(math.log2(domain))
        runs = [
            one_repetition(
                images,
                labels,
                bits,
                params.digits_epsilons,
                params,
                derive_seed(seed, "ldp-digits", domain, rep),
            )
            for rep in range(params.repetitions)
        ]
        for representation in params.digits_representations:
            for epsilon in params.digits_epsilons:
                for learner in LEARNERS:
                    values = [run[(representation, epsilon, learner)] for run in runs]
                    rows.append(
                        {
                            "d": domain,
                            "features": representation,
                            "epsilon": epsilon,
                            "learner": learner,
                            "mean": round(float(np.mean(values)), 4),
                            "std": round(float(np.std(values)), 4),
                            "repetitions": len(values),
                        }
                    )
        LOG.info(
            f"ldp-digits: d = {domain}: {params.repetitions} repetitions of {len(params.digits_representations)} "
            f"representations done"
        )
    return rows


def claims(rows: list[dict[str, Any]]) -> list[str]:
    """The paper's two claims, each confirmed or refuted with the numbers that decide it."""
    lines = []
    rows = [
        row for row in rows if row.get("features", "dcaconv") == "dcaconv"
    ]  # the paper's claims are about DCAConv
    for domain in sorted({row["d"] for row in rows}, reverse=True):
        table = {
            (row["epsilon"], row["learner"]): row["mean"] for row in rows if row["d"] == domain
        }
        finite = sorted({e for e, _ in table if math.isfinite(e)})
        clean = table.get((math.inf, "knn"))
        threshold = math.log(domain + 1)
        if clean is not None:
            above = [e for e in finite if e >= threshold]
            held = all(clean - table[(e, "knn")] <= CLOSE for e in above) if above else False
            detail = ", ".join(f"ε {e:g}: {table[(e, 'knn')]:.3f}" for e in above)
            lines.append(
                f"d = {domain}: KNN within {CLOSE:.2f} of its no-noise {clean:.3f} for every ε ≥ ln(d + 1) = "
                f"{threshold:.2f} — {'holds' if held else 'does not hold'} ({detail or 'no ε that large'})"
            )
        small = [e for e in finite if e <= 1.0]
        wins = [e for e in small if table[(e, "nb")] > table[(e, "knn")]]
        lines.append(
            f"d = {domain}: NB beats KNN at small ε (≤ 1) — {'holds' if len(wins) == len(small) else 'does not hold'} "
            f"("
            + ", ".join(
                f"ε {e:g}: NB {table[(e, 'nb')]:.3f} vs KNN {table[(e, 'knn')]:.3f}" for e in small
            )
            + ")"
        )
    return lines


def markdown(rows: list[dict[str, Any]], params: LdpParams) -> str:
    setup = (
        f"DCAConv L1 = {params.first_filters}, {params.patch}×{params.patch} patches, {params.digits_pool}×"
        f"{params.digits_pool} max pooling; per-feature ε; NB / KNN (k = {params.knn_k}, Hamming) / nearest centroid "
        f"trained on perturbed codes, tested on clean ones; mean ± std over {params.repetitions} repetitions (accuracy, %)."
    )
    parts = ["# Paper 002's check: handwritten digits (scikit-learn `load_digits`)", setup]
    for domain in params.digits_domains:
        epsilons = params.digits_epsilons
        lines = [
            "| features | learner | "
            + " | ".join("∞" if math.isinf(e) else f"ε = {e:g}" for e in epsilons)
            + " |",
            "|---|---|" + "---:|" * len(epsilons),
        ]
        for representation in params.digits_representations:
            for learner in LEARNERS:
                cells = {
                    row["epsilon"]: row
                    for row in rows
                    if row["d"] == domain
                    and row["learner"] == learner
                    and row["features"] == representation
                }
                lines.append(
                    f"| {representation} | {learner.upper()} | "
                    + " | ".join(
                        f"{100 * cells[e]['mean']:.1f} ± {100 * cells[e]['std']:.1f}"
                        for e in epsilons
                    )
                    + " |"
                )
        parts += [f"## d = {domain}", "\n".join(lines)]
    parts += [
        "## The paper's claims",
        "\n".join(f"- {line}" for line in claims(rows)),
        "![accuracy against ε](digits.png)",
    ]
    return "\n\n".join(parts) + "\n"


def plot(rows: list[dict[str, Any]], params: LdpParams) -> bytes:
    figure, axes = plt.subplots(
        1, len(params.digits_domains), figsize=(5 * len(params.digits_domains), 3.8), squeeze=False
    )
    finite = [e for e in params.digits_epsilons if math.isfinite(e)]
    edge = max(finite) * 1.6 if finite else 1.0
    for axis, domain in zip(axes[0], params.digits_domains):
        for learner in LEARNERS:
            cells = sorted(
                (
                    row
                    for row in rows
                    if row["d"] == domain
                    and row["learner"] == learner
                    and row["features"] == "dcaconv"
                ),
                key=lambda r: r["epsilon"],
            )
            xs = [edge if math.isinf(r["epsilon"]) else r["epsilon"] for r in cells]
            axis.errorbar(
                xs,
                [100 * r["mean"] for r in cells],
                yerr=[100 * r["std"] for r in cells],
                marker="o",
                capsize=3,
                label=learner.upper(),
            )
        axis.axvline(math.log(domain + 1), color="grey", linestyle=":", label="ln(d + 1)")
        axis.set_xscale("log")
        axis.set_xticks([*finite, edge], [*(f"{e:g}" for e in finite), "∞"])
        axis.minorticks_off()
        axis.set_ylim(0, 100)
        axis.set_xlabel("ε per feature")
        axis.set_ylabel("test accuracy (%)")
        axis.set_title(f"digits, DCAConv codes, d = {domain}")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    return png_bytes(figure, dpi=110)


@stage_work
def ldp_digits(
    *,
    base: BaseParams,
    params: LdpParams,
    out: Annotated[
        Path, arg.folder("Where to write digits.md, digits.csv and digits.png.", "output")
    ],
) -> list[dict[str, Any]]:
    with stage_run("ldp-digits", {"ldp": params}) as run:
        rows = digits_table(params, base.seed)
        atomic_write_bytes(out / "digits.csv", csv_bytes(rows))
        atomic_write_bytes(out / "digits.png", plot(rows, params))
        atomic_write_bytes(out / "digits.md", markdown(rows, params).encode())
        run.log_summary(  # per domain, learner and ε: a table
            {
                f"d{row['d']}.{row['learner']}.eps{row['epsilon']:g}": row["mean"]
                for row in rows
                if math.isfinite(row["epsilon"])
            }
        )
        for line in claims(rows):
            LOG.info(f"ldp-digits: {line}")
    return rows
