"""People between key frames: the finders search every ``detect_every``-th frame (:func:`key_frames`), and each frame
between gets the people tracked through it, carried from the key frames on either side (:func:`carried`)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import cv2
import numpy as np

from tasks.anonymize.camera import scene_tracks
from tasks.anonymize.tracks import MISSED_GROWTH, Box
from tasks.people_finding.opencv_detectors import fill_boxes
from tasks.people_finding.regions import scaled_boxes

MIN_PERSON_AREA = (
    0.0005  # of the frame: smaller blobs get no pose of their own (they are still removed)
)


def person_boxes(mask: np.ndarray) -> list[Box]:
    """Boxes of the connected person blobs of one frame's mask, left to right (the poses' order)."""
    count, _, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    least = MIN_PERSON_AREA * mask.size
    found = [
        (float(x), float(y), float(x + w), float(y + h))
        for x, y, w, h, area in stats[1:count]
        if area >= least
    ]
    return sorted(found)


def key_frames(count: int, every: int, cuts: Iterable[int] = ()) -> np.ndarray:
    """(count,) bool: the frames detectors run on, every ``every``-th, the last, and both sides of each cut (``cuts``:
    the first frame of each shot after the first; issue 84: a shot's first frame, 11 frames before the next key
    frame, took the people of the shot before, and a cyclist's face was released in the 640x360 live stream).

    >>> key_frames(7, 3).nonzero()[0].tolist()
    [0, 3, 6]
    >>> key_frames(5, 3).nonzero()[0].tolist()
    [0, 3, 4]
    >>> key_frames(10, 6, cuts=[3]).nonzero()[0].tolist()
    [0, 2, 3, 6, 9]
    """
    keyed = np.zeros(count, bool)
    keyed[::every] = True
    keyed[-1] = True
    for first in cuts:
        keyed[max(0, first - 1) : first + 1] = True
    return keyed


FLOW_CORNERS = 4  # corners a face's move needs to be measured (fewer: unknown)


def face_speeds(frames: np.ndarray, t: int, boxes: list[Box]) -> list[tuple[float, float]]:
    """How far each box found in frame ``t`` moves a frame: the median move of its corners, tracked by pyramidal
    Lucas-Kanade into the next frame (or from the one before, at the last): a face found in one search only (a fast one
    the searches around miss, issue 84: a cyclist at 1280x720, found once in a second) still has a way to sweep its box
    along (:func:`tasks.anonymize.tracks.swept`). NaN where too few corners could be followed.

    >>> frames = np.zeros((2, 60, 80, 3), np.uint8); frames[0, 20:40, 10:30] = 255; frames[1, 20:40, 16:36] = 255
    >>> [[round(v) for v in speed] for speed in face_speeds(frames, 0, [(6.0, 16.0, 34.0, 44.0)])]
    [[6, 0]]
    """
    unknown = (float("nan"), float("nan"))
    if len(frames) < 2 or not boxes:
        return [unknown] * len(boxes)
    before, after = (t, t + 1) if t + 1 < len(frames) else (t - 1, t)
    grey = [cv2.cvtColor(frames[k], cv2.COLOR_RGB2GRAY) for k in (before, after)]
    return [_box_speed(grey, box) or unknown for box in boxes]


def _box_speed(grey: list[np.ndarray], box: Box) -> tuple[float, float] | None:
    """The median move of ``box``'s corners from the first grey frame to the second (None: too few followed)."""
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    where = np.zeros(grey[0].shape, np.uint8)
    where[max(0, y0) : max(0, y1), max(0, x0) : max(0, x1)] = 255
    corners = cv2.goodFeaturesToTrack(grey[0], 30, 0.01, 3, mask=where)
    if corners is None or len(corners) < FLOW_CORNERS:
        return None
    moved, found, _ = cv2.calcOpticalFlowPyrLK(grey[0], grey[1], corners, None, maxLevel=3)
    steps = (moved - corners).reshape(-1, 2)[found.ravel() == 1]
    if len(steps) < FLOW_CORNERS:
        return None
    dx, dy = np.median(steps, axis=0)
    return (float(dx), float(dy))


def moved_shape(
    into: np.ndarray,
    mask: np.ndarray,
    source: Box,
    target: Box,
    origin: tuple[int, int] = (0, 0),
) -> None:
    """Add to ``into`` (H, W) the pixels of ``mask`` inside box ``source``, scaled and moved onto box ``target`` (box
    edges rounded to whole pixels; the crop resized, not the frame warped: 11 000 whole-frame warps took 1.8 s of a
    320×240 folder's avatar run). ``into`` may be the window at ``origin`` (x, y) of the frame (``mask``'s size) that
    holds the target box: the pixels land where they would in the whole frame.

    >>> into, mask = np.zeros((6, 8), bool), np.zeros((6, 8), bool); mask[1:3, 1:2] = True
    >>> moved_shape(into, mask, (1, 1, 3, 3), (4, 2, 8, 6)); into.nonzero()[1].tolist()  # twice as wide, moved
    [4, 5, 4, 5, 4, 5, 4, 5]
    >>> moved_shape(into, mask, (1, 1, 3, 3), (-9, 2, -5, 6)); int(into.sum())  # a target wholly outside: nothing
    8
    >>> window = np.zeros((5, 6), bool); moved_shape(window, mask, (1, 1, 3, 3), (4, 2, 8, 6), (3, 1))
    >>> window.nonzero()[1].tolist()  # the same pixels, in the window from column 3, row 1
    [1, 2, 1, 2, 1, 2, 1, 2]
    """
    height, width = mask.shape
    left, top, right, bottom = (int(round(v)) for v in source)
    crop = mask[max(0, top) : max(0, bottom), max(0, left) : max(0, right)]
    x0, y0, x1, y1 = (int(round(v)) for v in target)
    if not crop.any() or x1 <= x0 or y1 <= y0:
        return
    # where the source box reaches past the frame, its crop is the part inside: keep its place in the target box
    sx, sy = (x1 - x0) / max(right - left, 1), (y1 - y0) / max(bottom - top, 1)
    x0 += round((max(0, left) - left) * sx)
    y0 += round((max(0, top) - top) * sy)
    size = (max(1, round(crop.shape[1] * sx)), max(1, round(crop.shape[0] * sy)))
    moved = crop  # a box the same size: nothing to resize
    if size != (crop.shape[1], crop.shape[0]):
        moved = cv2.resize(crop.view(np.uint8), size, interpolation=cv2.INTER_NEAREST) > 0
    top, bottom = max(0, y0), min(height, y0 + size[1])
    left, right = max(0, x0), min(width, x0 + size[0])
    if bottom > top and right > left:  # (a target box wholly outside the frame adds nothing)
        into[top - origin[1] : bottom - origin[1], left - origin[0] : right - origin[0]] |= moved[
            top - y0 : bottom - y0, left - x0 : right - x0
        ]


def grown_shape(shape: np.ndarray, margin: int) -> np.ndarray:
    """``shape`` grown by ``margin`` pixels on every side."""
    if margin < 1:
        return shape
    element = cv2.getStructuringElement(cv2.MORPH_RECT, (2 * margin + 1, 2 * margin + 1))
    return cv2.dilate(shape.astype(np.uint8), element) > 0


# pixels a moved shape's window reaches past its box's rounded edges (a shape reaches one at most)
WINDOW_SLACK = 2
CARRIED_MARGIN = 1  # pixels around a shape carried between key frames where the motion member runs on every frame


def _margin(tracked: np.ndarray, seen: list[int], box: Box) -> int:
    """How far a person may stray from the shape carried to a frame between key frames when nothing searches that
    frame: held from one key frame, what ``MISSED_GROWTH`` adds to the shorter side of their box (how far they went
    is not known); between two finds (``seen``), one frame's move of their box's centre, at most that (over a third
    of a second a walker keeps to the line between the two)."""
    margin = round((MISSED_GROWTH - 1) / 2 * min(box[2] - box[0], box[3] - box[1]))
    if len(seen) == 2:
        step = tracked[seen[1]] - tracked[seen[0]]
        moved = np.hypot((step[0] + step[2]) / 2, (step[1] + step[3]) / 2) / (seen[1] - seen[0])
        margin = min(margin, max(1, int(np.ceil(moved))))
    return margin


def carried(
    person: np.ndarray,
    keyed: np.ndarray,
    every: int,
    maps: np.ndarray | None = None,
    *,
    motion_every_frame: bool = False,
) -> tuple[np.ndarray, list[list[Box]]]:
    """The key frames' person pixels, and in every frame those of the people tracked through it from the key frames
    around (a key frame's own finders may miss someone the others found)
    (:func:`tasks.anonymize.tracks.fill`: a track's box interpolated between two finds up to two key frames apart,
    held up to the next key frame before the first and after the last; with the camera where it travels, ``maps``):
    a person found in frames t − k and t + k is covered in t by their shapes in both, each mapped onto the box
    interpolated for t (:func:`moved_shape`), grown by ``CARRIED_MARGIN`` where ``motion_every_frame`` (whoever
    moves is found in t itself; a still person's shape stays put) or else by :func:`_margin`; the whole box grown by
    ``MISSED_GROWTH`` where neither key frame holds a pixel of the track. Only that far: a walker's box held through a
    whole stretch merged a street's walkers into one box over most of the frame (issue 81). Shapes, not boxes: a blob
    of walkers joined by the gravel between them is a box three times their size (issue 81: vtest_a's blackout
    changed 20.2 % of the frame with grown boxes, 13.7 % with shapes grown by :func:`_margin`, 10.0 % with
    ``CARRIED_MARGIN``; its people 2.5 %). Key frames too, from the key frames around them (issue 84: a standing
    man's 11 x 16 face at 1280 x 720, found in the key frames after, was released in the key frame that opened a 1 s
    stretch, where the finders missed him).
    Returns the (T, H, W) mask and each frame's person boxes: its own blobs and the tracked boxes grown, one a
    person (a face method blurs each one's head band)."""
    found = [person_boxes(mask) for mask in person]
    if keyed.all():
        return person, found
    keys = np.flatnonzero(keyed)
    out, own = person.copy(), [list(boxes) for boxes in found]
    tracked = scene_tracks(
        [own[k] if keyed[k] else [] for k in range(len(person))], maps, every, 1.0
    )
    for t in np.flatnonzero(~keyed):
        _carry(out, found[t], t, person, tracked, keys, motion_every_frame)
    # each key frame from the key frames on either side: its own finders may have missed someone they found (the
    # tracks are held to it, ``reach`` = ``every``); on the stretch between those two only, a few milliseconds
    for index, t in enumerate(keys):
        lo, hi = int(keys[max(0, index - 1)]), int(keys[min(len(keys) - 1, index + 1)])
        around = np.array(sorted({lo, hi} - {int(t)}), int) - lo
        window = [own[k] if k - lo in around else [] for k in range(lo, hi + 1)]
        near = scene_tracks(window, None if maps is None else maps[lo : hi + 1], every, 1.0)
        _carry(
            out[lo : hi + 1],
            found[t],
            int(t) - lo,
            person[lo : hi + 1],
            near,
            around,
            motion_every_frame,
        )
    return out, found


def _carry(
    out: np.ndarray,
    boxes: list[Box],
    t: int,
    person: np.ndarray,
    tracked: np.ndarray,
    around: np.ndarray,
    motion_every_frame: bool,
) -> None:
    """Frame ``t``'s people tracked from the key frames ``around`` it added to ``out[t]`` (their shapes, else their
    grown boxes) and to ``boxes``."""
    nearest = tuple(int(k) for k in (*around[around < t][-1:], *around[around > t][:1]))
    frame = person.shape[1:]
    for track in np.flatnonzero(np.isfinite(tracked[t]).all(axis=1)):
        box = tuple(float(v) for v in tracked[t, track])
        grown = tuple(float(v) for v in scaled_boxes(tracked[t, track], MISSED_GROWTH))
        boxes.append(grown)
        seen = [k for k in nearest if np.isfinite(tracked[k, track]).all()]
        margin = CARRIED_MARGIN if motion_every_frame else _margin(tracked[:, track], seen, box)
        # the shapes land in the box (a pixel past its rounded edges at most) and grow by the margin: worked on in
        # that window of the frame, not the whole frame (a street's tracks made 40 whole-frame masks a frame)
        x0, y0 = (max(0, math.floor(v) - margin - WINDOW_SLACK) for v in box[:2])
        x1, y1 = (math.ceil(v) + margin + WINDOW_SLACK for v in box[2:])
        shape = np.zeros((max(0, min(frame[0], y1) - y0), max(0, min(frame[1], x1) - x0)), bool)
        for k in seen:
            moved_shape(shape, person[k], tuple(tracked[k, track]), box, (x0, y0))
        if shape.any():
            out[t, y0 : y0 + shape.shape[0], x0 : x0 + shape.shape[1]] |= grown_shape(shape, margin)
        else:
            out[t] |= fill_boxes(frame, [grown])
