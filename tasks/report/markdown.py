"""The report's results.md: each table of the report as markdown under its heading, with the words that say how to
read it (what a row is, its unit and neighbouring relation, what was not run)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tasks.core.params import DataParams
from tasks.core.tables import markdown_of
from tasks.report.audit import AUDIT, audit_markdown
from tasks.report.claims import WITHIN_NOISE_BECAUSE
from tasks.report.ledger import family_summary
from tasks.report.person_level import TOLERANCE, person_level_markdown
from tasks.report.spread import MORE_TEST_VIDEOS, TARGET, spread_markdown
from tasks.report.tables import cell, signature_markdown, table_one_markdown


def _subjects_markdown(subjects: list[dict[str, Any]]) -> str:
    """One line per person: the per-unit sum (what adding the printed ε gives, not a guarantee) beside the person's ε."""
    lines = [
        [
            str(row["subject"]),
            str(row["dp_releases"]),
            f"{row['epsilon_per_unit_sum']:g}",
            f"{row['epsilon_person']:.4g}",
            f"{row['delta_person']:.2g}",
            str(row["releases_without_dp"]),
            str(row["releases_seeded"]),
            cell(float(row["total_epsilon_person"])),
        ]
        for row in subjects
    ]
    return markdown_of(
        [
            "person",
            "DP releases",
            "Σ ε per unit (not a guarantee)",
            "Σ ε per person",
            "Σ δ per person",
            "releases without DP",
            "seeded (not private)",
            "total ε of the person",
        ],
        lines,
    )


def _families_markdown(releases: list[dict[str, Any]]) -> str:
    lines = [
        [
            r["method"],
            r["mechanism"],
            r["unit"],
            r["relation"],
            str(r["dp_releases"]),
            r["epsilons"],
            r["person_epsilons"],
            f"{r['delta']:g}" if r["dp_releases"] else "—",
            r["accountant"],
            r["calibration"],
            r["randomness"],
            str(r["releases_without_dp"]),
        ]
        for r in family_summary(releases)
    ]
    return markdown_of(
        [
            "method",
            "mechanism",
            "unit (what ε covers)",
            "relation",
            "DP releases",
            "ε per unit",
            "ε of the most exposed person",
            "δ",
            "accountant",
            "calibration",
            "randomness",
            "releases without DP",
        ],
        lines,
    )


READ_FIRST = (
    "Read this first. Every number is also in `report/*.csv`, `report/results.parquet` and `report/metrics.json` "
    "(`dvc metrics show`); the plots are DVC plots (`dvc plots show`)."
)


TABLE_ONE = (
    "Top-1: action recognition, protocol 1 (trained on the method's output, tested on raw test videos) and "
    "protocol 2 (tested on the method's own test split), as mean ± half-width of the 95 % Student-t interval over "
    "the row's training seeds (`report.seeds`; a private row's `private.seeds_at_epsilon` or `private.seeds`: "
    "the `seeds` column of report/table1.csv), every seed scored on the same test videos: the interval is the "
    "training's spread on this test split, not the test set's. cMAP / F1: a privacy-attribute classifier trained on raw "
    "frames (and, *adaptive*, retrained on the protected training frames) predicting the subjects' attributes on "
    "the protected test frames — lower is more private; n/a for DP training, which protects the model, not the frames; "
    "n/m: not measured (real footage without attribute annotations)."
)


def data_line(data: DataParams, decoded: list[dict[str, Any]]) -> str:
    """What the numbers were computed from: the dataset, its folder and split, its training and test videos (issue
    61: a real folder's results.md did not say)."""
    counts = {split: sum(row["split"] == split for row in decoded) for split in ("train", "test")}
    source = (
        "the embedded synthetic dataset"
        if data.source == "synthetic"
        else f"a {data.source.upper()}-shaped folder, `{data.root}`, split {data.split}"
    )
    return f"**Data:** {source}: {counts['train']} training and {counts['test']} test videos (after decode)."


SIGNATURE = (
    "id: 1 − face re-identification rate (LBPH / Eigen / Fisher trained on raw faces; ind eq. 16, aggr eq. 17, "
    "fused eq. 18); det: detection hit rate, Dice > 0.5 (HOG + linear SVM trained on raw frames; eq. 20-22); "
    "track: MIL / KCF / CSRT from the first true box (eq. 23); sim: SSIM and 1 − MSE/255² (eq. 24); "
    "speed: min(frames/s / τ, 1) (eq. 25, min for the printed max). What is left of people, the last columns: "
    "coverage: the share of moving (or true person) pixels the anonymize method changed, mean over released "
    "clips (tasks/anonymize/coverage.py); held back: clips below anonymize.min_coverage, quarantined; no avatar drawn: "
    "released clips of the avatar copy with no avatar in any frame (no person found: nothing replaced, and "
    "MaskDP has no public view of them; n/m for a copy without avatars); public pixels: mean share of a released "
    "clip's pixels in its public mask, MaskDP's input (the pixels the avatars cover fully: an anti-aliased edge "
    "blends the real background in; blacked-out people; n/m for a copy without masks); unchanged with people: released clips "
    "of a copy that claims to remove people or faces left unchanged byte for byte although people were found in them "
    "(the anonymize stage names them in its log; n/m for a copy that claims nothing); people / "
    "faces per frame: OpenCV's HOG people and Haar face detections re-run on the protected test frames (not on "
    "avatar pixels); person pixels: share of the raw frames' person pixels (MOG2 / KNN motion and HOG) the same "
    "detectors still find; faces kept: of the frames (and clips) where OpenCV's Haar detector finds a face in "
    "the raw frame (on an annotated visible face, where the dataset has them: Haar also fires on background "
    "texture, which every copy keeps), the share where it finds it again in the protected frame (Dice > 0.5; "
    "a clip counts when a face survives in any one of its frames; the raw row 1): what a detector still calls a "
    "face there — a face-shaped blob, not always one a person could name (a blurred synthetic head still is "
    "one; the id columns say whether the person is named), and on real footage a lower bound of the faces a "
    "person would see, since Haar misses many. "
    "n/m: not measured (real footage without annotations or attributes)."
)


LEDGER = (
    "Every ε names its unit — what one neighbouring change is: a video, a person, a frame, a pixel change — and "
    "its relation (add/remove or replace-one). The person is the unit that matters: a person appears in many videos, "
    "so each release's ε for a person is its group ε over their videos, computed exactly from the composed mechanism "
    "(mixture-of-Gaussians PLD for DP-SGD; for MaskDP's replace-one, the two add/remove group steps of a replaced "
    "person composed as trade-off curves, within 2 % of the worst case; Gaussian DP for Video-DPRP and the "
    "federated clients; videos × ε for LDP codes), and a person's total is the sum over the releases that hold them (sequential composition). Training on "
    "a DPRP copy is post-processing (free). Releases without DP (anonymized copies, models trained on raw or "
    "anonymized clips, the ε = ∞ references) and releases made with seeded randomness (reproducible from params, "
    "so not private) make a person's total unbounded. Expect large person-level numbers: that is the finding."
)


COSTS = (
    "Each protected copy's model against the model of the raw clips, Top-1 (protocol 1) over their training seeds, "
    "Welch's t-test at 95 %: *costs* when significantly lower, *within noise* when the seeds cannot tell them apart."
)


CLAIMS = (
    "Each claim compares two rows' Top-1 (protocol 1) over their training seeds with Welch's t-test: *holds* or "
    "*reversed* when the gap is significant at 95 %, *undecided* otherwise — one run decides nothing (another "
    "machine moved single-run Top-1 by up to 17 points). The gap's 95 % Welch interval says what an *undecided* "
    "claim still leaves possible: a difference outside it is ruled out. The paper's gap is the smallest it prints "
    "for the comparison over its datasets (its table and numbers beside it): the size of effect that would matter; "
    "an *undecided* interval wholly below it rules the paper's gain out. Where each paper makes the claim: "
    "tasks/report/claims.py."
)


PERSON_LEVEL = (
    "`dp_sgd_person` samples people (Poisson, at the public count `private.public_size.person`) and clips the sum "
    "of each sampled person's per-video gradients as one unit, so ε is per person (add/remove of a person and "
    "all their videos); a bystander in another person's video is held by two units and pays group privacy "
    "over them (the most exposed person's column). Beside it, video-level DP-SGD at the same ε, whose person "
    "pays group privacy over all of their videos, and the non-private model. The goal beyond the papers (none "
    f"protects the person): within {TOLERANCE:g} points of the non-private model, decided on the gap's 95 % "
    "Welch interval over the seeds."
)


SPREAD = (
    f"Each row's seeds are scored on the same test videos, so a seed's spread has two parts (in quadrature): "
    "the test set's (a video some seeds' models get right and others wrong: shrinks with more test videos) and "
    "the model's (what training and, for a private row, its DP noise draw do: only more seeds shrink it). The "
    f"rows whose 95 % interval is wider than ±{100 * TARGET:g} points, with the seeds that would narrow it to "
    f"±{100 * TARGET:g} with this test set and with {MORE_TEST_VIDEOS}× the test videos "
    "(tasks/report/spread.py; every row in report/spread.csv):"
)


def _claims_markdown(claims: list[dict[str, Any]]) -> str:
    if not claims:
        return "No claim can be tested with these params (each needs both of its rows trained)."
    lines = [
        [
            row["paper"],
            row["claim"],
            f"{row['higher_model']}: {row['higher_top1']}",
            f"{row['lower_model']}: {row['lower_top1']}",
            _gap_text(row),
            "—"
            if math.isnan(row["paper_gap"])
            else f"{row['paper_gap']:+.1f} ({row['paper_gap_source']})",
            row["verdict"],
        ]
        for row in claims
    ]
    return markdown_of(
        [
            "paper",
            "claim",
            "claimed higher, Top-1 (%)",
            "claimed lower, Top-1 (%)",
            "gap, 95 % interval (points)",
            "the paper's gap (points)",
            "verdict",
        ],
        lines,
    )


def _gap_text(row: dict[str, Any]) -> str:
    if math.isnan(row["gap"]):
        return "n/a"
    if not math.isfinite(row["gap_low"]):
        return f"{row['gap']:+.1f} (one seed: no interval)"
    return f"{row['gap']:+.1f} [{row['gap_low']:+.1f}, {row['gap_high']:+.1f}]"


def _costs_markdown(costs: list[dict[str, Any]], view: str) -> str:
    if not costs:
        return "No protected copy in these params."
    lines = [
        [
            row["method"],
            row["top1"],
            row["raw_top1"],
            "n/a" if math.isnan(row["gap"]) else f"{row['gap']:+.1f}",
            row["verdict"],
        ]
        for row in costs
    ]
    table = markdown_of(
        ["protection", "Top-1 P1 (%)", "raw clips (%)", "gap (points)", "verdict"], lines
    )
    close = [row["method"] for row in costs if row["verdict"].startswith("within noise")]
    if not close:
        return table
    return f"{table}\n\nWithin noise of the raw clips: {', '.join(close)}. Why: {WITHIN_NOISE_BECAUSE[view]}."


@dataclass(frozen=True)
class ReportTables:
    """The report's tables, each a list of rows: Table 1, paper 004's signature, the releases and the data subjects'
    totals, the papers' claims decided, the costs against raw, person-level DP, the audits, the spread over seeds."""

    table: list[dict[str, Any]]
    signatures: list[dict[str, Any]]
    releases: list[dict[str, Any]]
    subjects: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    costs: list[dict[str, Any]]
    people: list[dict[str, Any]]
    audits: list[dict[str, Any]]
    spread: list[dict[str, Any]]


def results_markdown(
    tables: ReportTables, cap: float, who: str = "", view: str = "motion", data: str = ""
) -> str:
    """results.md: every table under its heading; ``who`` says who the data subjects are, ``view`` is the models'
    input (``train.input``), ``data`` the line on the dataset."""
    table, signature, releases, subjects = (
        tables.table,
        tables.signatures,
        tables.releases,
        tables.subjects,
    )
    cap_text = "none" if math.isinf(cap) else f"ε ≤ {cap:g} per person"
    links = " ".join(f"[{row['copy']}](report/signature/{row['copy']}.png)" for row in signature)
    return (
        "\n\n".join(
            [
                "# privhar results",
                READ_FIRST,
                *([data] if data else []),
                "## Utility and privacy attributes per method (paper 000 Table 1)",
                TABLE_ONE,
                table_one_markdown(table),
                "![Top-1 against attribute cMAP](report/top1_vs_cmap.png)",
                "Top-1 against ε for every private method: [compare/private.md](compare/private.md)",
                "![Top-1 against ε](compare/accuracy_vs_epsilon.png)",
                "Federated DP training (paper 003, FedAvg / FedNova × full / selective): [federated/federated.md](federated/federated.md)",
                "## What each protection costs against the raw clips",
                COSTS,
                _costs_markdown(tables.costs, view),
                "## The papers' claims, decided over seeds",
                CLAIMS,
                _claims_markdown(tables.claims),
                "## What would narrow each interval: more seeds or more test videos",
                SPREAD,
                spread_markdown(tables.spread)
                if tables.spread
                else "Not run (evaluate's predictions.csv not found).",
                "## Person-level DP-SGD: the person, not the video, as the unit",
                PERSON_LEVEL,
                person_level_markdown(tables.people),
                "## Paper 004 signature: every evaluator in [0, 1], 1 = best",
                SIGNATURE,
                signature_markdown(signature),
                links,
                "![Faces that survive each protection](report/face_leakage.png)",
                "## Privacy ledger",
                f"Cap (`privacy.max_epsilon`): {cap_text}. {LEDGER}",
                _families_markdown(releases) if releases else "No release yet.",
                "Every release, with the accountant's parameters: [report/releases.csv](report/releases.csv).",
                "### Audited ε: a lower bound from one run",
                AUDIT,
                audit_markdown(tables.audits),
                *(["![ε̂ against ε](report/audit.png)"] if tables.audits else []),
                "### Per person",
                who,
                _subjects_markdown(subjects) if releases else "",
            ]
        )
        + "\n"
    )
