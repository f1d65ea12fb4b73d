"""What Video-DPRP does to a frame, to look at: raw and protected middle frames side by side.

Raw frames are drawn only when ``show_raw`` (``report.show_raw``; by default for the synthetic
dataset only): a report of a real dataset must not become a copy of real people's footage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.core.figures import middle_frame, plt, png_bytes


def preview_png(
    raw_rows: list[dict[str, Any]],
    raw: Path,
    protected_rows: list[dict[str, Any]],
    protected: Path,
    title: str,
    *,
    show_raw: bool,
    videos: int = 3,
) -> bytes:
    """PNG bytes: one row per video (the first ``videos`` of ``raw_rows``), [raw frame |] protected frame."""
    by_id = {row["video_id"]: row for row in protected_rows}
    picked = [row for row in raw_rows if row["video_id"] in by_id][:videos]
    columns = 2 if show_raw else 1
    figure, axes = plt.subplots(
        len(picked), columns, figsize=(3.2 * columns, 2.3 * len(picked) + 0.5), squeeze=False
    )
    for line, row in zip(axes, picked):
        panels = [(middle_frame(row, raw), "raw")] if show_raw else []
        panels.append((middle_frame(by_id[row["video_id"]], protected), "protected"))
        for axis, (image, label) in zip(line, panels):
            axis.imshow(image)
            axis.set_title(f"{row['video_id']} ({label}, mean {image.mean():.0f})", fontsize=7)
            axis.axis("off")
    figure.suptitle(title, fontsize=8)
    figure.tight_layout()
    return png_bytes(figure, dpi=100)
