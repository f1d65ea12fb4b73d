"""A video's ground-truth annotations (the synthetic dataset writes them beside each clip; real footage has none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.errors import PrivharError
from tasks.core.manifest import resolve_path


def body_boxes(row: dict[str, Any], folder: Path) -> np.ndarray:
    """Every person's body box per frame, (T, P, 4) x0 y0 x1 y1; one line naming the file where there are none."""
    if not row.get("annotations"):
        raise PrivharError(f"{folder}: video {row['video_id']} has no annotations (no body boxes)")
    path = resolve_path(row["annotations"], folder)
    with np.load(path) as stored:
        if "body_box" not in stored:
            raise PrivharError(f"{path}: no body_box")
        return np.asarray(stored["body_box"], dtype=np.float64)
