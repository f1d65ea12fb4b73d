"""The federated tables in the shape of paper 003 Tables 2-3, and accuracy per round.

reports/federated/federated.md   aggregation × tuning: Top-1, runtime, MB per client per round,
                                 measured ratio to a full-model update and eq. 14's d_t/d, ε (valid
                                 accountant) beside the paper's eq. 11 approximation
reports/federated/federated.csv  the same numbers
reports/federated/rounds.csv     every round of every run (DVC plot)
reports/federated/accuracy_by_round.png
reports/federated/metrics.json   Top-1, ε, MB per round per run (DVC metrics)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from tasks.core.dp_params import FederatedParams, tuned
from tasks.core.figures import percent_chart_png, plt
from tasks.core.intervals import Interval, interval
from tasks.core.seeds import base_key
from tasks.core.storage import atomic_write_bytes
from tasks.core.tables import csv_bytes, frame_of, markdown_of


def federated_table(
    rows: list[dict[str, Any]], rounds: list[dict[str, Any]], report: Path, params: FederatedParams
) -> None:
    atomic_write_bytes(report / "federated.csv", csv_bytes(rows))
    atomic_write_bytes(report / "rounds.csv", csv_bytes(rounds))
    # not "top1": the evaluate stage scores these models too (top1 / top5 as fractions), and the registry reads that
    metrics = {
        row["model"]: {
            "accuracy_percent": row["accuracy"],
            "epsilon": row["epsilon"],
            "mb_per_client_round": row["mb_per_client_round"],
            "runtime_s": row["runtime_s"],
        }
        for row in rows
    }
    atomic_write_bytes(
        report / "metrics.json", (json.dumps(metrics, indent=2, sort_keys=True) + "\n").encode()
    )
    atomic_write_bytes(report / "accuracy_by_round.png", _plot(rows, rounds, params))
    atomic_write_bytes(report / "federated.md", markdown(rows, params).encode())


def seed_intervals(rows: list[dict[str, Any]]) -> dict[str, Interval]:
    """Each registered (seed 0) model's final Top-1 over its training seeds, as a fraction."""
    accuracy = frame_of(
        [{"model": base_key(row["model"])[0], "top1": row["accuracy"] / 100} for row in rows]
    )
    grouped = accuracy.group_by("model", maintain_order=True).agg(pl.col("top1"))
    return {model: interval(values) for model, values in grouped.iter_rows()}


def _intro(params: FederatedParams, rows: list[dict[str, Any]]) -> list[str]:
    """The title, the setting every row shares and each tuning's local recipe with its σ."""
    recipes = []
    for tuning in params.tunings:
        own = tuned(params, tuning)
        sigmas = {row["noise_multiplier"] for row in rows if row["tuning"] == tuning} - {0.0}
        sigma = f", σ = {max(sigmas):g}" if sigmas else ""
        recipes.append(
            f"{tuning}: {own.local_epochs} local epoch(s) a round, batches of {own.batch_size}, learning rate "
            f"{own.learning_rate:g}, momentum {own.momentum:g}{sigma}"
        )
    return [
        "# Federated private training (paper 003, FedDP-STECAR)",
        "",
        (
            f"{params.clients} clients ({params.partition} partition), {params.rounds} rounds, "
            f"{params.client_fraction:.0%} of the clients per round; DP-SGD (Opacus) per client with shuffled batches, "
            f"C = {params.max_grad_norm}, δ = {params.delta}, σ calibrated per tuning so that each spends "
            f"ε = {params.epsilon:g} per client. {'; '.join(recipes)} (`federated.recipe_per_tuning` over the shared "
            "recipe). Top-1 on the raw test clips after the last round. The `-epsinf` rows train the same recipe with "
            "no noise (no DP guarantee): a row's gap to its reference is what the noise costs, the reference's gap to "
            "the non-private model is the recipe's own (too few local steps for a model to converge without noise: "
            "docs/pipeline.md measures the references reaching the non-private models with more local epochs)."
            + _shared_models(rows)
        ),
        "",
    ]


def _shared_models(rows: list[dict[str, Any]]) -> str:
    """The sentence saying which aggregations' models another one trained (FedNova's are FedAvg's under equal
    local steps), or nothing."""
    shared = sorted(
        {
            (row["aggregation"], row["trained_as"])
            for row in rows
            if row.get("trained_as", row["aggregation"]) != row["aggregation"]
        }
    )
    if not shared:
        return ""
    named = ", ".join(f"{mine}'s models are {theirs}'s" for mine, theirs in shared)
    return (
        " Every client takes the same local steps here (E·⌈N_k / B⌉), so FedNova's normalisation is the identity "
        f"and {named}, trained once at each ε and seed (column `trained_as` of federated.csv): those rows repeat "
        "the other's."
    )


def _table_rows(rows: list[dict[str, Any]], spread: dict[str, Any]) -> list[list[str]]:
    """One line per registered (seed 0) model."""
    return [
        [
            row["model"],
            f"{row['tuning']} (`{row['trainable']}`)",
            row["aggregation"],
            spread[row["model"]].percent(),
            f"{row['runtime_s']:.1f}",
            f"{row['mb_per_client_round']:.4f}",
            f"{row['bytes_ratio']:.4f}",
            f"{row['eq14_dt_over_d']:.4f}",
            _number(row["epsilon"]),
            _audited(row),
            _number(row["paper_eq11_epsilon"]),
        ]
        for row in rows
        if not row.get("seed")
    ]


def _footer(first: dict[str, Any]) -> list[str]:
    """What ε per client and the traffic column mean, and the per-round plot."""
    return [
        "",
        (
            f"ε per client: {first['accountant']}; the largest over the clients. ε̂: the one-run audit's lower bound "
            "on it at the stated confidence (gradient canaries in the head, in one extra federation never released; "
            "`federated.audit_canaries: 0` turns it off). Eq. 11 of paper 003, (q/σ)·sqrt(2E ln(1/δ)) "
            "with q = B/N_k and E the client's total local epochs, is shown as printed: an approximation, not a bound."
        ),
        (
            f"Traffic: bytes of `torch.save` of the masked update (trainable tensors only, names included) per client per "
            f"round; a full-model update is {first['full_model_mb']:.4f} MB."
        ),
        "",
        "![Top-1 per round](accuracy_by_round.png)",
        "",
    ]


def markdown(rows: list[dict[str, Any]], params: FederatedParams) -> str:
    """federated.md: the recipe, one line per model with its seeds' interval, traffic and ε, and what they mean."""
    first = rows[0]
    spread = seed_intervals(rows)
    counts = sorted({value.seeds for value in spread.values()})
    seeds = (
        f"{counts[0]}"
        if len(counts) == 1
        else f"{counts[0]} to {counts[-1]} (`federated.seeds_per_tuning`)"
    )
    header = [
        "model",
        "tuning",
        "aggregation",
        f"Top-1 (%), mean ± 95 % over {seeds} seeds",
        "runtime (s)",
        "traffic per client per round (MB)",
        "vs full model (measured)",
        "d_t/d (eq. 14)",
        "ε per client (each seed)",
        "ε̂ audited (one run)",
        "ε eq. 11 (paper's approximation)",
    ]
    lines = _intro(params, rows) + [markdown_of(header, _table_rows(rows, spread))] + _footer(first)
    return "\n".join(lines)


def _audited(row: dict[str, Any]) -> str:
    """The one-run audit's lower bound on the row's ε (tasks/federated/audit.py), or why there is none."""
    if row.get("epsilon_audited", "") != "":
        return f"{float(row['epsilon_audited']):.2f}"
    return "—" if row["epsilon"] == "inf" else "not audited"


def _number(value: Any) -> str:
    return value if isinstance(value, str) else f"{value:.3g}"


def _plot(
    rows: list[dict[str, Any]], rounds: list[dict[str, Any]], params: FederatedParams
) -> bytes:
    figure, axes = plt.subplots(figsize=(7.5, 4))
    for row in (row for row in rows if not row.get("seed")):  # the registered models (seed 0)
        mine = [record for record in rounds if record["model"] == row["model"]]
        axes.plot(
            [r["round"] for r in mine],
            [100 * r["accuracy"] for r in mine],
            marker="o",
            label=row["model"],
        )
    axes.set_xlabel("round")
    axes.set_xticks(range(1, params.rounds + 1))
    return percent_chart_png(
        figure,
        axes,
        ylabel="Top-1 (%)",
        title=f"Federated DP training, ε = {params.epsilon:g} per client",
        legend_size=8,
    )
