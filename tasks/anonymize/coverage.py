"""The fail-closed check: how much of the people a protected clip still shows unchanged.

A clip's reference pixels are its *moving* pixels: a pixel moves in kept frame t when it
differs by more than :data:`MOVING_THRESHOLD` grey levels (any channel) from the same pixel a
quarter of a second before *and* after (three-frame differencing at the decoded size, on every
source frame: the pixels a person covers at t and not around it; the background revealed
behind a walker differs on one side only). The method's coverage is the share of them it
changed (clips are stored losslessly: an unchanged pixel is byte-equal). The detectors' own
person pixels are not in the reference: a detector's box holds background, which MPEG-4 copies
byte for byte between frames, so a removed box can equal the original there and count as
missed when nothing of a person is left. A person who never moves is in no reference: the
assess stage's residual detections measure that. For ``face_blur`` the reference is the heads
of the people found: the face detected in each, or the head region its body implies
(:func:`tasks.anonymize.people.implied_heads`), never the face detectors' finds alone. With
the dataset's ground truth, the reference is the true person mask: a synthetic camera jitters,
and its textured scenes would count as moving.
"""

from __future__ import annotations

import cv2
import numpy as np

from tasks.anonymize.camera import Camera

MOVING_THRESHOLD = (
    25  # grey levels: above compression noise of a static scene, below a person's contrast
)
GAP_SECONDS = 0.25  # three-frame differencing: frames this far before and after


def moving_pixels(
    frames: np.ndarray, picked: np.ndarray, fps: float, camera: Camera | None = None
) -> np.ndarray:
    """(len(picked), H, W) bool: pixels of ``frames[picked]`` that differ from the frames ``GAP_SECONDS`` around.

    Where ``camera`` moves, the frames around are first registered (:func:`registered_differences`): on a pan every
    textured pixel differs from the frame before, and the gate took the whole frame for people (issue 81)."""
    if camera is not None and camera.moves:
        before, after = registered_differences(frames, picked, fps, camera)
        return before & after
    gap = max(1, round(GAP_SECONDS * fps))
    last = len(frames) - 1
    moving = np.empty((len(picked), *frames.shape[1:3]), bool)
    for index, t in enumerate(
        picked
    ):  # frame by frame: a 4K stretch's copies took gigabytes (issue 82)
        moving[index] = (
            changed(frames[t][None], frames[max(0, t - gap)][None])[0]
            & changed(frames[t][None], frames[min(last, t + gap)][None])[0]
        )
    return moving


def registered_differences(
    frames: np.ndarray, picked: np.ndarray, fps: float, camera: Camera
) -> tuple[np.ndarray, np.ndarray]:
    """(before, after), each (len(picked), H, W) bool: pixels of ``frames[picked]`` that differ from the frame
    ``GAP_SECONDS`` before (after) it, warped into its view by the camera's maps within its shot; a pixel the other
    frame does not see is unchanged. A moving person differs on both sides, the background they uncover on one."""
    gap = max(1, round(GAP_SECONDS * fps))
    height, width = frames.shape[1:3]
    sides = np.zeros((2, len(picked), height, width), bool)
    for index, t in enumerate(picked):
        shot = next(shot for shot in camera.shots if shot.start <= t < shot.stop)
        for side, other in enumerate((max(shot.start, t - gap), min(shot.stop - 1, t + gap))):
            into = (camera.maps[t] @ np.linalg.inv(camera.maps[other]))[:2]
            seen = cv2.warpAffine(
                np.ones((height, width), np.uint8), into, (width, height), flags=cv2.INTER_NEAREST
            )
            view = cv2.warpAffine(frames[other], into, (width, height), flags=cv2.INTER_LINEAR)
            sides[side, index] = changed(frames[t][None], view[None])[0] & (seen > 0)
    return sides[0], sides[1]


def changed(first: np.ndarray, second: np.ndarray, threshold: int = MOVING_THRESHOLD) -> np.ndarray:
    """(T, H, W) bool: some channel of the RGB frames more than ``threshold`` apart (OpenCV's absolute difference of
    the uint8 frames and a channel maximum: a twentieth of the time of numpy's on int16 copies), a frame at a time so
    that its differences never take more than one frame's memory (issue 82: a 4K stretch)."""
    out = np.empty(first.shape[:3], bool)
    for index, (one, other) in enumerate(zip(first, second, strict=True)):
        difference = cv2.absdiff(one, other)
        largest = np.maximum(np.maximum(difference[..., 0], difference[..., 1]), difference[..., 2])
        np.greater(largest, threshold, out=out[index])
    return out


def coverage(
    original: np.ndarray,
    protected: np.ndarray,
    reference: np.ndarray,
    synthetic: np.ndarray | None = None,
) -> float:
    """Share of the ``reference`` pixels (T, H, W) where ``protected`` differs from ``original``, or that the method
    wrote (``synthetic``, its public mask: a black pixel blacked out is covered, though byte-equal; 7 % of the moving
    pixels of a 768 × 576 ``vtest`` clip were pure black clothing); 1.0 when there are none."""
    total = int(reference.sum())
    if total == 0:
        return 1.0
    covered = changed(original, protected, 0)
    if synthetic is not None:
        covered |= synthetic.astype(bool)
    return float((covered & reference).sum() / total)
