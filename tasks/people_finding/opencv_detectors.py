"""Detectors that ship inside OpenCV: Dalal-Triggs HOG people and the frontal-face Haar cascade.

Their windows are 64×128 (a person ~96 pixels tall) and 24×24, so small people of real
footage (20-60 pixels at 320×240) are found only on frames enlarged by ``upscale``; boxes are
returned in the frame's own pixels (x0, y0, x1, y1). The person box is removed whole (fail
closed: a box is a person's pixels and some background).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache

import cv2
import numpy as np

Box = tuple[float, float, float, float]
Finder = Callable[[np.ndarray, float], list[Box]]  # (RGB frame, enlargement) -> face boxes


# One detector per thread: OpenCV's cascade keeps its scan's scales in the object, and two threads detecting with
# one failed make run's face_blur (cascadedetect.hpp: 0 <= scaleIdx && scaleIdx < scaleData->size(), 2026-11-30)
@lru_cache(maxsize=None)
def _people_detector(thread: int) -> cv2.HOGDescriptor:
    hog = cv2.HOGDescriptor()
    hog.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())
    return hog


@lru_cache(maxsize=None)
def _face_cascade(thread: int) -> cv2.CascadeClassifier:
    return cv2.CascadeClassifier(cv2.data.haarcascades + "haarcascade_frontalface_default.xml")


def _enlarged_grey(frame: np.ndarray, upscale: float) -> np.ndarray:
    grey = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
    if upscale == 1.0:
        return grey
    return cv2.resize(grey, None, fx=upscale, fy=upscale, interpolation=cv2.INTER_LINEAR)


def _boxes(rectangles: np.ndarray | tuple, upscale: float) -> list[Box]:
    return [
        (x / upscale, y / upscale, (x + w) / upscale, (y + h) / upscale)
        for x, y, w, h in np.asarray(rectangles).reshape(-1, 4)
    ]


def people_boxes(frame: np.ndarray, upscale: float, scale: float = 1.05) -> list[Box]:
    """HOG + linear SVM people detections in an RGB frame, the pyramid's levels ``scale`` apart (1.05: OpenCV's
    example, and the residual judge's)."""
    rectangles, _ = _people_detector(threading.get_ident()).detectMultiScale(
        _enlarged_grey(frame, upscale), winStride=(8, 8), padding=(8, 8), scale=scale
    )
    return _boxes(rectangles, upscale)


def face_boxes(frame: np.ndarray, upscale: float) -> list[Box]:
    """Haar cascade frontal faces in an RGB frame."""
    rectangles = _face_cascade(threading.get_ident()).detectMultiScale(
        _enlarged_grey(frame, upscale), scaleFactor=1.1, minNeighbors=5
    )
    return _boxes(rectangles, upscale)


def fill_boxes(shape: tuple[int, int], boxes: list[Box]) -> np.ndarray:
    """(H, W) bool: every pixel any box touches."""
    mask = np.zeros(shape, bool)
    for x0, y0, x1, y1 in boxes:
        left, top = max(0, int(np.floor(x0))), max(0, int(np.floor(y0)))
        mask[top : int(np.ceil(y1)), left : int(np.ceil(x1))] = True
    return mask


JUDGE_UPSCALE = (
    4.0  # decoded frames are small (a synthetic face is ~10 rows at 96): Haar's window is 24×24
)
JUDGE_MARGIN = 0.5  # a region searched is grown by this share of its size on every side
JUDGE_ROWS = 96  # the decoded clips' height, which JUDGE_UPSCALE is for


def judge_upscale(height: int) -> float:
    """The judge's enlargement for frames ``height`` rows tall: :data:`JUDGE_UPSCALE` at the decoded size, less on
    larger frames (the same smallest face relative to the frame; never below 1), so a full-resolution frame is not
    searched at 16 times its area.

    >>> judge_upscale(96), judge_upscale(240), judge_upscale(720)
    (4.0, 1.6, 1.0)
    """
    return round(min(JUDGE_UPSCALE, max(1.0, JUDGE_UPSCALE * JUDGE_ROWS / height)), 3)


def _judged(
    frame: np.ndarray, region: Box | None, upscale: float = JUDGE_UPSCALE, find: Finder = face_boxes
) -> list[Box]:
    """Faces ``find`` sees in ``frame`` (frame pixels), inside ``region`` grown by :data:`JUDGE_MARGIN` when one is
    given."""
    if region is None:
        return find(frame, upscale)
    x0, y0, x1, y1 = region
    grow_x, grow_y = JUDGE_MARGIN * (x1 - x0), JUDGE_MARGIN * (y1 - y0)
    left, top = max(0, int(np.floor(x0 - grow_x))), max(0, int(np.floor(y0 - grow_y)))
    right = min(frame.shape[1], int(np.ceil(x1 + grow_x)))
    bottom = min(frame.shape[0], int(np.ceil(y1 + grow_y)))
    if right - left < 2 or bottom - top < 2:
        return []
    found = find(np.ascontiguousarray(frame[top:bottom, left:right]), upscale)
    return [(a + left, b + top, c + left, d + top) for a, b, c, d in found]


def faces_found_again(
    raw: np.ndarray,
    protected: np.ndarray,
    regions: list[list[Box]] | None = None,
    *,
    upscale: float = JUDGE_UPSCALE,
    find: Finder = face_boxes,
) -> list[tuple[int, Box]]:
    """(frame, box) of each frame of a protected clip (T, H, W, 3) where the judge ``find`` (by default the Haar
    cascade, ``upscale`` its enlargement) finds a face it also finds in the raw frame at the same place (Dice > 0.5,
    paper 004's match); the first such face of the frame.

    ``regions`` (per frame: the annotated visible faces, where a dataset has them) restricts the search to them, as
    Haar also fires on background texture; without them the whole frame is searched. The protected frame is searched
    first and the raw one only where a face is found in it, so a protected clip costs one pass.
    """
    from tasks.core.scores import matches

    found = []
    for t, (before, after) in enumerate(zip(raw, protected)):
        areas = [None] if regions is None else regions[t]
        for region in areas:
            kept = _judged(after, region, upscale, find)
            earlier = _judged(before, region, upscale, find) if kept else []
            again = [new for new in kept if any(matches(old, new) for old in earlier)]
            if again:
                found.append((t, again[0]))
                break
    return found
