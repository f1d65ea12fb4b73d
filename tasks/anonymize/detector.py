"""People found by the models that ship inside mediapipe 0.10.21 (nothing is downloaded).

Paper 001 §5.2 takes the person's mask and 2-D pose from detectors. Three bundled TFLite models:

- the selfie segmenter (``solutions.selfie_segmentation``): a mask of every person in the
  frame — made for a face filling the frame, so on small people it is one voice of the
  ensemble (:mod:`tasks.anonymize.people`), not the whole answer;
- BlazePose GHUM (``solutions.pose``, one image at a time, segmentation on), run on the crop of
  *each* person the ensemble found: BlazePose follows one person per image, so a crop per
  person gives every person a pose (an avatar) and a mask; its 33 landmarks, with a relative
  depth, are mapped onto privhar's 15 joints (:data:`LANDMARKS`);
- BlazeFace full range (``solutions.face_detection``): face boxes.

mediapipe pins numpy<2 and protobuf<5, so it lives in its own environment
(``pip install 'privhar[detector]'``, ``make detector-test``).
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache
from typing import Any

import cv2
import numpy as np

from tasks.core.errors import PrivharError
from tasks.synthetic.body import JOINTS

MEDIAPIPE_VERSION = "0.10.21"
MASK_THRESHOLD = (
    0.3  # segmenter probability above which a pixel is person: low, since a missed pixel leaks
)
CROP_MARGIN = (
    0.25  # a person's box grown by this share of its size on each side before BlazePose sees it
)
MIN_POSE_ROWS = 24  # a person box shorter than this gets no pose (removed, not drawn): BlazePose found 8 poses in 147
# such boxes of real footage at 320 x 240 (2026-11-30), each call 16 ms
POSE_HEIGHT = 256  # crops are enlarged to at least this many rows: BlazePose's input is 256 × 256
# BlazePose landmark indices averaged into each privhar joint (mediapipe's left is the person's left, as ours).
LANDMARKS = {
    "head": (0, 7, 8),
    "neck": (11, 12),
    "pelvis": (23, 24),
    "l_shoulder": (11,),
    "l_elbow": (13,),
    "l_wrist": (15,),
    "r_shoulder": (12,),
    "r_elbow": (14,),
    "r_wrist": (16,),
    "l_hip": (23,),
    "l_knee": (25,),
    "l_ankle": (27,),
    "r_hip": (24,),
    "r_knee": (26,),
    "r_ankle": (28,),
}
Box = tuple[float, float, float, float]


MISSING = (
    "anonymize: the mediapipe detector needs mediapipe "
    + MEDIAPIPE_VERSION
    + ": pip install 'privhar[detector]' in "
    "its own environment (it pins numpy<2 and protobuf<5), or leave mediapipe out of anonymize.ensemble"
)


def check_mediapipe() -> None:
    """One line now if mediapipe is missing or another version, without importing it: a process that has loaded
    mediapipe's TFLite threads can no longer fork its workers (:func:`tasks.core.parallel.pool_context`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("mediapipe")
    except PackageNotFoundError:
        raise PrivharError(MISSING) from None
    if found != MEDIAPIPE_VERSION:
        raise PrivharError(
            f"anonymize: the mediapipe detector needs mediapipe {MEDIAPIPE_VERSION} (its models are bundled), "
            f"found {found}"
        )


def load_mediapipe() -> Any:
    """The mediapipe module, or one line saying how to install the version that bundles its models."""
    os.environ.setdefault(
        "GLOG_minloglevel", "2"
    )  # TFLite's per-graph warnings, not ours to act on
    check_mediapipe()
    import mediapipe

    return mediapipe


@lru_cache(maxsize=None)
def _graph(kind: str, min_confidence: float, thread: int) -> Any:
    """One mediapipe graph of each ``kind`` per thread (a graph is not for two threads at once), kept for the process:
    building one took 6 ms (segmenter), 18 ms (BlazeFace) and 80 ms (BlazePose) here, each time a clip or a 4-s
    stretch of ``privhar protect`` was searched; in static-image mode a graph keeps nothing from one image to the
    next."""
    solutions = load_mediapipe().solutions
    if kind == "segmenter":
        return solutions.selfie_segmentation.SelfieSegmentation(model_selection=0)
    if kind == "faces":
        return solutions.face_detection.FaceDetection(
            model_selection=1, min_detection_confidence=min_confidence
        )
    return solutions.pose.Pose(
        static_image_mode=True,
        model_complexity=1,
        enable_segmentation=True,
        min_detection_confidence=min_confidence,
    )


def segment_people(frames: np.ndarray) -> np.ndarray:
    """(T, H, W) bool: the selfie segmenter's person pixels of RGB frames."""
    segmenter = _graph("segmenter", 0.0, threading.get_ident())
    return np.stack(
        [segmenter.process(frame).segmentation_mask > MASK_THRESHOLD for frame in frames]
    )


def find_faces(frames: np.ndarray, min_confidence: float) -> list[list[Box]]:
    """BlazeFace boxes (x0, y0, x1, y1) per frame."""
    detector = _graph("faces", min_confidence, threading.get_ident())
    height, width = frames.shape[1:3]
    faces: list[list[Box]] = []
    for frame in frames:
        boxes = []
        for detection in detector.process(frame).detections or ():
            box = detection.location_data.relative_bounding_box
            boxes.append(
                (
                    box.xmin * width,
                    box.ymin * height,
                    (box.xmin + box.width) * width,
                    (box.ymin + box.height) * height,
                )
            )
        faces.append(boxes)
    return faces


def _joints(
    landmarks: Any, left: float, top: float, width: float, height: float
) -> tuple[np.ndarray, np.ndarray]:
    """(points (J, 2) in frame pixels, depth (J,), larger is nearer) from BlazePose's landmarks in a crop."""
    points, depth = np.empty((len(JOINTS), 2), np.float32), np.empty(len(JOINTS), np.float32)
    for index, name in enumerate(JOINTS):
        chosen = [landmarks[i] for i in LANDMARKS[name]]
        points[index] = (
            left + np.mean([mark.x for mark in chosen]) * width,
            top + np.mean([mark.y for mark in chosen]) * height,
        )
        depth[index] = -np.mean(
            [mark.z for mark in chosen]
        )  # mediapipe's z grows away from the camera
    return points, depth


def _crop_window(box: Box, shape: tuple[int, int]) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = box
    grow_x, grow_y = CROP_MARGIN * (x1 - x0), CROP_MARGIN * (y1 - y0)
    return (
        max(0, int(x0 - grow_x)),
        max(0, int(y0 - grow_y)),
        min(shape[1], int(np.ceil(x1 + grow_x))),
        min(shape[0], int(np.ceil(y1 + grow_y))),
    )


def poses_in_boxes(
    frames: np.ndarray,
    boxes: list[list[Box]],
    min_confidence: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(skeleton (T, P, J, 2), depth (T, P, J), mask (T, H, W) bool): BlazePose on each person's crop.

    P is the most boxes in a frame; a box without a pose keeps NaN (that person is removed, not drawn).
    """
    count, height, width = frames.shape[:3]
    most = max([len(frame_boxes) for frame_boxes in boxes] + [1])
    skeleton = np.full((count, most, len(JOINTS), 2), np.nan, np.float32)
    depth = np.full((count, most, len(JOINTS)), np.nan, np.float32)
    mask = np.zeros((count, height, width), bool)
    pose = _graph("pose", min_confidence, threading.get_ident())
    for t, frame_boxes in enumerate(boxes):
        for p, box in enumerate(frame_boxes):
            if box[3] - box[1] < MIN_POSE_ROWS:
                continue
            left, top, right, bottom = _crop_window(box, (height, width))
            if right - left < 4 or bottom - top < 4:
                continue
            scale = max(1.0, POSE_HEIGHT / (bottom - top))
            crop = cv2.resize(
                frames[t, top:bottom, left:right],
                None,
                fx=scale,
                fy=scale,
                interpolation=cv2.INTER_LINEAR,
            )
            found = pose.process(np.ascontiguousarray(crop))
            if found.pose_landmarks is None:
                continue
            skeleton[t, p], depth[t, p] = _joints(
                found.pose_landmarks.landmark, left, top, right - left, bottom - top
            )
            if found.segmentation_mask is not None:
                person = cv2.resize(
                    found.segmentation_mask,
                    (right - left, bottom - top),
                    interpolation=cv2.INTER_AREA,
                )
                mask[t, top:bottom, left:right] |= person > MASK_THRESHOLD
    return skeleton, depth, mask
