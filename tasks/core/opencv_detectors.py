"""Detectors that ship inside OpenCV: Dalal-Triggs HOG people and the frontal-face Haar cascade.

Their windows are 64×128 (a person ~96 pixels tall) and 24×24, so small people of real
footage (20-60 pixels at 320×240) are found only on frames enlarged by ``upscale``; boxes are
returned in the frame's own pixels (x0, y0, x1, y1). The person box is removed whole (fail
closed: a box is a person's pixels and some background).
"""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

Box = tuple[float, float, float, float]


@lru_cache(maxsize=1)
def _people_detector() -> cv2.HOGDescriptor:
    hog = cv2.HOGDescriptor()
    hog.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())
    return hog


@lru_cache(maxsize=1)
def _face_cascade() -> cv2.CascadeClassifier:
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


def people_boxes(frame: np.ndarray, upscale: float) -> list[Box]:
    """HOG + linear SVM people detections in an RGB frame."""
    rectangles, _ = _people_detector().detectMultiScale(
        _enlarged_grey(frame, upscale), winStride=(8, 8), padding=(8, 8), scale=1.05
    )
    return _boxes(rectangles, upscale)


def face_boxes(frame: np.ndarray, upscale: float) -> list[Box]:
    """Haar cascade frontal faces in an RGB frame."""
    rectangles = _face_cascade().detectMultiScale(
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
