"""Face crops inside ground-truth boxes (paper 004 §5: recognisers need aligned faces of one size)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

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
    boxes, visible, identities = annotations["face_box"], annotations["face_visible"], annotations["identity"]
    return [Occurrence(video, frame, int(identities[person]), tuple(float(v) for v in boxes[frame, person]))
            for frame in range(boxes.shape[0]) for person in range(boxes.shape[1]) if visible[frame, person]]


def crop(frame: np.ndarray, box: tuple[float, float, float, float], size: int = FACE_SIZE, margin: float = MARGIN) -> np.ndarray:
    """The grey box (plus margin) resized to size × size; parts outside the frame are edge-replicated."""
    x0, y0, x1, y1 = box
    pad_x, pad_y = margin * (x1 - x0), margin * (y1 - y0)
    grey = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY) if frame.ndim == 3 else frame
    # the affine map sends the padded box onto the output square (sub-pixel, no rounding of the box)
    scale_x, scale_y = size / (x1 - x0 + 2 * pad_x), size / (y1 - y0 + 2 * pad_y)
    matrix = np.float32([[scale_x, 0, -(x0 - pad_x) * scale_x], [0, scale_y, -(y0 - pad_y) * scale_y]])
    return cv2.warpAffine(grey, matrix, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
