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
    """The blur for a face whose box's shorter side is ``side`` pixels: the paper's ``kernel`` and ``sigma``, or
    :data:`FACE_BLUR_SHARE` of the face with sigma in the same proportion, whichever is larger.

    >>> face_kernel(21, 10.0, 30), face_kernel(21, 10.0, 100)
    ((21, 10.0), (51, 24.286))
    """
    relative = int(side * FACE_BLUR_SHARE) // 2 * 2 + 1
    if relative <= kernel:
        return kernel, sigma
    return relative, round(sigma * relative / kernel, 3)


def blur_faces(frames: np.ndarray, face_boxes: np.ndarray, kernel: int, sigma: float) -> np.ndarray:
    """Blur each frame inside its face boxes (T, P, 4: x0, y0, x1, y1; boxes of zero area are skipped), each face
    with :func:`face_kernel`'s blur: a large face's window blurred from the frame around it, the same pixels a blur
    of the whole frame would give."""
    out = frames.copy()
    for t, frame in enumerate(frames):
        blurred = None
        for left, top, right, bottom in _face_windows(frame.shape, face_boxes[t]):
            size, spread = face_kernel(kernel, sigma, min(right - left, bottom - top))
            if size == kernel:
                if blurred is None:
                    blurred = cv2.GaussianBlur(
                        frame, (kernel, kernel), sigma, borderType=cv2.BORDER_REFLECT
                    )
                out[t, top:bottom, left:right] = blurred[top:bottom, left:right]
                continue
            margin = size // 2
            x0, y0 = max(0, left - margin), max(0, top - margin)
            x1, y1 = min(frame.shape[1], right + margin), min(frame.shape[0], bottom + margin)
            window = cv2.GaussianBlur(
                frame[y0:y1, x0:x1], (size, size), spread, borderType=cv2.BORDER_REFLECT
            )
            out[t, top:bottom, left:right] = window[top - y0 : bottom - y0, left - x0 : right - x0]
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
    return np.stack([cv2.dilate(frame, element) for frame in covered])


def black_out(
    frames: np.ndarray, person_mask: np.ndarray, dilation: int
) -> tuple[np.ndarray, np.ndarray]:
    """People (dilated) filled with black; the filled pixels are the public mask."""
    public = dilate(person_mask, dilation)
    out = frames.copy()
    out[public.astype(bool)] = 0
    return out, public


def low_res_size(method: str) -> tuple[int, int]:
    """``low_res_32x24`` → (32, 24), width × height as the paper names ISR sizes."""
    match = LOW_RES.match(method)
    if match is None or min(int(match.group(1)), int(match.group(2))) < 1:
        raise PrivharError(
            f"anonymize: method {method!r} is invalid: expected low_res_<width>x<height>, e.g. low_res_32x24"
        )
    return int(match.group(1)), int(match.group(2))
