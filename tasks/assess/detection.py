"""f_det (paper 004 eq. 20-22): detection hit rates of faces and bodies, with a detector trained here.

No pretrained detector may be downloaded, and OpenCV's bundled Haar cascade and people detector
expect real faces and pedestrians, not the synthetic ones; so each kind gets a Dalal-Triggs
detector: OpenCV HOG features and ``detectMultiScale`` with a linear SVM (scikit-learn
``LinearSVC``) trained on raw training frames — positives from ground-truth boxes, negatives from
random windows away from them, one round of hard-negative mining.

update(detector) (the algorithms under eq. 21 and 22) is done in one batch: every detection on
the protected frames (aggregated) or on fused crops (fused) that matches a ground-truth box is
added to the positives, then the SVM is refitted once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np
from sklearn.svm import LinearSVC

from tasks.core.errors import PrivharError
from tasks.core.scores import dice, frame_hit_rate, matches
from tasks.people_finding.regions import grey, warp_region

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Kind:
    """One object kind: its HOG window and how much frames are enlarged before detection."""

    name: str
    window: tuple[int, int]  # width, height
    cell: int
    upscale: float  # faces of ~10 px need frames enlarged for a 16-px window

    def hog(self) -> cv2.HOGDescriptor:
        block = 2 * self.cell
        return cv2.HOGDescriptor(
            self.window, (block, block), (self.cell, self.cell), (self.cell, self.cell), 9
        )


FACE = Kind("face", (16, 16), 4, 2.0)
BODY = Kind("body", (24, 64), 8, 1.0)
KINDS = {"face": FACE, "body": BODY}


def window_box(box: Box, kind: Kind) -> Box:
    """The box widened or heightened (about its centre) to the window's aspect ratio."""
    x0, y0, x1, y1 = box
    aspect = kind.window[0] / kind.window[1]
    width, height = x1 - x0, y1 - y0
    if width / max(height, 1e-6) < aspect:
        width = height * aspect
    else:
        height = width / aspect
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    return cx - width / 2, cy - height / 2, cx + width / 2, cy + height / 2


def patch(frame: np.ndarray, box: Box, kind: Kind) -> np.ndarray:
    """The window-shaped region around ``box`` resized to the HOG window (edges replicated)."""
    return warp_region(frame, window_box(box, kind), kind.window, cv2.INTER_AREA)


def random_negatives(
    frame: np.ndarray, truth: list[Box], kind: Kind, count: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Windows of the kind's shape at random places and scales, overlapping no true box (Dice < 0.2)."""
    height, width = frame.shape[:2]
    found: list[np.ndarray] = []
    for _ in range(count * 5):
        if len(found) == count:
            break
        box_height = min(
            rng.uniform(0.5, 1.2) * kind.window[1] / kind.upscale * (1.0 if kind is FACE else 1.2),
            rng.uniform(0.3, 0.9) * height,
        )  # small frames: windows that fit
        box_width = box_height * kind.window[0] / kind.window[1]
        if box_width >= width or box_height >= height:
            continue
        x0, y0 = rng.uniform(0, width - box_width), rng.uniform(0, height - box_height)
        box = (x0, y0, x0 + box_width, y0 + box_height)
        if all(dice(box, true) < 0.2 for true in truth):
            found.append(patch(frame, box, kind))
    return found


def enlarged_grey(frame: np.ndarray, kind: Kind) -> np.ndarray:
    """The frame in grey, enlarged by the kind's ``upscale`` so its objects fill the HOG window."""
    image = grey(frame)
    if kind.upscale != 1.0:
        image = cv2.resize(
            image, None, fx=kind.upscale, fy=kind.upscale, interpolation=cv2.INTER_LINEAR
        )
    return image


def frame_boxes(rectangles: np.ndarray | tuple, kind: Kind) -> list[Box]:
    """OpenCV's (x, y, w, h) rectangles on the enlarged image as corner boxes in the frame's own pixels."""
    return [
        tuple(float(v) / kind.upscale for v in (x, y, x + w, y + h)) for x, y, w, h in rectangles
    ]


@dataclass
class Detector:
    """A linear SVM on HOG features; ``detect`` runs OpenCV's multi-scale sliding window with it."""

    kind: Kind
    positives: list[np.ndarray] = field(default_factory=list)
    negatives: list[np.ndarray] = field(default_factory=list)
    hit_threshold: float = 0.0

    def __post_init__(self) -> None:
        self._hog = self.kind.hog()

    def features(self, patches: list[np.ndarray]) -> np.ndarray:
        return np.stack([self._hog.compute(item).ravel() for item in patches])

    def fit(self) -> Detector:
        if not self.positives or not self.negatives:
            raise PrivharError(
                f"{self.kind.name} detector: {len(self.positives)} positive and {len(self.negatives)} negative "
                f"windows in the training frames; it needs both (are there annotated {self.kind.name}s?)"
            )
        data = self.features(self.positives + self.negatives)
        labels = np.r_[np.ones(len(self.positives)), np.zeros(len(self.negatives))]
        svm = LinearSVC(C=0.01, max_iter=5000, random_state=0).fit(data, labels)
        self._weights = np.r_[svm.coef_.ravel(), svm.intercept_].astype(np.float32)
        self._hog.setSVMDetector(self._weights)
        return self

    def __getstate__(self) -> dict:  # OpenCV's HOGDescriptor does not pickle; the weights do
        return {key: value for key, value in self.__dict__.items() if key != "_hog"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._hog = self.kind.hog()
        self._hog.setSVMDetector(self._weights)

    def clone(self) -> Detector:
        """A copy that adapts without changing this one (same samples, same fitted weights)."""
        twin = Detector(self.kind, list(self.positives), list(self.negatives), self.hit_threshold)
        twin._weights = self._weights
        twin._hog.setSVMDetector(self._weights)
        return twin

    def detect(self, frame: np.ndarray) -> list[Box]:
        """Boxes in the frame's own pixels (grouped overlapping windows, OpenCV's non-maximum suppression)."""
        image = enlarged_grey(frame, self.kind)
        if image.shape[0] < self.kind.window[1] or image.shape[1] < self.kind.window[0]:
            return []
        rectangles, _ = self._hog.detectMultiScale(
            image,
            hitThreshold=self.hit_threshold,
            winStride=(4, 4),
            padding=(0, 0),
            scale=1.1,
            groupThreshold=1,
        )
        return frame_boxes(rectangles, self.kind)

    def mine_hard_negatives(self, frames: list[np.ndarray], truths: list[list[Box]]) -> int:
        """Add every detection overlapping no true box (Dice < 0.2) as a negative and refit; the count added."""
        hard = [
            patch(frame, box, self.kind)
            for frame, truth in zip(frames, truths)
            for box in self.detect(frame)
            if all(dice(box, true) < 0.2 for true in truth)
        ]
        self.negatives += hard
        self.fit()
        return len(hard)

    def learn(self, patches: list[np.ndarray]) -> int:
        """update(detector): the windows become positives and the SVM is refitted; the count added."""
        if patches:
            self.positives += patches
            self.fit()
        return len(patches)

    def adapt(self, frames: list[np.ndarray], truths: list[list[Box]]) -> int:
        """update(detector) of eq. 21/22: each detection matching a true box becomes a positive; the count added."""
        return self.learn(
            matched_patches(frames, [self.detect(frame) for frame in frames], truths, self.kind)
        )


class BundledDetector:
    """OpenCV's bundled detectors, for real footage: the frontal-face Haar cascade and the Dalal-Triggs people detector.

    Neither can be updated here (paper 004 retrained the cascade with opencv_traincascade, an external tool, and
    notes that OpenCV's HOG model cannot be updated), so its aggregated and fused rates equal the independent one.
    """

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.__setstate__({"kind": kind})

    def __getstate__(self) -> dict:
        return {"kind": self.kind}

    def __setstate__(self, state: dict) -> None:
        self.kind = state["kind"]
        if self.kind.name == "face":
            self._cascade = cv2.CascadeClassifier(
                cv2.data.haarcascades + "haarcascade_frontalface_default.xml"
            )
        else:
            self._hog = cv2.HOGDescriptor()
            self._hog.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())

    def detect(self, frame: np.ndarray) -> list[Box]:
        image = enlarged_grey(frame, self.kind)
        if self.kind.name == "face":
            rectangles = self._cascade.detectMultiScale(image, scaleFactor=1.1, minNeighbors=5)
        else:
            rectangles, _ = self._hog.detectMultiScale(image, winStride=(8, 8), scale=1.05)
        return frame_boxes(rectangles, self.kind)

    def clone(self) -> BundledDetector:
        return self

    def learn(self, patches: list[np.ndarray]) -> int:
        return 0

    def adapt(self, frames: list[np.ndarray], truths: list[list[Box]]) -> int:
        return 0


def matched_patches(
    frames: list[np.ndarray], found: list[list[Box]], truths: list[list[Box]], kind: Kind
) -> list[np.ndarray]:
    """The windows of the detections ``found`` that match a true box (Dice > 0.5, eq. 26): update(detector)'s positives."""
    return [
        patch(frame, box, kind)
        for frame, detections, truth in zip(frames, found, truths)
        for box in detections
        if any(matches(box, true) for true in truth)
    ]


def train_detector(
    kind: Kind,
    frames: list[np.ndarray],
    truths: list[list[Box]],
    *,
    seed: int,
    negatives_per_frame: int = 3,
    mining_frames: int = 200,
) -> Detector:
    """Positives: every true box; negatives: random windows, then one hard-negative round on ``mining_frames`` frames."""
    rng = np.random.default_rng(seed)
    detector = Detector(kind)
    for frame, truth in zip(frames, truths):
        detector.positives += [patch(frame, box, kind) for box in truth]
        detector.positives += [
            patch(frame[:, ::-1], (frame.shape[1] - b[2], b[1], frame.shape[1] - b[0], b[3]), kind)
            for b in truth
        ]  # mirrored
        detector.negatives += random_negatives(frame, truth, kind, negatives_per_frame, rng)
    detector.fit()
    chosen = rng.choice(len(frames), size=min(mining_frames, len(frames)), replace=False)
    detector.mine_hard_negatives([frames[i] for i in chosen], [truths[i] for i in chosen])
    return detector


def detection_rate(detector: Detector, frames: list[np.ndarray], truths: list[list[Box]]) -> float:
    """Eq. 20-22: the mean over frames of h (matched detections over true objects; 1 in a frame with none)."""
    return float(
        np.mean(
            [frame_hit_rate(detector.detect(frame), truth) for frame, truth in zip(frames, truths)]
        )
    )
