"""Stage ``private-table``: Top-1 of every private method at every ε, as the papers tabulate it.

    reports/evaluate/metrics.json ─┐   Top-1 (protocols 1 and 2) per model
    reports/private/<method>.csv ──┼─▶ out/private.md   Markdown: paper 001 Table 2 / paper 000 Table 2 shape
    reports/train/<key>.json ──────┘   out/private.csv  one row per model, with its ε and how it was computed
      (baseline, dprp-eps<ε>)          out/accuracy_vs_epsilon.csv  Top-1 ± 95 % per method and ε (dvc.yaml's plot)
                                       out/accuracy_vs_epsilon.png

Rows are what was trained (data × training method), columns the target ε of the grid and ∞
(the same recipe without noise); each cell is Top-1 on the raw test videos (protocol 1: one
test set for every row), as the mean ± 95 % interval over the row's training seeds (``report.seeds``; a private
row's ``private.seeds_at_epsilon`` or ``private.seeds``).
Models trained on a protected copy (MaskDP on the avatar copy,
Video-DPRP) get a second table on that copy's test split (protocol 2). The achieved ε of each
cell, its δ and the accountant that computed it are in the ledger table and the CSV.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import polars as pl

from tasks.core import stage_options as arg
from tasks.core import tables
from tasks.core.dp_params import DprpParams, PrivateParams
from tasks.core.errors import PrivharError
from tasks.core.figures import percent_chart_png, plt
from tasks.core.intervals import percent
from tasks.core.private_catalogue import CATALOGUE
from tasks.core.storage import atomic_write_bytes
from tasks.core.tables import csv_bytes, frame_of, markdown_of, read_csv
from tasks.core.tracking import stage_run, stage_work


@dataclass(frozen=True)
class Row:
    """One line of the table: what data a family of models learnt from and how."""

    data: str
    training: str
    method: str  # the model keys' prefix: <method>-eps<ε>
    note: str = ""


ROWS = {
    name: Row(method.data, method.training, name, method.note) for name, method in CATALOGUE.items()
}
DPRP = Row("Video-DPRP copy", "Video-DPRP", "dprp")
BASELINE = Row("real", "non-private, full fine-tuning", "baseline")


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise PrivharError(
            f"{path}: not found; run the stage that writes it (evaluate, train) first"
        )
    return json.loads(path.read_text())


def _ledger(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise PrivharError(
            f"{path}: not found; expected the train-private stage's ledger of this method"
        )
    return read_csv(path).to_dicts()


def _scores(metrics: dict[str, Any], key: str, metrics_path: Path) -> dict[str, Any]:
    if key not in metrics:
        raise PrivharError(
            f"{metrics_path}: no scores for model {key!r}; rerun evaluate after training it"
        )
    return metrics[key]


def _private_records(
    metrics: dict[str, Any],
    metrics_path: Path,
    ledgers: Path,
    methods: list[str],
    clips_per_video: int,
) -> list[dict[str, Any]]:
    """One record per private method and ε, from its ledger: seed 0's model (the others are in its interval)."""
    records = []
    for method in methods:
        row = ROWS[method]
        for entry in _ledger(ledgers / f"{method}.csv"):
            if int(entry.get("seed") or 0):
                continue  # another training seed of a row: in the row's interval (evaluate's top1_mean, top1_ci95)
            scores = _scores(metrics, entry["model"], metrics_path)
            records.append(
                _record(
                    row,
                    entry["model"],
                    float(entry["target_epsilon"]),
                    float(entry["epsilon"]),
                    float(entry["delta"]),
                    entry["accountant"],
                    scores,
                    clips_per_video,
                    noise_multiplier=entry["noise_multiplier"],
                    steps=entry["steps"],
                    unit=entry.get("unit", ""),
                    relation=entry.get("relation", ""),
                    epsilon_person_max=entry.get("epsilon_person_max", ""),
                    paper_epsilon=entry.get("paper_epsilon", ""),
                    randomness=entry.get("randomness", ""),
                )
            )
    return records


def _dprp_record(
    metrics: dict[str, Any],
    metrics_path: Path,
    train_reports: Path,
    epsilon: float,
    clips_per_video: int,
) -> dict[str, Any]:
    """The model trained on a DPRP copy, placed at the ε its noise gives for its unit, the paper's printed ε
    (dprp.epsilons) beside it."""
    key = f"dprp-eps{epsilon}"
    claim = _read_json(train_reports / f"{key}.json")
    return _record(
        DPRP,
        key,
        float(claim["epsilon"]),
        float(claim["epsilon"]),
        float(claim["delta"]),
        claim["accountant"],
        _scores(metrics, key, metrics_path),
        clips_per_video,
        unit=claim.get("unit", ""),
        relation=claim.get("relation", ""),
        paper_epsilon=claim.get("paper_epsilon", ""),
        randomness=claim.get("randomness", ""),
    )


def collect(
    *,
    metrics_path: Path,
    ledgers: Path,
    train_reports: Path,
    methods: list[str],
    dprp_epsilons: list[float],
    clips_per_video: int,
) -> list[dict[str, Any]]:
    """One record per model: its row, target and achieved ε, δ, accountant, Top-1 / Top-5 under both protocols."""
    metrics = _read_json(metrics_path)
    records = _private_records(metrics, metrics_path, ledgers, methods, clips_per_video)
    records += [
        _dprp_record(metrics, metrics_path, train_reports, epsilon, clips_per_video)
        for epsilon in dprp_epsilons
    ]
    claim = _read_json(train_reports / "baseline.json")
    baseline_scores = _scores(metrics, "baseline", metrics_path)
    records.append(
        _record(
            BASELINE,
            "baseline",
            math.inf,
            math.inf,
            0.0,
            claim["accountant"],
            baseline_scores,
            clips_per_video,
        )
    )
    return records


def _record(
    row: Row,
    key: str,
    target: float,
    epsilon: float,
    delta: float,
    accountant: str,
    scores: dict[str, Any],
    clips_per_video: int,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "data": row.data,
        "training": row.training.format(clips=clips_per_video),
        "model": key,
        "target_epsilon": target,
        "epsilon": epsilon,
        "delta": delta,
        "accountant": accountant,
        "noise_multiplier": extra.get("noise_multiplier", ""),
        "steps": extra.get("steps", ""),
        **{
            name: extra.get(name, "")
            for name in ("unit", "relation", "epsilon_person_max", "paper_epsilon", "randomness")
        },
        "top1": scores["top1"],
        "top5": scores["top5"],
        "top1_protocol2": scores.get("top1_protocol2", ""),
        "top5_protocol2": scores.get("top5_protocol2", ""),
        "test_videos": scores["test_videos"],
        "seeds": scores.get("seeds", 1),
        **{
            f"{score}_{part}": scores.get(f"{score}_{part}", "")
            for score in ("top1", "top1_protocol2")
            for part in ("mean", "ci95")
        },
    }


def _label(epsilon: float) -> str:
    return "∞" if math.isinf(epsilon) else f"{epsilon:g}"


def _percent(value: Any) -> str:
    return "—" if value == "" or value is None else percent(float(value))


def _cell(record: dict[str, Any] | None, score: str) -> str:
    """``mean ± half-width`` of the 95 % interval over the row's seeds, in %; the single run's score without seeds."""
    if record is None or record[score] == "":
        return "—"
    if record.get(f"{score}_ci95", "") == "":
        return _percent(record.get(f"{score}_mean") or record[score])
    return f"{_percent(record[f'{score}_mean'])} ± {_percent(record[f'{score}_ci95'])}"


def accuracy_table(records: list[dict[str, Any]], score: str) -> str:
    """Markdown: a row per (data, training), a column per target ε; cells are ``score`` in %, "—" if not run.

    A polars pivot of the records on the target ε (the grid's order, ∞ last).
    """
    epsilons = sorted({record["target_epsilon"] for record in records})
    labels = [f"ε = {_label(e)}" for e in epsilons]
    cells = frame_of(
        [
            {
                "data": r["data"],
                "training": r["training"],
                "epsilon": f"ε = {_label(r['target_epsilon'])}",
                "cell": _cell(r, score),
                "run": r[score] != "",
            }
            for r in records
        ]
    )
    ran = (
        cells.group_by("data", "training", maintain_order=True)
        .agg(pl.col("run").any())
        .filter("run")
    )
    wide = cells.join(
        ran.select("data", "training"), on=["data", "training"], how="semi", maintain_order="left"
    ).pivot(
        on="epsilon",
        index=["data", "training"],
        values="cell",
        aggregate_function="first",
        maintain_order=True,
    )
    wide = wide.with_columns(
        *(pl.lit("—").alias(label) for label in labels if label not in wide.columns)
    )
    return tables.markdown(wide.select("data", "training", *labels).fill_null("—"))


def ledger_table(records: list[dict[str, Any]]) -> str:
    """Markdown: the achieved ε of every private model with its unit and relation, the ε of the most exposed person,
    the paper's number where a paper printed another (MaskDP: 001 Theorem 1, add/remove RDP), δ, the accountant."""
    lines = [
        [
            record["model"],
            _label(record["target_epsilon"]),
            f"{record['epsilon']:.4g}",
            record["unit"],
            record["relation"],
            ""
            if record["epsilon_person_max"] == ""
            else f"{float(record['epsilon_person_max']):.4g}",
            "" if record["paper_epsilon"] == "" else f"{float(record['paper_epsilon']):.4g}",
            f"{record['delta']:g}",
            record["accountant"],
        ]
        for record in records
        if not math.isinf(record["epsilon"])
    ]
    return markdown_of(
        [
            "model",
            "target ε",
            "ε",
            "unit",
            "relation",
            "ε of the most exposed person",
            "paper's ε (not a bound)",
            "δ",
            "accountant and parameters",
        ],
        lines,
    )


def _grouped(records: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault((record["data"], record["training"]), []).append(record)
    return groups


def markdown(records: list[dict[str, Any]]) -> str:
    notes = sorted(
        {
            row.note
            for row in ROWS.values()
            if row.note and any(r["data"] == row.data for r in records)
        }
    )
    tests = max(int(record["test_videos"]) for record in records)
    seeds = sorted({int(record["seeds"]) for record in records})
    counted = (
        f"{seeds[0]}"
        if len(seeds) == 1
        else f"{', '.join(map(str, seeds[:-1]))} or {seeds[-1]} (the row's: `private.seeds_at_epsilon`, `private.seeds`, `report.seeds`)"
    )
    return (
        "\n\n".join(
            [
                "# Private training: Top-1 (%) by target ε",
                f"Protocol 1 — every model tested on the {tests} raw test videos (paper 000 §4.3). ε = ∞: the same recipe without noise "
                "(private methods: clipping kept) or, for the non-private row, full fine-tuning. "
                f"Each cell: mean ± half-width of the 95 % Student-t interval over {counted} training seeds; "
                "each seed of a private model is a DP release of its own in the ledger.",
                accuracy_table(records, "top1"),
                *notes,
                "## Protocol 2 — tested on the test split of the copy the model learnt from",
                accuracy_table(records, "top1_protocol2"),
                "## Privacy spent: ε achieved at δ, and who computed it",
                ledger_table(records),
            ]
        )
        + "\n"
    )


def _top1_and_half_width(record: dict[str, Any]) -> tuple[float, float]:
    """A row's Top-1 (protocol 1): its mean over the seeds and the 95 % interval's half-width (its own, 0, with one)."""
    top1 = float(record["top1_mean"] if record["top1_mean"] != "" else record["top1"])
    return top1, float(record["top1_ci95"]) if record["top1_ci95"] != "" else 0.0


def plot(records: list[dict[str, Any]]) -> bytes:
    """Top-1 against ε (log scale), a line per (data, training); ∞ drawn at the right edge."""
    finite = sorted({r["target_epsilon"] for r in records if math.isfinite(r["target_epsilon"])})
    infinity_x = finite[-1] * 2.5 if finite else 1.0
    figure, axes = plt.subplots(figsize=(9.5, 4.6))
    for (data, training), group in _grouped(records).items():
        group = sorted(group, key=lambda r: r["target_epsilon"])
        xs = [infinity_x if math.isinf(r["target_epsilon"]) else r["target_epsilon"] for r in group]
        ys, errors = zip(*(_top1_and_half_width(r) for r in group), strict=True)
        ys, errors = [100 * y for y in ys], [100 * e for e in errors]
        if len(group) == 1 and math.isinf(group[0]["target_epsilon"]):
            axes.axhline(
                ys[0], color="black", linestyle="--", linewidth=1, label=f"{training} ({data})"
            )
            continue
        axes.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=f"{training} ({data})")
    axes.set_xscale("log")
    ticks = [*finite, infinity_x]
    axes.set_xticks(ticks, [*(_label(e) for e in finite), "∞"])
    axes.minorticks_off()
    axes.set_xlabel("target ε (δ per the ledger)")
    return percent_chart_png(
        figure,
        axes,
        ylabel="Top-1 on the raw test videos (%), mean ± 95 % over seeds",
        legend_size=8,
        title="Accuracy vs privacy budget (protocol 1)",
    )


def epsilon_curves(records: list[dict[str, Any]], methods: list[str]) -> pl.DataFrame:
    """One line per private method and finite target ε it ran at: its Top-1 (protocol 1, mean over the seeds) and
    the 95 % interval's ends (``low``, ``high``; the mean itself where one seed ran), the data of dvc.yaml's plot
    "Top-1 against target ε" (the ``intervals`` template draws a line per method with its error bars)."""
    rows = []
    for r in records:
        method = r["model"].split("-eps")[0]
        if not math.isfinite(r["target_epsilon"]) or method not in methods:
            continue
        top1, half = _top1_and_half_width(r)
        rows.append(
            {
                "method": method,
                "target_epsilon": r["target_epsilon"],
                "top1": round(top1, 4),
                "low": round(top1 - half, 4),
                "high": round(top1 + half, 4),
            }
        )
    order = {method: rank for rank, method in enumerate(methods)}
    return frame_of(
        sorted(rows, key=lambda row: (order[row["method"]], row["target_epsilon"])),
        ["method", "target_epsilon", "top1", "low", "high"],
    )


@stage_work
def private_table(
    *,
    private: PrivateParams,
    dprp: DprpParams,
    metrics: Annotated[Path, arg.file("The evaluate stage's metrics.json.")],
    ledgers: Annotated[Path, arg.folder("Folder of the train-private stages' <method>.csv.")],
    train_reports: Annotated[
        Path,
        arg.folder(
            "Folder of the train stages' <key>.json (baseline, dprp-eps<ε>: their privacy claims)."
        ),
    ],
    out: Annotated[
        Path,
        arg.folder("Where to write private.md, private.csv and accuracy_vs_epsilon.png.", "output"),
    ],
) -> list[dict[str, Any]]:
    """Run the stage; return the CSV records written."""
    records = collect(
        metrics_path=metrics,
        ledgers=ledgers,
        train_reports=train_reports,
        methods=private.methods,
        dprp_epsilons=dprp.epsilons,
        clips_per_video=private.clips_per_video,
    )
    with stage_run("private-table", {"private": private}) as run:
        atomic_write_bytes(out / "private.csv", csv_bytes(records))
        atomic_write_bytes(out / "private.md", markdown(records).encode())
        atomic_write_bytes(
            out / "accuracy_vs_epsilon.csv", csv_bytes(epsilon_curves(records, private.methods))
        )
        atomic_write_bytes(out / "accuracy_vs_epsilon.png", plot(records))
        for name in (
            "private.md",
            "private.csv",
            "accuracy_vs_epsilon.csv",
            "accuracy_vs_epsilon.png",
        ):
            run.log_artifact(out / name)
    return records
