"""Moving people on a static camera: OpenCV background subtraction (MOG2 or KNN) with morphology.

Assumes a static camera — home and surveillance cameras, the papers' setting. The subtractor
learns the background from every source frame of the clip (history = the clip, so a person
walking through is a minority at each pixel), then marks the foreground of the frames the
decode stage keeps, with learning off. Shadows (MOG2 / KNN label 127) count as foreground:
fail closed. A person who never moves in the clip becomes background here; the detectors of
the ensemble are there for them. A moving camera makes everything foreground: the clip is then
removed whole, which the coverage check reports rather than hides.
"""

from __future__ import annotations

import cv2
import numpy as np

BACKGROUND_RATIO = 0.5  # MOG2: the heaviest modes up to this weight are background (OpenCV's 0.9 takes in a person standing for 20 % of the clip)
NOISE = np.ones(
    (3, 3), np.uint8
)  # opening: isolated pixels of sensor noise or compression are not people


def _subtractor(model: str, history: int) -> cv2.BackgroundSubtractor:
    if model == "knn":
        return cv2.createBackgroundSubtractorKNN(history=history, detectShadows=True)
    subtractor = cv2.createBackgroundSubtractorMOG2(history=history, detectShadows=True)
    subtractor.setBackgroundRatio(BACKGROUND_RATIO)
    return subtractor


def moving_people(frames: np.ndarray, picked: np.ndarray, *, model: str, grow: int) -> np.ndarray:
    """(len(picked), H, W) bool: foreground of ``frames[picked]`` (RGB, the whole clip in ``frames``), grown by ``grow`` px."""
    subtractor = _subtractor(model, history=len(frames))
    for frame in frames:  # learn the background from the whole clip
        subtractor.apply(frame)
    return np.stack(
        [tidy(subtractor.apply(frames[index], learningRate=0) > 0, grow) for index in picked]
    )


def tidy(foreground: np.ndarray, grow: int) -> np.ndarray:
    """(H, W) bool foreground opened against noise; with ``grow`` > 0, closed (the gaps between a person's limbs)
    and grown by ``grow`` px."""
    mask = cv2.morphologyEx(foreground.astype(np.uint8), cv2.MORPH_OPEN, NOISE)
    if grow > 0:
        element = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1, 2 * grow + 1))
        mask = cv2.dilate(cv2.morphologyEx(mask, cv2.MORPH_CLOSE, element), element)
    return mask > 0
