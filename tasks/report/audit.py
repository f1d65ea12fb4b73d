"""results.md's audited ε: the one-run audit's lower bound ε̂ beside each claimed ε (the DPRP ledgers, train-private's
<method>.csv, train-federated's federated.csv, the LDP ledger), as a table and a plot of ε̂ against ε per family."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.figures import plt, png_bytes
from tasks.core.tables import markdown_of, read_csv, read_parquet
from tasks.privacy.one_run_audit import FDP_COLUMNS

AUDIT = (
    "Each DP-SGD family is audited at each ε by one extra training run that is never released: the release's "
    "recipe, data and trainer plus private.audit_canaries gradient canaries (the table's count), each put in with probability ½ (Steinke, Nasr & "
    "Jagielski 2023, one-run auditing; tasks/private/audit.py). The auditor sees every iterate, scores each "
    "canary by a likelihood ratio, guesses which were in, and ε̂ is the largest ε its correct guesses rule out at "
    "the stated confidence. Each federated tuning, full or selective, is audited the same way in one extra "
    "federation, its 300 canaries videos of the clients filling their batches, every local step of each client seen (tasks/federated/audit.py). "
    "Each Video-DPRP copy is audited the same way with 1 000 canary frames, each changed "
    "by the largest change its unit allows (tasks/dprp/audit.py), and the LDP codes' randomized response with 1 000 "
    "canary features. ε̂ is a lower bound on the ε of the mechanism "
    "that ran, not a guarantee: ε̂ above ε would show a leak the accountant missed; ε̂ well below ε says the attack "
    "is weaker than the worst case the accountant covers, not that the model is more private. One run caps this "
    "ε̂ (1 000-2 000 canaries: near 3 at δ = 1e-4, 4.4 at δ = 0). Where the mechanism is a composition of Gaussian mechanisms "
    "without subsampling (every DP-SGD family at q = 1, the federated clients), the same guesses are also read as f-DP "
    "(Mahloujifar, Melis & Chaudhuri 2025, auditing f-DP in one run; tasks/privacy/fdp_audit.py): the largest μ of "
    "the Gaussian trade-off they rule out, as ε at the run's δ. That bound assumes the Gaussian trade-off it tests, "
    "which such a mechanism meets exactly (— where it does not apply); with 2 000 canaries it reaches ε 7.4 at "
    "δ = 1e-4, every guess right. docs/privacy.md says more."
)
AUDIT_COLUMNS = [
    "method",
    "unit",
    "relation",
    "epsilon",
    "epsilon_audited",
    "confidence",
    "guesses",
    "correct",
    "canaries",
    "epsilon_audited_fdp",
    "mu_fdp",
    "guesses_fdp",
    "correct_fdp",
]
AUDIT_HEADER = [
    "method",
    "unit",
    "relation",
    "ε (accountant)",
    "ε̂ (audited, Steinke et al.)",
    "ε̂ (f-DP, Gaussian)",
    "confidence",
    "correct guesses",
    "canaries",
]


def audit_rows(
    ledgers: Path,
    methods: list[str],
    dprp: Path | None = None,
    ldp: Path | None = None,
    federated: Path | None = None,
) -> list[dict[str, Any]]:
    """One row per method and finite ε that was audited: each Video-DPRP copy (its ledger.parquet under ``dprp``),
    seed 0's row of train-private's <method>.csv, each federated model audited (seed 0's row of ``federated``,
    train-federated's federated.csv), then the LDP codes' randomized response per ε (``ldp``: the ldp stage's
    ledger.csv; the ε per feature, which the per-video ε composes)."""
    rows = []
    for ledger in sorted(dprp.glob("*/ledger.parquet")) if dprp is not None else []:
        first = read_parquet(ledger).row(0, named=True)
        if first.get("epsilon_audited") is None:
            continue
        printed = first.get("paper_epsilon")
        rows.append(
            {
                "method": "dprp"
                + ("" if printed is None else f" (paper's ε = {float(printed):g})"),
                "unit": first["unit"],
                "relation": first["relation"],
                **_audited(first),
            }
        )
    for method in methods:
        for entry in read_csv(ledgers / f"{method}.csv", missing_ok=True).to_dicts():
            audited = entry.get("epsilon_audited")
            if str(entry.get("seed", 0)) != "0" or audited in (None, ""):
                continue
            rows.append(
                {
                    "method": method,
                    "unit": entry["unit"],
                    "relation": entry["relation"],
                    **_audited(entry),
                }
            )
    for entry in read_csv(federated, missing_ok=True).to_dicts() if federated is not None else []:
        if str(entry.get("seed", 0)) != "0" or entry.get("epsilon_audited") in (None, ""):
            continue
        rows.append(
            {
                "method": f"federated {entry['model']}",
                "unit": f"{entry['unit']} of a client",
                "relation": entry["relation"],
                **_audited(entry),
            }
        )
    seen = set()
    for entry in read_csv(ldp, missing_ok=True).to_dicts() if ldp is not None else []:
        epsilon = entry["epsilon_per_feature"]
        if entry.get("epsilon_audited") in (None, "") or epsilon in seen:
            continue  # one mechanism for every code: one row per ε
        seen.add(epsilon)
        rows.append(
            {
                "method": "ldp (per feature)",
                "unit": "one feature of a clip's code",
                "relation": entry["relation"],
                **_audited({**entry, "epsilon": epsilon}),
            }
        )
    return rows


def _audited(entry: dict[str, Any]) -> dict[str, Any]:
    """The claimed ε and the audit's columns of one ledger row (tasks.privacy.one_run_audit.Audit.columns)."""
    return {
        "epsilon": float(entry["epsilon"]),
        "epsilon_audited": float(entry["epsilon_audited"]),
        "confidence": float(entry["audit_confidence"]),
        "guesses": int(entry["audit_guesses"]),
        "correct": int(entry["audit_correct"]),
        "canaries": int(entry["audit_canaries"]),
        **_fdp(entry),
    }


FDP_FIELDS = (
    "epsilon_audited_fdp",
    "mu_fdp",
    "guesses_fdp",
    "correct_fdp",
)  # of FDP_COLUMNS, in their order


def _fdp(entry: dict[str, Any]) -> dict[str, Any]:
    """The f-DP bound's columns of a ledger row: None where it does not apply (or the ledger predates it)."""
    if entry.get(FDP_COLUMNS[2]) in (None, ""):
        return dict.fromkeys(FDP_FIELDS)
    kinds = (float, float, int, int)
    return {
        field: kind(entry[column])
        for field, column, kind in zip(FDP_FIELDS, FDP_COLUMNS, kinds, strict=True)
    }


def audit_markdown(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No audit ran (private.audit_canaries: 0, or no private method)."
    return markdown_of(
        AUDIT_HEADER,
        [
            [
                row["method"],
                row["unit"],
                row["relation"],
                f"{row['epsilon']:.3g}",
                f"**{row['epsilon_audited']:.2f}**",
                "—"
                if row.get("epsilon_audited_fdp") is None
                else f"**{row['epsilon_audited_fdp']:.2f}**",
                f"{row['confidence']:.0%}",
                _guesses(row),
                str(row["canaries"]),
            ]
            for row in rows
        ],
    )


def _guesses(row: dict[str, Any]) -> str:
    """Right of guessed, the f-DP bound's after a slash where it ran (its own plan: a tenth in, a tenth out)."""
    said = f"{row['correct']} of {row['guesses']}" if row["guesses"] else "— (ε̂ = 0)"
    if row.get("guesses_fdp") is None:
        return said
    return f"{said} / {row['correct_fdp']} of {row['guesses_fdp']}"


def audit_png(rows: list[dict[str, Any]]) -> bytes:
    """ε̂ against ε (log scale: Video-DPRP's ε reaches 66), one line per family, the diagonal ε̂ = ε (the bound a sound
    audit stays under) dashed."""
    figure, axes = plt.subplots(figsize=(6.5, 4.5))
    claimed = [row["epsilon"] for row in rows] or [1.0]
    span = np.geomspace(min(claimed) / 1.5, max(claimed) * 1.5, 50)
    axes.plot(span, span, "k--", linewidth=1, label="ε̂ = ε (a sound audit stays below)")
    axes.plot(span, span / 4, "k:", linewidth=1, label="ε̂ = ε / 4 (an informative one reaches it)")
    for index, family in enumerate(dict.fromkeys(row["method"].split(" (")[0] for row in rows)):
        mine = sorted(
            (r["epsilon"], r["epsilon_audited"])
            for r in rows
            if r["method"].split(" (")[0] == family
        )
        axes.plot(*zip(*mine, strict=True), marker="o", color=f"C{index % 10}", label=family)
        bounded = sorted(
            (r["epsilon"], r["epsilon_audited_fdp"])
            for r in rows
            if r["method"].split(" (")[0] == family and r.get("epsilon_audited_fdp") is not None
        )
        if bounded:  # the f-DP bound of the same run, dashed in the family's colour
            axes.plot(
                *zip(*bounded, strict=True), marker="^", linestyle="--", color=f"C{index % 10}"
            )
    axes.set_xscale("log")
    axes.set_xlabel("ε claimed (accountant; log scale)")
    axes.set_ylabel("ε̂ audited (lower bound, one run; ▲ dashed: f-DP)")
    highest = [row["epsilon_audited"] for row in rows]
    highest += [
        row["epsilon_audited_fdp"] for row in rows if row.get("epsilon_audited_fdp") is not None
    ]
    axes.set_ylim(0, max([*highest, 2.0]) + 1.0)
    axes.set_title("One-run audit: ε̂ against ε per family", fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    return png_bytes(figure, dpi=100)
