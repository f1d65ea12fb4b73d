"""The privacy ledger of a pipeline run: every release of subject data, its mechanism and guarantee, and each
subject's total under sequential composition (post-processing free; tasks/core/budget.py states the rules)."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tasks.core.budget import federated_release, subjects_by_split

MECHANISMS = {
    "dp_sgd": "DP-SGD (Opacus, Poisson sampling, per-video clipping)",
    "dp_sgd_avatar": "DP-SGD on the avatar copy (Opacus)",
    "multiclip": "MultiClip DP-SGD (per-video gradient over K clips, clipped once)",
    "maskdp": "MaskDP-SGD (masked adjacency: private tokens clipped and noised)",
    "maskdp_real": "MaskDP-SGD on raw clips (masked adjacency; the real person in public tokens is NOT protected)",
}


SUBJECT_COLUMNS = ("subject", "dp_releases", "epsilon_dp", "delta_dp", "releases_without_dp", "total_epsilon")


@dataclass(frozen=True)
class Release:
    """One thing made from subject data that leaves the pipeline (a protected copy or a trained model)."""

    name: str
    family: str  # the method: dprp, dp_sgd, …, anonymize, non-private models
    mechanism: str
    epsilon: float  # inf: no DP guarantee
    delta: float
    accountant: str
    calibration: str
    splits: str  # "train" or "train+test"
    note: str = ""

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)


def dprp_releases(folder: Path) -> list[Release]:
    """One release per DPRP copy (data/dprp/eps<ε>/ledger.parquet): ε, δ, calibration as the stage recorded them."""
    releases = []
    for ledger in sorted(folder.glob("*/ledger.parquet")):
        row = pq.read_table(ledger).slice(0, 1).to_pylist()[0]
        releases.append(Release(f"dprp-{ledger.parent.name}", "dprp", "Video-DPRP (Gaussian on the projection P and covariance Q)",
                                float(row["epsilon"]), float(row["delta"]), str(row["accountant"]), str(row["calibration"]),
                                "train+test"))
    return releases


def private_releases(folder: Path, methods: list[str]) -> list[Release]:
    """One release per private model (reports/private/<method>.csv); the ε = ∞ references are releases without DP."""
    releases = []
    for method in methods:
        for entry in _csv_entries(folder / f"{method}.csv"):
            epsilon = float(entry["epsilon"])
            releases.append(Release(entry["model"], method, MECHANISMS.get(method, method), epsilon, float(entry["delta"]),
                                    entry["accountant"], "σ calibrated to the target ε by the accountant"
                                    if math.isfinite(epsilon) else "none: no noise (clipping only)", "train",
                                    "" if math.isfinite(epsilon) else "reference without noise"))
    return releases


def _csv_entries(path: Path) -> list[dict[str, str]]:
    """The rows of a stage's CSV table; none if the stage has not run (its tables then say "not run")."""
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def ldp_releases(path: Path) -> list[Release]:
    """The randomized DCAConv codes of the ldp stage (reports/ldp/ledger.csv): ε per video = features × ε per feature."""
    return [Release(entry["release"], "ldp", entry["mechanism"], float(entry["epsilon_per_video"]), float(entry["delta"]),
                    entry["accountant"], f"ε = {float(entry['epsilon_per_feature']):g} per feature × "
                    f"{entry['features_per_video']} features", entry["splits"],
                    "" if math.isfinite(float(entry["epsilon_per_video"])) else "reference without noise")
            for entry in _csv_entries(path)]


def federated_releases(path: Path) -> list[Release]:
    """One release per federated model (reports/federated/federated.csv): ε per client, the largest over the clients."""
    return [Release(federated_release(entry["aggregation"], entry["tuning"]), "federated",
                    "FedDP-STECAR: DP-SGD (Opacus) per client on shuffled batches, masked updates, FedAvg / FedNova",
                    float(entry["epsilon"]), float(entry["delta"]), entry["accountant"],
                    "σ calibrated so that a client in every round spends federated.epsilon", "train",
                    f"{entry['tuning']} tuning, {entry['aggregation']}")
            for entry in _csv_entries(path)]


def unprotected_releases(train_reports: Path, anonymize: Path) -> list[Release]:
    """Releases with no DP guarantee: anonymized copies and the models trained on raw clips or on them.

    Models trained on a DPRP copy are post-processing of that copy: free, and not listed.
    """
    releases = [Release(f"anonymize-{copy.name}", "anonymize", "obfuscation (no formal guarantee)", math.inf, 0.0, "none", "none",
                        "train+test") for copy in sorted(anonymize.iterdir()) if (copy / "manifest.parquet").is_file()]
    for report in sorted(train_reports.glob("*.json")):
        key = report.stem
        if key == "public" or key.startswith("dprp-"):
            continue  # the public model holds no private subject; DPRP models are post-processing
        claim = json.loads(report.read_text())
        epsilon = float(claim.get("epsilon", "inf"))
        if math.isfinite(epsilon):
            continue
        releases.append(Release(f"model {key}", "non-private models", "non-private training", math.inf, 0.0, str(claim.get("accountant", "none")),
                                "none", "train"))
    return releases


def subject_totals(releases: list[Release], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per subject: DP releases holding them, Σε and Σδ (sequential composition), releases without DP, the total."""
    subjects = subjects_by_split(rows)
    every = sorted(set().union(*subjects.values())) if subjects else []
    table = []
    for subject in every:
        holding = [r for r in releases if any(subject in subjects.get(split, set()) for split in r.splits.split("+"))]
        dp = [r for r in holding if r.private]
        unbounded = len(holding) - len(dp)
        total_epsilon = sum(r.epsilon for r in dp)
        table.append({"subject": subject, "dp_releases": len(dp), "epsilon_dp": round(total_epsilon, 4),
                      "delta_dp": sum(r.delta for r in dp), "releases_without_dp": unbounded,
                      "total_epsilon": math.inf if unbounded else round(total_epsilon, 4)})
    return table


def family_summary(releases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ledger per method: its mechanism, its DP releases (ε achieved, δ, accountant, calibration, Σ ε) and how many
    of its releases carry no DP guarantee."""
    families: dict[str, list[dict[str, Any]]] = {}
    for release in releases:
        families.setdefault(release["family"], []).append(release)
    summary = []
    for family, group in families.items():
        dp = [r for r in group if math.isfinite(r["epsilon"])]
        summary.append({"method": family, "mechanism": group[0]["mechanism"], "dp_releases": len(dp),
                        "epsilons": ", ".join(f"{r['epsilon']:.3g}" for r in dp) or "—",
                        "delta": max((r["delta"] for r in dp), default=0.0),
                        "accountant": dp[0]["accountant"].split(";")[0] if dp else "none",
                        "calibration": dp[0]["calibration"] if dp else "none",
                        "epsilon_sum": sum(r["epsilon"] for r in dp), "releases_without_dp": len(group) - len(dp)})
    return summary


def method_rows(releases: list[Release]) -> list[dict[str, Any]]:
    return [asdict(release) for release in releases]
