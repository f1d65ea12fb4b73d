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
from tasks.core.dp_params import DprpParams, FederatedParams, PrivacyParams, PrivateParams
from tasks.core.errors import PrivharError
from tasks.core.manifest import MANIFEST_NAME, read_manifest, write_table
from tasks.core.params import AnonymizeParams, DataParams, TrainParams
from tasks.core.scores import LEFT_COLUMNS, SIGNATURE_COLUMNS
from tasks.core.storage import atomic_write_bytes
from tasks.core.tables import csv_bytes, read_csv
from tasks.core.tracking import stage_run, stage_work
from tasks.privacy.dprp_calibration import dataset_scales
from tasks.report.audit import AUDIT_COLUMNS, audit_png, audit_rows
from tasks.report.claims import against_raw, decide, paper_claims
from tasks.report.ledger import (
    SUBJECT_COLUMNS,
    Release,
    dprp_releases,
    federated_releases,
    ldp_releases,
    method_rows,
    private_releases,
    subject_totals,
    unprotected_releases,
)
from tasks.report.markdown import ReportTables, data_line, results_markdown
from tasks.report.person_level import PERSON_METHOD, person_level_rows
from tasks.report.plots import face_leakage_png, signature_png, top1_vs_cmap_png
from tasks.report.spread import spread_rows
from tasks.report.tables import (
    NOT_RUN,
    cell,
    methods,
    signature_rows,
    table_one,
)
from tasks.video_data.subjects import subjects_statement

LOG = logging.getLogger(__name__)


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


# report/metrics.json: the names the registry's description and `dvc metrics show` use
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
    decoded = read_manifest(frames / MANIFEST_NAME)
    d = int(decoded[0]["height"]) * int(decoded[0]["width"]) * 3
    dprp_scales = [
        dataset_scales(dprp_params, epsilon, d, privacy.randomness == "secure")
        for epsilon in dprp_params.epsilons
    ]
    rows = methods(anonymize_params.methods, dprp_scales, private.methods, private.epsilons)
    scores, assessed = _json_or_empty(metrics), _json_or_empty(signature)
    claimed = paper_claims(
        private.methods,
        private.epsilons,
        dprp_scales,
        federated.aggregations,
        list(federated.tunings),
    )
    found = (
        dprp_releases(dprp)
        + private_releases(ledgers, private.methods)
        + (ldp_releases(ldp_ledger, decoded) if ldp_ledger else [])
        + (federated_releases(federated_table) if federated_table else [])
        + unprotected_releases(train_reports, anonymize)
    )
    tables = ReportTables(
        table=table_one(rows, scores, assessed),
        signatures=signature_rows(rows, assessed),
        releases=method_rows(found),
        subjects=subject_totals(found, decoded),
        claims=decide(claimed, scores),
        costs=against_raw(rows, scores),
        people=person_level_rows(ledgers, scores) if PERSON_METHOD in private.methods else [],
        audits=audit_rows(ledgers, private.methods, dprp, ldp_ledger, federated_table),
        spread=spread_rows(read_csv(predictions))
        if predictions is not None and predictions.is_file()
        else [],
    )
    # every file is made before the first is written: a failure leaves the previous report whole, never half of a new one
    files = {
        **_report_files(out / "report", tables),
        out / "results.md": results_markdown(
            tables,
            privacy.max_epsilon,
            subjects_statement(decoded),
            train.input,
            data_line(data, decoded),
        ).encode(),
    }
    with stage_run("report", {"privacy": {"max_epsilon": privacy.max_epsilon}}) as run:
        write_table(_parquet_rows(tables.table), out / "report" / "results.parquet")
        for path, content in files.items():
            atomic_write_bytes(path, content)
        _mlflow_children(run, tables.table, assessed)
        run.log_artifact(out / "results.md")
    LOG.info(
        f"report: {len(tables.table)} methods, {len(tables.releases)} releases in {out / 'results.md'}"
    )
    return tables.table


def _report_files(folder: Path, tables: ReportTables) -> dict[Path, bytes]:
    """report/'s files, each as the bytes it will hold: the tables as CSV, the DVC metrics and the plots."""
    dvc_metrics = {
        row["model"]: {
            name: row[key]
            for name, key in METRIC_NAMES.items()
            if isinstance(row[key], float | int) and not math.isnan(row[key])
        }
        for row in tables.table
    }
    signatures = tables.signatures
    release_columns = [field.name for field in fields(Release) if field.name != "persons"]
    return {
        folder / "table1.csv": csv_bytes(tables.table),
        folder / "signature.csv": csv_bytes(signatures),
        folder / "releases.csv": csv_bytes(tables.releases, release_columns),
        folder / "subjects.csv": csv_bytes(tables.subjects, list(SUBJECT_COLUMNS)),
        folder / "claims.csv": csv_bytes(tables.claims, list(CLAIM_COLUMNS)),
        folder / "costs.csv": csv_bytes(
            tables.costs, ["method", "top1", "raw_top1", "gap", "verdict"]
        ),
        folder / "person_level.csv": csv_bytes(tables.people, PERSON_LEVEL_COLUMNS),
        folder / "audit.csv": csv_bytes(tables.audits, AUDIT_COLUMNS),
        folder / "audit.png": audit_png(tables.audits),
        folder / "spread.csv": csv_bytes(tables.spread, SPREAD_COLUMNS, float_precision=6),
        folder / "metrics.json": (
            json.dumps(dvc_metrics, indent=2, sort_keys=True) + "\n"
        ).encode(),
        folder / "top1_vs_cmap.png": top1_vs_cmap_png(tables.table),
        folder / "face_leakage.png": face_leakage_png(signatures),
        **{
            folder / "signature" / f"{row['copy']}.png": signature_png(row)
            for row in signatures
            if any(isinstance(row[key], float | int) for key in SIGNATURE_COLUMNS)
        },
    }


def _parquet_rows(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table 1 as results.parquet holds it: one type per column."""
    return [
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
