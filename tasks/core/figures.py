"""Matplotlib figures as PNG bytes, headless and reproducible.

The Agg backend needs no display; the ``Software`` metadata (matplotlib's version) is left
out so the same figure gives the same bytes, and DVC sees no change where there is none.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

from tasks.core.manifest import resolve_path
from tasks.core.storage import load_frames

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402,F401  (re-exported: stages draw with it)
from matplotlib.figure import Figure  # noqa: E402


def png_bytes(figure: Figure, dpi: int) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def percent_chart_png(
    figure: Figure, axes: plt.Axes, *, ylabel: str, title: str, legend_size: int, dpi: int = 110
) -> bytes:
    """Finish a chart whose y axis is a percentage (0-100) with a legend to its right; as PNG bytes."""
    axes.set_ylabel(ylabel)
    axes.set_ylim(0, 100)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=legend_size, loc="center left", bbox_to_anchor=(1.02, 0.5))
    axes.set_title(title)
    figure.tight_layout()
    return png_bytes(figure, dpi=dpi)


def middle_frame(row: dict[str, Any], folder: Path) -> np.ndarray:
    """The middle frame of a manifest row's clip: what the pictures show of a video."""
    frames = load_frames(resolve_path(row["path"], folder))
    return frames[len(frames) // 2]
