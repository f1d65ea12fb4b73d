"""Where a clip's camera cuts and moves: shots, and each frame's map from its shot's first frame.

Real footage is not one static shot. Three parts of the anonymize core need to know it: the background behind a
removed person (:mod:`tasks.anonymize.inpaint`: one plate a static shot, a registered canvas a moving one), the
``motion`` people finder (background subtraction calls a moving background a person: issue 81 found blackout changing
more than 75 % of most frames of handheld clips), and the moving-pixel reference of the coverage check
(:func:`tasks.anonymize.coverage.moving_pixels`: on a pan every textured pixel moves, so the gate held back the
stretch). A shot is cut where consecutive frames' colour histograms jump (:func:`shots`); within a shot the camera's
motion is background corners tracked by pyramidal Lucas-Kanade and a similarity fitted by RANSAC
(:func:`camera_motion`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from tasks.anonymize.tracks import (
    MISSED_GROWTH,
    Box,
    by_track,
    fill,
    link,
    track_numbers,
)

CUT_DISTANCE = 0.4  # hue-saturation histograms' Bhattacharyya distance of a cut (consecutive synthetic frames ≤ 0.24)
STATIC_PIXELS = 3.0  # a shot whose camera moves no frame corner further is static (the synthetic clips' jitter: ~1)
MIN_TRACKED = (
    8  # background corners needed to fit a step of the camera (fewer: that step is taken as none)
)
MIN_INLIERS = 0.5  # share of the tracked corners the fitted similarity must explain (else: no fit)
MAX_SCALE_STEP = 0.1  # a fitted step that zooms more than this between two frames is not a camera's
MAX_TURN_STEP = np.deg2rad(5)  # nor one that turns more than this


def _histogram(frame: np.ndarray) -> np.ndarray:
    hsv = cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2HSV)
    histogram = cv2.calcHist([hsv], [0, 1], None, [16, 16], [0, 180, 0, 256])
    return cv2.normalize(histogram, histogram).flatten()


def shots(frames: np.ndarray) -> list[slice]:
    """The clip's shots, in order: a new one starts where consecutive frames' colours jump (a cut). A cut between two
    shots of the same colours is not found: their frames are then registered as one moving shot."""
    histograms = [_histogram(frame) for frame in frames]
    starts = [0] + [
        t
        for t in range(1, len(frames))
        if cv2.compareHist(histograms[t - 1], histograms[t], cv2.HISTCMP_BHATTACHARYYA)
        > CUT_DISTANCE
    ]
    return [slice(start, end) for start, end in zip(starts, [*starts[1:], len(frames)])]


def _fit(
    before: np.ndarray, after: np.ndarray, corners: np.ndarray, guess: np.ndarray, free: np.ndarray
) -> np.ndarray | None:
    """3 × 3 map from ``before``'s pixels to ``after``'s: ``corners`` of ``before`` tracked by pyramidal Lucas-Kanade
    from where ``guess`` puts them onto uncovered pixels of ``after``, a similarity fitted by RANSAC; None when too few
    corners land or the fit zooms or turns more than ``guess`` allows a camera to (``MAX_SCALE_STEP``,
    ``MAX_TURN_STEP``)."""
    start = corners.reshape(-1, 2).astype(np.float32)
    predicted = (start @ guess[:2, :2].T + guess[:2, 2]).astype(np.float32)
    moved, found, _ = cv2.calcOpticalFlowPyrLK(
        before, after, start, predicted.copy(), flags=cv2.OPTFLOW_USE_INITIAL_FLOW
    )
    columns, rows = np.round(moved[:, 0]).astype(int), np.round(moved[:, 1]).astype(int)
    inside = (rows >= 0) & (rows < after.shape[0]) & (columns >= 0) & (columns < after.shape[1])
    keep = (found.flatten() == 1) & inside
    keep[keep] = free[rows[keep], columns[keep]]
    if keep.sum() < MIN_TRACKED:
        return None
    fitted, inliers = cv2.estimateAffinePartial2D(start[keep], moved[keep], method=cv2.RANSAC)
    if fitted is None or inliers.sum() < max(MIN_TRACKED, MIN_INLIERS * keep.sum()):
        return None
    change = fitted[:, :2] @ np.linalg.inv(guess[:2, :2])
    scale, turn = np.hypot(change[0, 0], change[1, 0]), abs(np.arctan2(change[1, 0], change[0, 0]))
    if abs(scale - 1) > MAX_SCALE_STEP or turn > MAX_TURN_STEP:
        return None
    return np.vstack([fitted, [0.0, 0.0, 1.0]])


def _corners_of(grey: np.ndarray, free: np.ndarray) -> np.ndarray | None:
    found = cv2.goodFeaturesToTrack(grey, 200, 0.01, 5, mask=free.astype(np.uint8))
    return None if found is None or len(found) < MIN_TRACKED else found


def camera_motion(frames: np.ndarray, covered: np.ndarray) -> np.ndarray:
    """(T, 3, 3): each frame's map from the first frame's pixels to its own. Fitted on the first frame's background
    corners directly (no drift), each from where the previous frame's map puts them; once too few of them are in
    view (a long pan), chained from the previous frame's own corners; where neither fits, the last step repeats."""
    grey = [cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2GRAY) for frame in frames]
    free = ~covered.astype(bool)
    maps = np.tile(np.eye(3), (len(frames), 1, 1))
    first = _corners_of(grey[0], free[0])
    for t in range(1, len(frames)):
        direct = None if first is None else _fit(grey[0], grey[t], first, maps[t - 1], free[t])
        if direct is not None:
            maps[t] = direct
            continue
        previous = _corners_of(grey[t - 1], free[t - 1])
        step = (
            None if previous is None else _fit(grey[t - 1], grey[t], previous, np.eye(3), free[t])
        )
        if step is None:  # nothing to fit: the camera keeps its last step (still, if it was)
            step = maps[t - 1] @ np.linalg.inv(maps[t - 2]) if t > 1 else np.eye(3)
        maps[t] = step @ maps[t - 1]
    return maps


def frame_corners(height: int, width: int) -> np.ndarray:
    return np.array(
        [[0, 0, 1], [width - 1, 0, 1], [0, height - 1, 1], [width - 1, height - 1, 1]], float
    )


def is_static(maps: np.ndarray, height: int, width: int) -> bool:
    corners = frame_corners(height, width)
    moved = corners @ maps.transpose(0, 2, 1)
    return bool(np.abs(moved[..., :2] - corners[None, :, :2]).max() <= STATIC_PIXELS)


@dataclass(frozen=True)
class Camera:
    """A clip's shots and, per frame, the map from its shot's first frame's pixels to its own (3 × 3)."""

    shots: list[slice]
    maps: np.ndarray
    moves: bool  # some shot's camera moved more than PAN_SHARE of the frame


PAN_SHARE = 0.05  # a camera whose frame corners travel further than this share of the frame within a stretch moves:
# background subtraction would call its background a person (the synthetic set's jitter and slow tracking shots of a
# squat travel under 5 % of 96 pixels, where MOG2 still finds the person; vtest panned 46 %, handheld street 30-60 %)
CAMERA_ROWS = 120  # a clip's camera is followed on a copy of at most this many rows (its corners and flow are coarse
# features; at 240 rows following it took 7 ms a frame of privhar protect's ~30)


def camera_of(frames: np.ndarray) -> Camera:
    """The camera of a clip (T, H, W, 3), every pixel taken as background (RANSAC leaves a walker's corners out),
    followed on a copy of at most :data:`CAMERA_ROWS` rows and mapped back to the frames' pixels."""
    height, width = frames.shape[1:3]
    factor = min(1.0, CAMERA_ROWS / height)
    small = frames
    if factor < 1.0:
        size = (max(8, round(width * factor)), max(8, round(height * factor)))
        small = np.stack(
            [cv2.resize(frame, size, interpolation=cv2.INTER_AREA) for frame in frames]
        )
    maps = np.tile(np.eye(3), (len(frames), 1, 1))
    cuts = shots(small)
    free = np.zeros(small.shape[:3], bool)
    for shot in cuts:
        maps[shot] = camera_motion(small[shot], free[shot])
    scale = np.diag([small.shape[2] / width, small.shape[1] / height, 1.0])
    maps = np.linalg.inv(scale) @ maps @ scale
    return Camera(cuts, maps, bool(travel(maps, height, width) > PAN_SHARE))


def travel(maps: np.ndarray, height: int, width: int) -> float:
    """The farthest any frame corner moves from where it starts, as a share of the frame's side it moves along.

    >>> step = np.eye(3); step[0, 2] = 16.0
    >>> travel(np.stack([np.eye(3), step]), 240, 320)
    0.05
    """
    corners = frame_corners(height, width)
    moved = np.abs((corners @ maps.transpose(0, 2, 1))[..., :2] - corners[None, :, :2])
    return float((moved / [width, height]).max())


def warp_boxes(boxes: np.ndarray, maps: np.ndarray) -> np.ndarray:
    """Boxes (T, P, 4: x0, y0, x1, y1) moved by each frame's map (T, 3, 3): the axis-aligned box around the mapped
    corners; NaN stays NaN.

    >>> step = np.eye(3); step[0, 2] = 5.0
    >>> warp_boxes(np.array([[[0.0, 0, 10, 10]]]), step[None]).tolist()
    [[[5.0, 0.0, 15.0, 10.0]]]
    """
    x0, y0, x1, y1 = np.moveaxis(boxes, -1, 0)
    corners = np.stack(
        [np.stack([x, y, np.ones_like(x)], -1) for x, y in ((x0, y0), (x1, y0), (x0, y1), (x1, y1))]
    )
    moved = np.einsum("tij,ctpj->ctpi", maps, corners)[..., :2]
    return np.concatenate([moved.min(axis=0), moved.max(axis=0)], axis=-1).astype(boxes.dtype)


def scene_tracks(
    frames: list[list[Box]],
    maps: np.ndarray | None,
    reach: int | None = None,
    growth: float = MISSED_GROWTH,
    sweep: bool = False,
    speeds: list[list[tuple[float, float]]] | None = None,
) -> np.ndarray:
    """(T, P, 4) tracks of the boxes found in each frame, linked, interpolated between and held beyond their finds
    (:func:`tasks.anonymize.tracks.fill`) where the scene is: on a camera that travels (``maps``, frame t's map from
    its shot's first frame), in the first frame's coordinates, then mapped back into each frame's view, so a box
    held between two searches moves with the camera instead of staying where it was found. ``reach``: how far a box
    is held past its finds (:func:`tasks.anonymize.tracks.fill`; None: through the clip), boxes not found grown by
    ``growth`` and, with ``sweep``, stretched along the track's way (:func:`tasks.anonymize.tracks.swept`; a track
    found once, along ``speeds``: each find's move a frame in its frame's pixels, NaN where unknown)."""
    if maps is None:
        numbers = track_numbers(frames)
        return fill(link(frames, numbers), growth, reach, sweep, _by_track(frames, numbers, speeds))
    inverse = np.linalg.inv(maps)
    scene = [_warped(boxes, inverse[t]) for t, boxes in enumerate(frames)]
    # a find's move in the scene: where its speed puts it a frame on, seen from the scene, less where it is
    ahead = [
        _warped(
            [
                (x0 + dx, y0 + dy, x1 + dx, y1 + dy)
                for (x0, y0, x1, y1), (dx, dy) in zip(boxes, moves)
            ],
            inverse[min(t + 1, len(maps) - 1)],
        )
        for t, (boxes, moves) in enumerate(zip(frames, speeds or [[] for _ in frames]))
    ]
    moves = speeds and [
        [tuple(((np.array(b) - a)[:2] + (np.array(b) - a)[2:]) / 2) for a, b in zip(here, there)]
        for here, there in zip(scene, ahead)
    ]
    numbers = track_numbers(scene)
    filled = fill(link(scene, numbers), growth, reach, sweep, _by_track(frames, numbers, moves))
    return warp_boxes(filled.astype(np.float64), maps).astype(np.float32)


def _warped(boxes: list[Box], map_: np.ndarray) -> list[Box]:
    """One frame's boxes moved by ``map_`` (NaN stays NaN, in its place)."""
    moved = warp_boxes(np.asarray(boxes, np.float64).reshape(1, -1, 4), map_[None])[0]
    return [(float(x0), float(y0), float(x1), float(y1)) for x0, y0, x1, y1 in moved]


def _by_track(
    frames: list[list[Box]], numbers: list[list[int]], speeds: list[list[Any]] | None
) -> np.ndarray | None:
    """(T, P, 2) each find's speed in the columns of the tracks ``numbers`` (:func:`tasks.anonymize.tracks.link`)."""
    if not speeds:
        return None
    values = np.full((len(frames), max([len(boxes) for boxes in frames] + [1]), 2), np.nan)
    for t, moves in enumerate(speeds):
        values[t, : len(moves)] = np.asarray(moves, float).reshape(-1, 2)
    return by_track(values, numbers)
