"""Cutting a box out of a frame at a fixed size: what recognisers, detectors and fused windows all need."""

from __future__ import annotations

import cv2
import numpy as np

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels


def grey(frame: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY) if frame.ndim == 3 else frame


def scaled_boxes(boxes: np.ndarray, factor: float) -> np.ndarray:
    """Boxes (..., 4: x0, y0, x1, y1) scaled about their centres; NaN stays NaN.

    >>> scaled_boxes(np.array([[10.0, 10.0, 20.0, 30.0]]), 1.5).tolist()
    [[7.5, 5.0, 22.5, 35.0]]
    """
    centre = (boxes[..., :2] + boxes[..., 2:]) / 2
    half = (boxes[..., 2:] - boxes[..., :2]) * factor / 2
    return np.concatenate([centre - half, centre + half], axis=-1).astype(boxes.dtype)


def warp_region(
    frame: np.ndarray, region: Box, size: tuple[int, int], interpolation: int = cv2.INTER_LINEAR
) -> np.ndarray:
    """The grey ``region`` resized to ``size`` (width, height) by one affine map: sub-pixel, no rounding of the box;
    parts outside the frame are edge-replicated."""
    x0, y0, x1, y1 = region
    scale_x, scale_y = size[0] / (x1 - x0), size[1] / (y1 - y0)
    matrix = np.float32([[scale_x, 0, -x0 * scale_x], [0, scale_y, -y0 * scale_y]])
    return cv2.warpAffine(
        grey(frame), matrix, size, flags=interpolation, borderMode=cv2.BORDER_REPLICATE
    )


def expanded(box: Box, factor_x: float, factor_y: float | None = None) -> Box:
    """The box scaled about its centre."""
    factor_y = factor_x if factor_y is None else factor_y
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    half_w, half_h = (box[2] - box[0]) * factor_x / 2, (box[3] - box[1]) * factor_y / 2
    return cx - half_w, cy - half_h, cx + half_w, cy + half_h
