"""The report's pictures: a signature bar chart per protected copy and Top-1 against attribute cMAP."""

from __future__ import annotations

import math
from typing import Any

from tasks.core.figures import percent_chart_png, plt, png_bytes
from tasks.core.scores import SIGNATURE_COLUMNS

PRIVACY = ("e_id_ind", "e_id_aggr", "e_id_fused")


def signature_png(row: dict[str, Any]) -> bytes:
    """Paper 004's signature of one copy: every e_* in [0, 1]; privacy bars red, utility bars blue; an evaluator not
    measured (real footage has no face or body annotations) has no bar and says n/m, never a 0 that reads as worst."""
    figure, axes = plt.subplots(figsize=(7.5, 3.0))
    measured = [isinstance(row[key], float | int) for key in SIGNATURE_COLUMNS]
    values = [row[key] if known else 0.0 for key, known in zip(SIGNATURE_COLUMNS, measured)]
    colours = ["tab:red" if key in PRIVACY else "tab:blue" for key in SIGNATURE_COLUMNS]
    axes.bar(range(len(values)), values, color=colours)
    for index, known in enumerate(measured):
        if not known:
            axes.text(index, 0.02, "n/m", ha="center", va="bottom", fontsize=7, color="grey")
    axes.set_xticks(
        range(len(values)),
        [key.removeprefix("e_") for key in SIGNATURE_COLUMNS],
        rotation=45,
        ha="right",
        fontsize=8,
    )
    axes.set_ylim(0, 1.05)
    axes.set_ylabel("e (1 = best)")
    axes.set_title(f"{row['method']}: privacy (red) and utility (blue), paper 004", fontsize=9)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    return png_bytes(figure, dpi=100)


def top1_vs_cmap_png(table: list[dict[str, Any]]) -> bytes:
    """One point per protected copy: Top-1 (protocol 1) against the raw-trained attacker's cMAP (filled) and the
    adaptive attacker's (hollow). Up and to the left is better."""
    figure, axes = plt.subplots(figsize=(7.5, 5.0))
    for index, row in enumerate(
        r
        for r in table
        if isinstance(r["cmap_raw_attacker"], float | int) and not isinstance(r["top1"], str)
    ):
        colour, top1 = (
            f"C{index % 10}",
            100 * row.get("top1_mean", row["top1"]),
        )  # the row over its training seeds
        spread = 100 * row.get("top1_ci95", math.nan)
        axes.errorbar(
            row["cmap_raw_attacker"],
            top1,
            yerr=None if math.isnan(spread) else spread,
            color=colour,
            marker="o",
            capsize=3,
            label=row["method"],
        )
        axes.scatter(row["cmap_adaptive"], top1, facecolors="none", edgecolors=colour)
        axes.plot(
            [row["cmap_raw_attacker"], row["cmap_adaptive"]], [top1] * 2, color=colour, alpha=0.4
        )
    axes.set_xlabel(
        "privacy-attribute cMAP, lower is more private\n(filled: raw-trained attacker, hollow: adaptive attacker)"
    )
    return percent_chart_png(
        figure,
        axes,
        ylabel="action Top-1 on raw test videos (%), mean ± 95 % over seeds",
        legend_size=7,
        title="Privacy-utility trade-off (paper 000 Table 1)",
    )


def face_leakage_png(rows: list[dict[str, Any]]) -> bytes:
    """Per protected copy: the share of frames, and of clips, where a face found in the raw frame survives (issue 32:
    faces across time); a copy where no raw face was found is left out."""
    measured = [row for row in rows if isinstance(row.get("face_leak_frames"), float | int)]
    figure, axes = plt.subplots(figsize=(7.5, 3.2))
    positions = range(len(measured))
    axes.bar(
        [x - 0.2 for x in positions],
        [100 * row["face_leak_frames"] for row in measured],
        width=0.4,
        label="frames with a raw face",
    )
    axes.bar(
        [x + 0.2 for x in positions],
        [100 * float(row["face_leak_clips"]) for row in measured],
        width=0.4,
        label="clips (a face kept in any frame)",
    )
    axes.set_xticks(
        list(positions), [row["method"] for row in measured], rotation=20, ha="right", fontsize=8
    )
    return percent_chart_png(
        figure,
        axes,
        ylabel="faces found again (%)",
        legend_size=8,
        title="Faces that survive each protection\n(OpenCV Haar, raw vs protected frame)",
    )
