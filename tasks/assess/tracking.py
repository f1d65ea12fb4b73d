"""f_track (paper 004 eq. 23): OpenCV trackers started on the first ground-truth body box.

The paper fused MIL, Boosting, MedianFlow and TLD by taking the best tracker per frame; OpenCV 4
keeps MIL in the main module and KCF / CSRT in contrib, so those three run here. A person counts as
tracked in a frame when any tracker's box matches the true box (Dice > 0.5). Every person visible
in a video's first frame is tracked; the first frame, where the box is given, is not scored.
"""

from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np

from tasks.core.scores import frame_hit_rate

Box = tuple[float, float, float, float]

TRACKERS: dict[str, Callable[[], cv2.Tracker]] = {
    "mil": cv2.TrackerMIL_create,
    "kcf": cv2.TrackerKCF_create,
    "csrt": cv2.TrackerCSRT_create,
}


def _bgr(frame: np.ndarray) -> np.ndarray:
    return (
        np.ascontiguousarray(frame[..., ::-1])
        if frame.ndim == 3
        else cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR)
    )


def _rect(box: Box) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = (round(v) for v in box)
    return x0, y0, max(1, x1 - x0), max(1, y1 - y0)


def track_video(
    frames: np.ndarray, truths: list[list[Box]], trackers: tuple[str, ...] = tuple(TRACKERS)
) -> list[float]:
    """h of each frame after the first (eq. 23): per true object, a hit if any tracker's box matches it."""
    first = _bgr(frames[0])
    started = []
    for box in truths[0]:
        for name in trackers:
            tracker = TRACKERS[name]()
            tracker.init(first, _rect(box))
            started.append(tracker)
    rates = []
    for frame, truth in zip(frames[1:], truths[1:]):
        image = _bgr(frame)
        boxes = []
        for tracker in started:
            found, (x, y, w, h) = tracker.update(image)
            if found:
                boxes.append((float(x), float(y), float(x + w), float(y + h)))
        rates.append(_best_per_object(boxes, truth))
    return rates


def _best_per_object(boxes: list[Box], truth: list[Box]) -> float:
    """Each true box matched by its best tracker box: one hit per object at most."""
    if not truth:
        return 1.0
    return float(np.mean([frame_hit_rate(boxes, [box]) for box in truth]))
