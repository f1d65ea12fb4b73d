"""The classical obfuscations of paper 000 §4.2, applied to one clip with its ground truth.

    face_blur        Gaussian blur, kernel 21, σ 10, inside every face box (the paper's values; a face over 42
                     pixels gets a kernel half its size, :func:`face_kernel`)
    mosaic, solid    every face box pixelated, or filled with one colour (deface's other replacements)
    low_res_<W>x<H>  inverse super resolution: down to W×H (area averaging), back up (bilinear)
                     so the classifier sees its usual input size
    blackout         the person mask, dilated, filled with black; those pixels are synthetic,
                     so they are the public mask MaskDP may use
    none             the clip unchanged (the raw reference run through the same stage)

Each returns the protected clip (T, H, W, 3) uint8 and a public mask (T, H, W) uint8 0/1 of the
pixels that carry nothing of the recorded video (all zeros when the method makes none).
"""

from __future__ import annotations

import math
import re

import cv2
import numpy as np

from tasks.core.errors import PrivharError

LOW_RES = re.compile(r"^low_res_(\d+)x(\d+)$")


def no_public_pixels(frames: np.ndarray) -> np.ndarray:
    return np.zeros(frames.shape[:3], np.uint8)


def _face_windows(shape: tuple[int, ...], boxes: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(left, top, right, bottom) pixel windows of a frame's finite face boxes of positive area, inside the frame."""
    height, width = shape[:2]
    windows = []
    for box in boxes:
        if not np.isfinite(box).all():  # no face of this person in this frame
            continue
        x0, y0, x1, y1 = box
        left, top = max(0, int(np.floor(x0))), max(0, int(np.floor(y0)))
        right, bottom = min(width, int(np.ceil(x1))), min(height, int(np.ceil(y1)))
        if right > left and bottom > top:
            windows.append((left, top, right, bottom))
    return windows


FACE_BLUR_SHARE = 0.5  # a face's kernel is at least this share of its box's shorter side (sigma alike): the paper's
# fixed 21-pixel kernel (for 240-row frames) left a 100-pixel face of a 320 x 240 talking head recognisable, and the
# gate released 111 of its 120 frames black (issue 81); faces of the synthetic set (under 40 pixels) keep the paper's


def face_kernel(kernel: int, sigma: float, side: int) -> tuple[int, float]:
    """The blur for a face whose box's shorter side is ``side`` pixels: the paper's ``kernel`` and ``sigma``, or at
    least :data:`FACE_BLUR_SHARE` of the face, rounded up to a kernel √2, 2, 2√2 … times the paper's (so a frame's many
    faces share a few blurs), with sigma in the same proportion.

    >>> face_kernel(21, 10.0, 30), face_kernel(21, 10.0, 100)
    ((21, 10.0), (59, 28.284))
    """
    relative = side * FACE_BLUR_SHARE
    if relative <= kernel:
        return kernel, sigma
    steps = math.ceil(2 * math.log2(relative / kernel) - 1e-9)
    return int(kernel * 2 ** (steps / 2)) // 2 * 2 + 1, round(sigma * 2 ** (steps / 2), 3)


BLUR_CELL_SIGMA = 8.0  # a blur wider than this sigma runs on a copy shrunk by sigma / this, then enlarged back (the
# same low-pass; a 100-pixel sigma on a 720p face took 40 ms a window at full size)


def _blurred(region: np.ndarray, kernel: int, sigma: float) -> np.ndarray:
    """``region`` under a Gaussian blur of ``kernel`` and ``sigma``; a wide one on a shrunk copy."""
    factor = int(sigma // BLUR_CELL_SIGMA)
    if factor <= 1:
        return cv2.GaussianBlur(region, (kernel, kernel), sigma, borderType=cv2.BORDER_REFLECT)
    height, width = region.shape[:2]
    small = cv2.resize(
        region,
        (max(1, width // factor), max(1, height // factor)),
        interpolation=cv2.INTER_AREA,
    )
    size = max(3, kernel // factor // 2 * 2 + 1)
    small = cv2.GaussianBlur(small, (size, size), sigma / factor, borderType=cv2.BORDER_REFLECT)
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)


def blur_faces(frames: np.ndarray, face_boxes: np.ndarray, kernel: int, sigma: float) -> np.ndarray:
    """Blur each frame inside its face boxes (T, P, 4: x0, y0, x1, y1; boxes of zero area are skipped), each face
    with :func:`face_kernel`'s blur: the paper's once over the frame, as it always was; each larger one once over the
    region its faces span, grown by half its kernel."""
    out = frames.copy()
    for t, frame in enumerate(frames):
        groups: dict[tuple[int, float], list[tuple[int, int, int, int]]] = {}
        for window in _face_windows(frame.shape, face_boxes[t]):
            side = min(window[2] - window[0], window[3] - window[1])
            groups.setdefault(face_kernel(kernel, sigma, side), []).append(window)
        for (size, spread), windows in groups.items():
            if size == kernel:
                blurred, (x0, y0) = _blurred(frame, kernel, sigma), (0, 0)
            else:
                margin = size // 2
                x0 = max(0, min(w[0] for w in windows) - margin)
                y0 = max(0, min(w[1] for w in windows) - margin)
                x1 = min(frame.shape[1], max(w[2] for w in windows) + margin)
                y1 = min(frame.shape[0], max(w[3] for w in windows) + margin)
                blurred = _blurred(frame[y0:y1, x0:x1], size, spread)
            for left, top, right, bottom in windows:
                out[t, top:bottom, left:right] = blurred[
                    top - y0 : bottom - y0, left - x0 : right - x0
                ]
    return out


def mosaic_faces(frames: np.ndarray, face_boxes: np.ndarray, cells: int) -> np.ndarray:
    """Each face box pixelated into ``cells`` × ``cells`` blocks (area means), as deface's ``mosaic``."""
    out = frames.copy()
    for t, frame in enumerate(frames):
        for left, top, right, bottom in _face_windows(frame.shape, face_boxes[t]):
            face = frame[top:bottom, left:right]
            small = cv2.resize(
                face,
                (min(cells, right - left), min(cells, bottom - top)),
                interpolation=cv2.INTER_AREA,
            )
            out[t, top:bottom, left:right] = cv2.resize(
                small, (right - left, bottom - top), interpolation=cv2.INTER_NEAREST
            )
    return out


def fill_faces(
    frames: np.ndarray, face_boxes: np.ndarray, colour: tuple[int, int, int]
) -> np.ndarray:
    """Each face box filled with one RGB ``colour``, as deface's ``solid``."""
    out = frames.copy()
    for t, frame in enumerate(frames):
        for left, top, right, bottom in _face_windows(frame.shape, face_boxes[t]):
            out[t, top:bottom, left:right] = colour
    return out


def low_resolution(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Down to ``size`` (width, height) by area averaging, then back up bilinearly."""
    height, width = frames.shape[1:3]
    return np.stack(
        [
            cv2.resize(
                cv2.resize(frame, size, interpolation=cv2.INTER_AREA),
                (width, height),
                interpolation=cv2.INTER_LINEAR,
            )
            for frame in frames
        ]
    )


def dilate(person_mask: np.ndarray, pixels: int) -> np.ndarray:
    """(T, H, W) 0/1: any person label, grown by ``pixels`` (a square neighbourhood)."""
    covered = (person_mask > 0).astype(np.uint8)
    if pixels <= 0:
        return covered
    element = np.ones((2 * pixels + 1, 2 * pixels + 1), np.uint8)
    for frame in covered:  # in place: one stretch of masks, not two
        cv2.dilate(frame, element, dst=frame)
    return covered


def black_out(
    frames: np.ndarray, person_mask: np.ndarray, dilation: int
) -> tuple[np.ndarray, np.ndarray]:
    """People (dilated) filled with black; the filled pixels are the public mask."""
    public = dilate(person_mask, dilation)
    out = frames.copy()
    # copyto, not out[mask] = 0: a boolean index builds index arrays, 24 bytes a person pixel (issue 82: a 4K stretch)
    np.copyto(out, 0, where=public.view(bool)[..., None])
    return out, public


def low_res_size(method: str) -> tuple[int, int]:
    """``low_res_32x24`` → (32, 24), width × height as the paper names ISR sizes."""
    match = LOW_RES.match(method)
    if match is None or min(int(match.group(1)), int(match.group(2))) < 1:
        raise PrivharError(
            f"anonymize: method {method!r} is invalid: expected low_res_<width>x<height>, e.g. low_res_32x24"
        )
    return int(match.group(1)), int(match.group(2))
