"""Person-level DP-SGD against the non-private model: what protecting the whole person costs.

None of the seed papers protects the person (their unit is a video or a frame); privhar's person-level row
(``dp_sgd_person``, tasks/core/private_catalogue.py) samples people and clips all of a person's videos as one unit.
This table sets it beside video-level DP-SGD at the same ε and beside the non-private model, and says whether it is
within ``TOLERANCE`` points of the non-private model at 95 % — the goal beyond the papers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tasks.core.intervals import gap_interval, interval
from tasks.core.seeds import seed_scores
from tasks.core.tables import markdown_of, read_csv

PERSON_METHOD = "dp_sgd_person"
VIDEO_METHOD = "dp_sgd"
NON_PRIVATE = "baseline"
TOLERANCE = 10.0  # points of Top-1 below the non-private model that person-level privacy may cost (issue 31's goal)


def _ledger(path: Path) -> dict[float, dict[str, Any]]:
    """Seed 0's ledger row of each target ε (every seed of an ε shares its mechanism and ε)."""
    return {
        float(row["target_epsilon"]): row
        for row in read_csv(path, missing_ok=True).to_dicts()
        if not int(row.get("seed") or 0) and math.isfinite(float(row["target_epsilon"]))
    }


def _verdict(low: float, high: float) -> str:
    if not math.isfinite(low):
        return "one seed: undecided"
    if low > -TOLERANCE:
        return f"within {TOLERANCE:g} points"
    if high < -TOLERANCE:
        return f"more than {TOLERANCE:g} points below"
    return "undecided"


def person_level_rows(ledgers: Path, metrics: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One row per finite ε of the person-level method: its ε per person and of the most exposed person, its Top-1,
    video-level DP-SGD's at the same ε, the non-private model's, the gap and its 95 % Welch interval."""
    person, video = (
        _ledger(ledgers / f"{PERSON_METHOD}.csv"),
        _ledger(ledgers / f"{VIDEO_METHOD}.csv"),
    )
    reference = seed_scores(metrics, NON_PRIVATE, "top1")
    rows = []
    for epsilon, entry in sorted(person.items()):
        scores = seed_scores(metrics, f"{PERSON_METHOD}-eps{epsilon}", "top1")
        if not scores or not reference:
            continue
        mine, plain = interval(scores), interval(reference)
        low, high = gap_interval(mine, plain)
        video_scores = seed_scores(metrics, f"{VIDEO_METHOD}-eps{epsilon}", "top1")
        other = video.get(epsilon)
        rows.append(
            {
                "target_epsilon": epsilon,
                "epsilon_person": float(entry["epsilon"]),
                "epsilon_person_max": float(entry["epsilon_person_max"]),
                "top1": mine.percent(),
                "video_top1": interval(video_scores).percent() if video_scores else "not run",
                "video_epsilon_person_max": float(other["epsilon_person_max"])
                if other
                else math.nan,
                "non_private_top1": plain.percent(),
                "gap": round(100 * (mine.mean - plain.mean), 2),
                "gap_low": round(100 * low, 2),
                "gap_high": round(100 * high, 2),
                "verdict": _verdict(100 * low, 100 * high),
            }
        )
    return rows


def person_level_markdown(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return f"Not run: add {PERSON_METHOD} to private.methods."
    lines = [
        [
            f"{row['target_epsilon']:g}",
            f"{row['epsilon_person']:.3g}",
            f"{row['epsilon_person_max']:.3g}",
            row["top1"],
            row["video_top1"],
            "n/a"
            if math.isnan(row["video_epsilon_person_max"])
            else f"{row['video_epsilon_person_max']:.3g}",
            row["non_private_top1"],
            f"{row['gap']:+.1f} [{row['gap_low']:+.1f}, {row['gap_high']:+.1f}]",
            row["verdict"],
        ]
        for row in rows
    ]
    return markdown_of(
        [
            "target ε",
            "ε per person (unit)",
            "ε of the most exposed person",
            "person-level DP-SGD Top-1 (%)",
            "video-level DP-SGD Top-1 (%)",
            "its most exposed person's ε",
            "non-private Top-1 (%)",
            "gap to non-private, 95 % interval (points)",
            f"within {TOLERANCE:g} points?",
        ],
        lines,
    )
