"""Remove people from a clip: a temporal background estimate, spatial inpainting only where needed.

Paper 001 §5.2 removes the person before rendering the avatar, so no real pixel of them is
left for the avatar to miss. Per pixel, the background is the median of the frames in which
no person covers it; pixels covered in every frame are filled by ``cv2.inpaint`` (Telea) from
their surroundings in that plate.

Real footage is not one static shot (issue 32: a panning camera got one smeared median, and the
frames after a shot cut got the previous shot's background). So the clip is first cut into shots
(:func:`shots`: a jump of the colour histogram between consecutive frames), and within a shot the
camera's motion is estimated frame to frame (:func:`camera_motion`: corners of the uncovered background
tracked by pyramidal Lucas-Kanade, a similarity transform fitted by RANSAC, chained). A shot whose
camera stays within ``STATIC_PIXELS`` keeps one plate for all its frames, as before; a moving one
is registered on a common canvas, its median taken there and warped back into each frame's view.
"""

from __future__ import annotations

import cv2
import numpy as np

from tasks.anonymize.camera import camera_motion, frame_corners, is_static, shots

INPAINT_RADIUS = 5  # pixels considered around each hole pixel by Telea's method
MAX_CANVAS = (
    2  # the moving shot's canvas reaches at most this many frame sizes beyond the first frame
)


MEDIAN_ROWS = 64  # rows of a stretch sorted at once: its uint16 copies of a whole 4K stretch took 4.5 GB (issue 82)


def _median(frames: np.ndarray, visible: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per-pixel median of the visible frames (H, W, 3) uint8, never_seen (H, W) bool; 0 where never seen).

    ``np.nanmedian``'s value (the mean of the two middle values, rounded half to even), from one sort along time:
    nanmedian's masked-array path took 0.7 s for 40 frames of 320 × 240. A band of :data:`MEDIAN_ROWS` rows at a time.
    """
    median = np.empty(frames.shape[1:], np.uint8)
    never_seen = np.empty(frames.shape[1:3], bool)
    for top in range(0, frames.shape[1], MEDIAN_ROWS):
        rows = slice(top, top + MEDIAN_ROWS)
        median[rows], never_seen[rows] = _band_median(frames[:, rows], visible[:, rows])
    return median, never_seen


def _band_median(frames: np.ndarray, visible: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_median` of a band of rows."""
    # hidden values as 255 sort after (or among equal) visible ones: the first `count` of each pixel are its visible
    ordered = np.sort(np.where(visible[..., None], frames, 255).astype(np.uint16), axis=0)
    count = visible.sum(axis=0)
    never_seen = count == 0
    shape = (1, *frames.shape[1:])
    low = np.broadcast_to(np.maximum(count - 1, 0)[None, ..., None] // 2, shape)
    high = np.broadcast_to(count[None, ..., None] // 2, shape)
    high = np.minimum(high, len(frames) - 1)
    middle = (
        np.take_along_axis(ordered, low, axis=0)[0] + np.take_along_axis(ordered, high, axis=0)[0]
    )
    half = middle // 2
    median = np.where(
        never_seen[..., None], 0, half + (middle & half & 1)
    )  # halves to even, as np.round
    return median.astype(np.uint8), never_seen


INPAINT_ROWS = 240  # frames taller than this are inpainted on a copy of this many rows, the fill scaled back up


def fill_holes(plate: np.ndarray, holes: np.ndarray) -> np.ndarray:
    """``plate`` with its ``holes`` (H, W) 0/1 filled by Telea's method from their surroundings. Above
    ``INPAINT_ROWS`` rows the fill is computed on an area-scaled copy and scaled back up into the holes only: a
    smooth guess needs no full resolution, and Telea's cost grows with the hole's area (140 ms a frame at 720 × 528
    where a person filled a third of it)."""
    height, width = plate.shape[:2]
    if height <= INPAINT_ROWS:
        return cv2.inpaint(plate, holes, INPAINT_RADIUS, cv2.INPAINT_TELEA)
    size = (max(1, round(width * INPAINT_ROWS / height)), INPAINT_ROWS)
    small_holes = (
        cv2.resize(holes.astype(np.float32), size, interpolation=cv2.INTER_AREA) > 0
    ).astype(np.uint8)
    small = cv2.inpaint(
        cv2.resize(plate, size, interpolation=cv2.INTER_AREA),
        small_holes,
        INPAINT_RADIUS,
        cv2.INPAINT_TELEA,
    )
    filled = plate.copy()
    inside = holes.astype(bool)
    filled[inside] = cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)[inside]
    return filled


def background_plate(frames: np.ndarray, covered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(plate (H, W, 3) uint8, never_seen (H, W) bool): a static shot's background without its people."""
    plate, never_seen = _median(frames, ~covered.astype(bool))
    if never_seen.any():
        plate = fill_holes(plate, never_seen.astype(np.uint8))
    return plate, never_seen


def _canvas(maps: np.ndarray, height: int, width: int) -> tuple[np.ndarray, tuple[int, int]]:
    """(3 × 3 map from canvas pixels to the first frame's, (canvas height, width)): the canvas holds every frame's
    view of the shot (at most ``MAX_CANVAS`` frame sizes each way)."""
    seen = np.concatenate([frame_corners(height, width) @ np.linalg.inv(m).T for m in maps])[:, :2]
    low = np.maximum(np.floor(seen.min(axis=0)), [-MAX_CANVAS * width, -MAX_CANVAS * height])
    high = np.minimum(
        np.ceil(seen.max(axis=0)), [(MAX_CANVAS + 1) * width, (MAX_CANVAS + 1) * height]
    )
    offset = np.eye(3)
    offset[:2, 2] = low
    return offset, (int(high[1] - low[1]) + 1, int(high[0] - low[0]) + 1)


def _moving_plates(frames: np.ndarray, covered: np.ndarray, maps: np.ndarray) -> np.ndarray:
    """(T, H, W, 3): each frame's background: the median of the shot's frames on a common canvas, what no frame saw
    inpainted there once, warped back into each frame's view (a frame reaching past a canvas cut at ``MAX_CANVAS`` is
    inpainted there too). Inpainting each frame's view instead took a 320 × 240 panning clip's avatar 27 ms a frame
    and gave each frame its own guess."""
    height, width = frames.shape[1:3]
    offset, (rows, columns) = _canvas(maps, height, width)
    visible = (~covered.astype(bool)).astype(np.uint8)
    inverse = cv2.WARP_INVERSE_MAP
    into_canvas = [(m @ offset)[:2] for m in maps]  # canvas pixel -> frame t pixel
    warped = [
        cv2.warpAffine(frame, m, (columns, rows), flags=cv2.INTER_LINEAR | inverse)
        for frame, m in zip(frames, into_canvas)
    ]
    seen = [
        cv2.warpAffine(mask, m, (columns, rows), flags=cv2.INTER_NEAREST | inverse) > 0
        for mask, m in zip(visible, into_canvas)
    ]
    plate, _ = background_plate(np.stack(warped), ~np.stack(seen))
    canvas = np.zeros(
        (rows, columns), np.uint8
    )  # warped back, 1 only where a frame reaches off the canvas
    plates = np.empty_like(frames)
    for t, m in enumerate(maps):
        back = np.linalg.inv(m @ offset)[:2]  # frame t pixel -> canvas pixel
        plates[t] = cv2.warpAffine(plate, back, (width, height), flags=cv2.INTER_LINEAR | inverse)
        hole = cv2.warpAffine(
            canvas, back, (width, height), flags=cv2.INTER_NEAREST | inverse, borderValue=1
        )
        if hole.any():
            plates[t] = fill_holes(plates[t], hole)
    return plates


def remove_people(frames: np.ndarray, covered: np.ndarray) -> np.ndarray:
    """The clip with every covered pixel (T, H, W) replaced by its shot's background, camera motion followed."""
    covered = covered.astype(bool)
    out = frames.copy()
    for shot in shots(frames):
        clip, mask = frames[shot], covered[shot]
        maps = camera_motion(clip, mask)
        if is_static(maps, *clip.shape[1:3]):
            plates = np.broadcast_to(background_plate(clip, mask)[0], clip.shape)
        else:
            plates = _moving_plates(clip, mask, maps)
        np.copyto(
            out[shot], plates, where=mask[..., None]
        )  # in place: np.where made a copy of the stretch
    return out
