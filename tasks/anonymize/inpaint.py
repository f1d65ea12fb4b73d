"""Remove people from a clip: a temporal background estimate, spatial inpainting only where needed.

Paper 001 §5.2 removes the person before rendering the avatar, so no real pixel of them is
left for the avatar to miss. Per pixel, the background is the median of the frames in which
no person covers it (the camera of these clips is static up to jitter); pixels covered in
every frame are filled by ``cv2.inpaint`` (Telea) from their surroundings in that plate.
"""

from __future__ import annotations

import cv2
import numpy as np

INPAINT_RADIUS = 5  # pixels considered around each hole pixel by Telea's method


def background_plate(frames: np.ndarray, covered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(plate (H, W, 3) uint8, never_seen (H, W) bool): the clip's background without its people."""
    visible = ~covered.astype(bool)
    stack = np.where(visible[..., None], frames.astype(np.float32), np.nan)
    never_seen = ~visible.any(axis=0)
    with np.errstate(all="ignore"):
        median = np.nanmedian(np.where(never_seen[None, ..., None], 0.0, stack), axis=0)
    plate = np.clip(np.round(median), 0, 255).astype(np.uint8)
    if never_seen.any():
        plate = cv2.inpaint(plate, never_seen.astype(np.uint8), INPAINT_RADIUS, cv2.INPAINT_TELEA)
    return plate, never_seen


def remove_people(frames: np.ndarray, covered: np.ndarray) -> np.ndarray:
    """The clip with every covered pixel (T, H, W) replaced by the background plate."""
    plate, _ = background_plate(frames, covered)
    return np.where(covered.astype(bool)[..., None], plate[None], frames)
