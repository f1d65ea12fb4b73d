"""Stage ``report``: what a person reads first — reports/results.md, with every number also as CSV, Parquet and
DVC metrics, and the plots as DVC plots.

    reports/evaluate/metrics.json ─┐  Top-1, protocols 1 and 2
    reports/assess/signature.json ─┤  cMAP / F1 (raw-trained and adaptive attacker), paper 004's e_*
    reports/private/<method>.csv ──┼─▶ results.md, report/{table1,signature,releases,subjects}.csv, results.parquet,
    reports/train/<key>.json ──────┤   claims.csv, spread.csv, metrics.json, top1_vs_cmap.png, signature/<copy>.png
    reports/evaluate/predictions.csv ┤ (every seed's answer on every test video: where a row's spread comes from)
    data/dprp/*/ledger.parquet ────┤   + one nested MLflow run per method (top1, cmap, f1, epsilon, e_*)
    data/decode (subjects) ────────┘
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

from tasks.core import stage_options as arg
from tasks.core.errors import PrivharError
from tasks.core.manifest import MANIFEST_NAME, read_manifest, write_table
from tasks.core.params import (
    AnonymizeParams,
    DataParams,
    DprpParams,
    FederatedParams,
    PrivacyParams,
    PrivateParams,
    TrainParams,
)
from tasks.core.scores import LEFT_COLUMNS, SIGNATURE_COLUMNS
from tasks.core.storage import atomic_write_bytes
from tasks.core.tables import csv_bytes, markdown_of, read_csv
from tasks.core.tracking import stage_run, stage_work
from tasks.privacy.dprp_calibration import dataset_scales
from tasks.report.audit import AUDIT, AUDIT_COLUMNS, audit_markdown, audit_png, audit_rows
from tasks.report.claims import WITHIN_NOISE_BECAUSE, against_raw, decide, paper_claims
from tasks.report.ledger import (
    SUBJECT_COLUMNS,
    Release,
    dprp_releases,
    family_summary,
    federated_releases,
    ldp_releases,
    method_rows,
    private_releases,
    subject_totals,
    unprotected_releases,
)
from tasks.report.person_level import (
    PERSON_METHOD,
    TOLERANCE,
    person_level_markdown,
    person_level_rows,
)
from tasks.report.plots import face_leakage_png, signature_png, top1_vs_cmap_png
from tasks.report.spread import MORE_TEST_VIDEOS, TARGET, spread_markdown, spread_rows
from tasks.report.tables import (
    NOT_RUN,
    cell,
    methods,
    signature_markdown,
    signature_rows,
    table_one,
    table_one_markdown,
)
from tasks.video_data.subjects import subjects_statement

LOG = logging.getLogger(__name__)

# report/metrics.json: the names the registry's description and `dvc metrics show` use
CLAIM_COLUMNS = (
    "paper",
    "claim",
    "higher_model",
    "lower_model",
    "higher_top1",
    "lower_top1",
    "gap",
    "gap_low",
    "gap_high",
    "paper_gap",
    "paper_gap_source",
    "seeds",
    "verdict",
)
METRIC_NAMES = {
    "top1": "top1",
    "top1_protocol2": "top1_protocol2",
    "top1_mean": "top1_mean",
    "top1_ci95": "top1_ci95",
    "cmap": "cmap_raw_attacker",
    "f1": "f1_raw_attacker",
    "cmap_adaptive": "cmap_adaptive",
    "f1_adaptive": "f1_adaptive",
}


def _json_or_empty(path: Path) -> dict[str, Any]:
    """A stage's JSON output, or {} when that stage has not run (its rows then say "not run")."""
    if not path.is_file():
        LOG.info(f"report: {path} not found: its rows say '{NOT_RUN}'")
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise PrivharError(f"{path}: not valid JSON ({error})") from None


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
SPREAD_COLUMNS = [
    "row",
    "seeds",
    "test_videos",
    "half_width",
    "sd",
    "sd_test_set",
    "sd_model",
    "seeds_for_3_points",
    "seeds_for_3_points_with_more_test_videos",
]
PERSON_LEVEL_COLUMNS = [
    "target_epsilon",
    "epsilon_person",
    "epsilon_person_max",
    "top1",
    "video_top1",
    "video_epsilon_person_max",
    "non_private_top1",
    "gap",
    "gap_low",
    "gap_high",
    "verdict",
]


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


def results_markdown(
    table: list[dict[str, Any]],
    signature: list[dict[str, Any]],
    releases: list[dict[str, Any]],
    subjects: list[dict[str, Any]],
    cap: float,
    who: str = "",
    claims: list[dict[str, Any]] | None = None,
    costs: list[dict[str, Any]] | None = None,
    view: str = "motion",
    person_level: list[dict[str, Any]] | None = None,
    spread: list[dict[str, Any]] | None = None,
    data: str = "",
    audits: list[dict[str, Any]] | None = None,
) -> str:
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
                _costs_markdown(costs or [], view),
                "## The papers' claims, decided over seeds",
                CLAIMS,
                _claims_markdown(claims or []),
                "## What would narrow each interval: more seeds or more test videos",
                SPREAD,
                spread_markdown(spread)
                if spread
                else "Not run (evaluate's predictions.csv not found).",
                "## Person-level DP-SGD: the person, not the video, as the unit",
                PERSON_LEVEL,
                person_level_markdown(person_level or []),
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
                audit_markdown(audits or []),
                *(["![ε̂ against ε](report/audit.png)"] if audits else []),
                "### Per person",
                who,
                _subjects_markdown(subjects) if releases else "",
            ]
        )
        + "\n"
    )


def _mlflow_children(run: Any, table: list[dict[str, Any]], signature: dict[str, Any]) -> None:
    for row in table:
        metrics = {
            key: row[key] for key in ("top1", "top1_protocol2") if not isinstance(row[key], str)
        }
        details: dict[str, Any] = {}
        if row["copy"] in signature:
            attack = signature[row["copy"]]
            found = {
                "cmap": attack["cmap_raw_attacker"],
                "f1": attack["f1_raw_attacker"],
                "cmap_adaptive": attack["cmap_adaptive"],
                "f1_adaptive": attack["f1_adaptive"],
            }
            metrics.update({key: value for key, value in found.items() if value is not None})
            # paper 004's evaluators and what protection left: the row's details, not metric keys of their own
            details = {key: attack.get(key) for key in SIGNATURE_COLUMNS + LEFT_COLUMNS}
        if math.isfinite(row["epsilon"]):
            metrics["epsilon"] = row["epsilon"]
        if metrics:
            run.child(
                row["model"],
                metrics,
                {
                    "privhar.method": row["method"],
                    "privhar.copy": row["copy"],
                    "privhar.epsilon": cell(row["epsilon"]),
                },
                details,
            )


@stage_work
def report(
    *,
    anonymize_params: AnonymizeParams,
    dprp_params: DprpParams,
    private: PrivateParams,
    privacy: PrivacyParams,
    federated: FederatedParams,
    train: TrainParams,
    data: DataParams,
    metrics: Annotated[
        Path,
        arg.file("The evaluate stage's metrics.json (missing: its rows say 'not run').", "either"),
    ],
    signature: Annotated[
        Path,
        arg.file("The assess stage's signature.json (missing: its rows say 'not run').", "either"),
    ],
    ledgers: Annotated[Path, arg.folder("Folder of the train-private stages' <method>.csv.")],
    train_reports: Annotated[Path, arg.folder("Folder of the train stages' <key>.json.")],
    dprp: Annotated[Path, arg.folder("Folder of the DPRP copies (their ledger.parquet).")],
    anonymize: Annotated[Path, arg.folder("Folder of the anonymized copies.")],
    frames: Annotated[
        Path, arg.folder("Folder of the decoded clips (the data subjects of each split).")
    ],
    out: Annotated[Path, arg.folder("Where to write results.md and report/.", "output")],
    ldp_ledger: Annotated[
        Path | None, arg.file("The ldp stage's ledger.csv (missing: no LDP release yet).", "either")
    ] = None,
    federated_table: Annotated[
        Path | None,
        arg.file(
            "The train-federated stage's federated.csv (missing: no federated release yet).",
            "either",
        ),
    ] = None,
    predictions: Annotated[
        Path | None,
        arg.file(
            "The evaluate stage's predictions.csv: where each row's spread over seeds comes from (missing: not run).",
            "either",
        ),
    ] = None,
) -> list[dict[str, Any]]:
    """Write ``out/results.md`` and ``out/report/*``; return Table 1's rows. ``anonymize`` and ``dprp`` are the
    copies' folders, ``anonymize_params`` and ``dprp_params`` their sections."""
    cap = privacy.max_epsilon
    decoded = read_manifest(frames / MANIFEST_NAME)
    d = int(decoded[0]["height"]) * int(decoded[0]["width"]) * 3
    dprp_scales = [
        dataset_scales(dprp_params, epsilon, d, privacy.randomness == "secure")
        for epsilon in dprp_params.epsilons
    ]
    rows = methods(anonymize_params.methods, dprp_scales, private.methods, private.epsilons)
    scores, assessed = _json_or_empty(metrics), _json_or_empty(signature)
    table = table_one(rows, scores, assessed)
    costs = against_raw(rows, scores)
    claims = decide(
        paper_claims(
            private.methods,
            private.epsilons,
            dprp_scales,
            federated.aggregations,
            list(federated.tunings),
        ),
        scores,
    )
    signatures = signature_rows(rows, assessed)
    people = person_level_rows(ledgers, scores) if PERSON_METHOD in private.methods else []
    audits = audit_rows(ledgers, private.methods, dprp, ldp_ledger, federated_table)
    found = (
        dprp_releases(dprp)
        + private_releases(ledgers, private.methods)
        + (ldp_releases(ldp_ledger, read_manifest(frames / MANIFEST_NAME)) if ldp_ledger else [])
        + (federated_releases(federated_table) if federated_table else [])
        + unprotected_releases(train_reports, anonymize)
    )
    releases = method_rows(found)
    subjects = subject_totals(found, decoded)
    spread = (
        spread_rows(read_csv(predictions))
        if predictions is not None and predictions.is_file()
        else []
    )
    folder = out / "report"
    # every file is made before the first is written: a failure leaves the previous report whole, never half of a new one
    dvc_metrics = {
        row["model"]: {
            name: row[key]
            for name, key in METRIC_NAMES.items()
            if isinstance(row[key], float | int) and not math.isnan(row[key])
        }
        for row in table
    }
    files = {
        folder / "table1.csv": csv_bytes(table),
        folder / "signature.csv": csv_bytes(signatures),
        folder / "releases.csv": csv_bytes(
            releases, [field.name for field in fields(Release) if field.name != "persons"]
        ),
        folder / "subjects.csv": csv_bytes(subjects, list(SUBJECT_COLUMNS)),
        folder / "claims.csv": csv_bytes(claims, list(CLAIM_COLUMNS)),
        folder / "costs.csv": csv_bytes(costs, ["method", "top1", "raw_top1", "gap", "verdict"]),
        folder / "person_level.csv": csv_bytes(people, PERSON_LEVEL_COLUMNS),
        folder / "audit.csv": csv_bytes(audits, AUDIT_COLUMNS),
        folder / "audit.png": audit_png(audits),
        folder / "spread.csv": csv_bytes(spread, SPREAD_COLUMNS, float_precision=6),
        folder / "metrics.json": (
            json.dumps(dvc_metrics, indent=2, sort_keys=True) + "\n"
        ).encode(),
        folder / "top1_vs_cmap.png": top1_vs_cmap_png(table),
        folder / "face_leakage.png": face_leakage_png(signatures),
        **{
            folder / "signature" / f"{row['copy']}.png": signature_png(row)
            for row in signatures
            if any(isinstance(row[key], float | int) for key in SIGNATURE_COLUMNS)
        },
        out / "results.md": results_markdown(
            table,
            signatures,
            releases,
            subjects,
            cap,
            subjects_statement(decoded),
            claims,
            costs,
            train.input,
            people,
            spread,
            data_line(data, decoded),
            audits,
        ).encode(),
    }
    parquet_rows = [
        {
            key: str(value)
            if isinstance(value, str)
            else float(value)
            if isinstance(value, (int, float))
            else value
            for key, value in row.items()
        }
        for row in _uniform(table)
    ]
    with stage_run("report", {"privacy": {"max_epsilon": cap}}) as run:
        write_table(parquet_rows, folder / "results.parquet")
        for path, content in files.items():
            atomic_write_bytes(path, content)
        _mlflow_children(run, table, assessed)
        run.log_artifact(out / "results.md")
    LOG.info(f"report: {len(table)} methods, {len(releases)} releases in {out / 'results.md'}")
    return table


def _uniform(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parquet needs one type per column: "not run" / "n/a" become null there (the CSV keeps the words)."""
    return [
        {
            key: (
                None if isinstance(value, str) and key not in ("method", "model", "copy") else value
            )
            for key, value in row.items()
        }
        for row in table
    ]
