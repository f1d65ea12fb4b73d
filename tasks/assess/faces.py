"""Face crops inside ground-truth boxes (paper 004 §5: recognisers need aligned faces of one size)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tasks.people_finding.regions import expanded, warp_region

FACE_SIZE = 24  # pixels; a multiple of 4 so two SWT levels divide it (OpenCV Eigen/Fisher training grows as its cube)
MARGIN = 0.15  # of the box size, added on each side


@dataclass(frozen=True)
class Occurrence:
    """One visible face of one person in one frame (paper 004: an occurrence of object o_gt_j)."""

    video: str
    frame: int
    identity: int
    box: tuple[float, float, float, float]


def occurrences(video: str, annotations: Any) -> list[Occurrence]:
    """Every visible face in a video's annotations (face_box, face_visible, identity)."""
    boxes, visible, identities = (
        annotations["face_box"],
        annotations["face_visible"],
        annotations["identity"],
    )
    return [
        Occurrence(
            video, frame, int(identities[person]), tuple(float(v) for v in boxes[frame, person])
        )
        for frame in range(boxes.shape[0])
        for person in range(boxes.shape[1])
        if visible[frame, person]
    ]


def crop(
    frame: np.ndarray,
    box: tuple[float, float, float, float],
    size: int = FACE_SIZE,
    margin: float = MARGIN,
) -> np.ndarray:
    """The grey box plus ``margin`` on each side, resized to size × size."""
    return warp_region(frame, expanded(box, 1 + 2 * margin), (size, size))
