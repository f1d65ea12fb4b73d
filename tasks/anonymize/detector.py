"""``anonymize.source: detector``: people found by models that ship inside mediapipe 0.10.21.

Paper 001 §5.2 gets the person's mask and 2-D pose from detectors. On real footage there is
no ground truth, so this module produces the same arrays the synthetic dataset annotates —
``person_mask``, ``skeleton``, ``joint_depth``, ``identity``, ``face_box`` — from three
bundled TFLite models (nothing is downloaded; later mediapipe releases ship no models):

- BlazePose GHUM (``solutions.pose``, video mode, segmentation on): 33 landmarks with a
  relative depth, mapped onto privhar's 15 joints (:data:`LANDMARKS`), and a person mask;
- the selfie segmenter (``solutions.selfie_segmentation``): a mask of *every* person in the
  frame — BlazePose follows one person, so the removal mask is the union of both, and a
  second person is removed even though only the tracked one gets an avatar;
- BlazeFace full range (``solutions.face_detection``): face boxes for ``face_blur``.

Limits, stated: one avatar per frame (the tracked person); the avatar is chosen per video,
since nothing re-identifies a person across videos; the background plate of
:mod:`tasks.anonymize.inpaint` assumes a static camera (a moving one gives a misaligned but
still person-free fill). mediapipe pins numpy<2 and protobuf<5, so it lives in its own
environment (``pip install 'privhar[detector]'``, ``make detector-test``).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np

from tasks.core.errors import PrivharError
from tasks.synthetic.body import JOINTS

MEDIAPIPE_VERSION = "0.10.21"
MASK_THRESHOLD = 0.3  # segmenter probability above which a pixel is person: low, since a missed pixel leaks
# BlazePose landmark indices averaged into each privhar joint (mediapipe's left is the person's left, as ours).
LANDMARKS = {
    "head": (0, 7, 8), "neck": (11, 12), "pelvis": (23, 24),
    "l_shoulder": (11,), "l_elbow": (13,), "l_wrist": (15,), "r_shoulder": (12,), "r_elbow": (14,), "r_wrist": (16,),
    "l_hip": (23,), "l_knee": (25,), "l_ankle": (27,), "r_hip": (24,), "r_knee": (26,), "r_ankle": (28,),
}


def load_mediapipe() -> Any:
    """The mediapipe module, or one line saying how to install the version that bundles its models."""
    os.environ.setdefault("GLOG_minloglevel", "2")  # TFLite's per-graph warnings, not ours to act on
    try:
        import mediapipe
    except ImportError:
        raise PrivharError("anonymize.source = detector needs mediapipe " + MEDIAPIPE_VERSION + ": pip install "
                           "'privhar[detector]' in its own environment (it pins numpy<2 and protobuf<5)") from None
    if mediapipe.__version__ != MEDIAPIPE_VERSION:
        raise PrivharError(f"anonymize.source = detector needs mediapipe {MEDIAPIPE_VERSION} (its models are bundled), "
                           f"found {mediapipe.__version__}")
    return mediapipe


def video_identity(video_id: str) -> int:
    """A stable identity number per video: a detector does not know who is who across videos."""
    return int.from_bytes(hashlib.sha256(video_id.encode()).digest()[:4], "big")


def _joints(landmarks: Any, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """(points (J, 2) in pixels, depth (J,), larger is nearer) from BlazePose's normalised landmarks."""
    points, depth = np.empty((len(JOINTS), 2), np.float32), np.empty(len(JOINTS), np.float32)
    for index, name in enumerate(JOINTS):
        chosen = [landmarks[i] for i in LANDMARKS[name]]
        points[index] = (np.mean([mark.x for mark in chosen]) * width, np.mean([mark.y for mark in chosen]) * height)
        depth[index] = -np.mean([mark.z for mark in chosen])  # mediapipe's z grows away from the camera
    return points, depth


def _face_boxes(detections: Any, width: int, height: int) -> list[tuple[float, float, float, float]]:
    boxes = []
    for detection in detections or ():
        box = detection.location_data.relative_bounding_box
        boxes.append((box.xmin * width, box.ymin * height, (box.xmin + box.width) * width, (box.ymin + box.height) * height))
    return boxes


def detect_people(frames: np.ndarray, keys: tuple[str, ...], *, video_id: str, min_confidence: float) -> dict[str, np.ndarray]:
    """The annotation arrays ``keys`` (the ground truth's names and shapes) for one clip (T, H, W, 3) RGB.

    ``skeleton`` and ``joint_depth`` are NaN in frames where no pose is found (no avatar is drawn
    there; the person is still removed if the segmenter finds them).
    """
    if not keys:
        return {}
    mediapipe = load_mediapipe()
    count, height, width = frames.shape[:3]
    people = np.zeros((count, height, width), np.uint8)
    skeleton = np.full((count, 1, len(JOINTS), 2), np.nan, np.float32)
    depth = np.full((count, 1, len(JOINTS)), np.nan, np.float32)
    faces: list[list[tuple[float, float, float, float]]] = [[] for _ in range(count)]
    solutions = mediapipe.solutions
    need_people = bool({"person_mask", "skeleton", "joint_depth"} & set(keys))
    if need_people:
        with solutions.pose.Pose(static_image_mode=False, model_complexity=1, enable_segmentation=True,
                                 min_detection_confidence=min_confidence, min_tracking_confidence=min_confidence) as pose, \
                solutions.selfie_segmentation.SelfieSegmentation(model_selection=0) as segmenter:
            for t, frame in enumerate(frames):
                found = pose.process(frame)
                selfie = segmenter.process(frame).segmentation_mask
                mask = selfie > MASK_THRESHOLD
                if found.pose_landmarks is not None:
                    skeleton[t, 0], depth[t, 0] = _joints(found.pose_landmarks.landmark, width, height)
                    if found.segmentation_mask is not None:
                        mask |= found.segmentation_mask > MASK_THRESHOLD
                people[t] = mask
    if "face_box" in keys:
        with solutions.face_detection.FaceDetection(model_selection=1, min_detection_confidence=min_confidence) as detector:
            for t, frame in enumerate(frames):
                faces[t] = _face_boxes(detector.process(frame).detections, width, height)
    most = max(1, max(len(boxes) for boxes in faces))
    face_box = np.full((count, most, 4), np.nan, np.float32)
    for t, boxes in enumerate(faces):
        if boxes:
            face_box[t, :len(boxes)] = boxes
    found = {"person_mask": people, "skeleton": skeleton, "joint_depth": depth, "face_box": face_box,
             "identity": np.array([video_identity(video_id)], np.int64)}
    return {key: found[key] for key in keys}
