"""The report's tables: paper 000 Table 1 in its shape, paper 004's signature table, the ledger — as rows and Markdown.

A method named in params whose stage has not run yet (no scores) gets "not run" in its cells.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tasks.core.intervals import percent as as_percent
from tasks.core.scores import LEFT_COLUMNS, SIGNATURE_COLUMNS
from tasks.core.tables import markdown_of
from tasks.privacy.dprp_calibration import NoiseScales

NOT_RUN = "not run"
NOT_MEASURED = "n/m"  # assess could not measure it (real footage: no annotations or attributes)


@dataclass(frozen=True)
class Method:
    """One row of Table 1: a protected copy and the model trained on it, or a DP-trained model."""

    label: str
    model: str  # its key in evaluate's metrics.json
    copy: (
        str | None
    )  # its key in assess's signature.json; None for DP training on raw clips (frames not protected)
    epsilon: float  # math.inf: no DP guarantee


def methods(
    anonymize: list[str], dprp: list[NoiseScales], private: list[str], private_epsilons: list[float]
) -> list[Method]:
    """Every row the params call for, in the order of the tables; a Video-DPRP row by the ε that holds for its unit."""
    rows = [Method("none (raw clips)", "baseline", "raw", math.inf)]
    rows += [
        Method(f"anonymize: {name}", f"anonymize-{name}", f"anonymize-{name}", math.inf)
        for name in anonymize
    ]
    rows += [
        Method(scales.label, dprp_key(scales), dprp_key(scales), scales.epsilon) for scales in dprp
    ]
    rows += [
        Method(f"{name} ε = {epsilon_text(e)}", f"{name}-eps{e}", None, e)
        for name in private
        for e in [*private_epsilons, math.inf]
    ]
    return rows


def dprp_key(scales: NoiseScales) -> str:
    """The copy's and its model's key: dprp-eps<the dprp.epsilons value>, e.g. dprp-eps8.0."""
    return f"dprp-eps{scales.target_epsilon}"


def table_one(
    rows: list[Method], metrics: dict[str, Any], signature: dict[str, Any]
) -> list[dict[str, Any]]:
    """Per method: Top-1 under protocols 1 and 2, cMAP and F1 of the raw-trained and the adaptive attacker, ε."""
    table = []
    for method in rows:
        scores = metrics.get(method.model)
        attack = signature.get(method.copy) if method.copy else None
        record: dict[str, Any] = {
            "method": method.label,
            "model": method.model,
            "copy": method.copy or "",
            "epsilon": method.epsilon,
        }
        record["top1"] = scores["top1"] if scores else NOT_RUN
        record["top1_protocol2"] = (
            scores.get("top1_protocol2", scores["top1"]) if scores else NOT_RUN
        )
        # the row over its training seeds (evaluate's summaries); protocol 2 is protocol 1 for models of raw clips
        suffix = "_protocol2" if scores and "top1_protocol2_mean" in scores else ""
        for name, source in (("top1", "top1"), ("top1_protocol2", "top1" + suffix)):
            record[f"{name}_mean"] = (
                scores.get(f"{source}_mean", scores[source]) if scores else NOT_RUN
            )
            record[f"{name}_ci95"] = scores.get(f"{source}_ci95", math.nan) if scores else NOT_RUN
        record["seeds"] = scores.get("seeds", 1) if scores else NOT_RUN
        for key in ("cmap_raw_attacker", "f1_raw_attacker", "cmap_adaptive", "f1_adaptive"):
            if method.copy is None:
                record[key] = "n/a"  # DP-SGD protects the model; the frames stay as they were
            else:
                record[key] = attack[key] if attack else NOT_RUN
        table.append(record)
    return table


def signature_rows(rows: list[Method], signature: dict[str, Any]) -> list[dict[str, Any]]:
    copies = [method for method in rows if method.copy]
    return [
        {
            "method": m.label,
            "copy": m.copy,
            **{
                key: signature[m.copy].get(key) if m.copy in signature else NOT_RUN
                for key in SIGNATURE_COLUMNS + LEFT_COLUMNS
            },
        }
        for m in copies
    ]


def epsilon_text(epsilon: float) -> str:
    return "∞" if math.isinf(epsilon) else f"{epsilon:.3g}"


def cell(value: Any, percent: bool = False) -> str:
    if value is None:
        return NOT_MEASURED
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isinf(value):
        return "∞"
    return (
        as_percent(value)
        if percent
        else f"{value:.3f}"
        if isinstance(value, float) and not value.is_integer()
        else f"{value:g}"
    )


def spread_cell(record: dict[str, Any], score: str) -> str:
    """``mean ± half-width`` (%) of the 95 % interval over the row's seeds; the mean alone for one seed."""
    mean, half = record[f"{score}_mean"], record[f"{score}_ci95"]
    if isinstance(mean, str) or isinstance(half, str) or math.isnan(half):
        return cell(mean, True)
    return f"{as_percent(mean)} ± {as_percent(half)}"


def table_one_markdown(table: list[dict[str, Any]]) -> str:
    headers = [
        "method",
        "ε",
        "Top-1 P1 (%)",
        "Top-1 P2 (%)",
        "cMAP",
        "F1",
        "cMAP adaptive",
        "F1 adaptive",
    ]
    lines = [
        [
            r["method"],
            epsilon_text(r["epsilon"]),
            spread_cell(r, "top1"),
            spread_cell(r, "top1_protocol2"),
            cell(r["cmap_raw_attacker"]),
            cell(r["f1_raw_attacker"]),
            cell(r["cmap_adaptive"]),
            cell(r["f1_adaptive"]),
        ]
        for r in table
    ]
    return markdown_of(headers, lines)


def signature_markdown(rows: list[dict[str, Any]]) -> str:
    headers = [
        "method",
        *(key.removeprefix("e_") for key in SIGNATURE_COLUMNS),
        "coverage",
        "held back",
        "no avatar drawn",
        "public pixels",
        "unchanged with people",
        "people / frame",
        "faces / frame",
        "person pixels",
        "faces kept (frames)",
        "faces kept (clips)",
    ]
    return markdown_of(
        headers,
        [[r["method"], *(cell(r[key]) for key in SIGNATURE_COLUMNS + LEFT_COLUMNS)] for r in rows],
    )
