"""Where the anonymize stage finds people (``anonymize.source``), and the pixels its coverage check is measured on.

    ground_truth  the dataset's annotations (the synthetic dataset's exact masks, skeletons, face boxes)
    detector      mediapipe alone (selfie segmenter, BlazePose per person, BlazeFace); any camera
    motion        background subtraction alone (OpenCV MOG2 / KNN): assumes a static camera, misses
                  a person who never moves
    ensemble      the detectors of ``anonymize.ensemble`` united: a pixel any of them calls person is
                  removed (fail closed). mediapipe; hog (OpenCV's people detector on enlarged frames);
                  motion; faces (OpenCV's Haar cascade and, with mediapipe, BlazeFace)
    auto          ground_truth for the synthetic dataset, ensemble for real data

Detectors run on the source frames the decode stage kept (:mod:`tasks.anonymize.source_clip`),
masks and points mapped down. A face method (``face_blur``) runs the same people finder as the
others, not the face detectors alone: each person box gets the head region its body implies
(:func:`implied_heads`) as a face box, beside the faces found, and the coverage
reference is those heads and the faces found (issue 58: measured against the face detectors' own
boxes, a face no detector found counted as covered, and a recognisable face was released). No
detector here can tell that a moving blob is *not* a person (a car, a branch), so all motion
foreground is removed: it costs utility, never privacy.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from tasks.anonymize.camera import camera_of, scene_tracks
from tasks.anonymize.coverage import changed as _changed
from tasks.anonymize.coverage import moving_pixels, registered_differences
from tasks.anonymize.key_frames import carried, face_speeds, key_frames, person_boxes
from tasks.anonymize.source_clip import SourceClip, source_clip
from tasks.anonymize.tracks import as_frames, between, by_track, fill, track_numbers
from tasks.core.errors import PrivharError
from tasks.core.manifest import resolve_path
from tasks.core.params import AnonymizeParams, DecodeParams
from tasks.people_finding.motion_detector import moving_people, tidy
from tasks.people_finding.opencv_detectors import face_boxes, fill_boxes, people_boxes
from tasks.synthetic.body import JOINTS

DETECTORS_OF = {"detector": ("mediapipe",), "motion": ("motion",)}
FACE_FINDERS = ("centerface", "mediapipe", "faces")
FACE_ROWS = 480  # the most rows CenterFace searches (:func:`face_search`)
Box = tuple[float, float, float, float]


def resolve_source(params: AnonymizeParams, data_source: str) -> str:
    """``auto`` → ground_truth on the synthetic dataset (it has exact annotations), ensemble on real data."""
    if params.source != "auto":
        return params.source
    return "ground_truth" if data_source == "synthetic" else "ensemble"


def video_identity(video_id: str) -> int:
    """A stable identity number per video: no detector here knows who is who across videos."""
    # a file name that is not UTF-8 hashes as its bytes (issue 82)
    digest = hashlib.sha256(video_id.encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:4], "big")


def detectors_of(source: str, params: AnonymizeParams) -> tuple[str, ...]:
    return DETECTORS_OF.get(source, tuple(params.ensemble))


@dataclass(frozen=True)
class People:
    """The annotation arrays the methods read (the ground truth's names and shapes) and the coverage reference."""

    arrays: dict[str, np.ndarray]
    reference: np.ndarray  # (T, H, W) bool: the pixels the method must change
    searched_at: (
        str  # where people were looked for: "ground truth", "source 320x240", "decoded 128x96"
    )
    measured_on: str  # what the reference pixels are: "moving pixels", "true person pixels", ...
    found: bool  # whether any person (or face) was found in any frame
    judge: str = "haar"  # the gate's face judge, a family the finder did not use (tasks.anonymize.release.JUDGES)
    cuts: tuple[int, ...] = ()  # the first frame of each shot after the first (key_frames' cuts)
    # the faces found in each kept frame (searched pixels, [] where none was searched): a stream's next stretch
    # continues their tracks (``detect_in``'s ``before``)
    face_finds: tuple[list[Box], ...] = ()


def ground_truth(row: dict[str, Any], source: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The clip's annotations ``keys``, or a one-line error naming the video; nothing is read when none are needed."""
    if not keys:
        return {}
    stored = row.get("annotations")
    path = resolve_path(stored, source) if stored else None
    if path is None or not path.is_file():
        raise PrivharError(
            f"anonymize: video {row['video_id']} has no ground-truth annotations "
            f"({path or 'no annotations column'}); anonymize.source = ground_truth needs them"
        )
    with np.load(path) as annotations:
        missing = [key for key in keys if key not in annotations.files]
        if missing:
            raise PrivharError(f"anonymize: {path}: video {row['video_id']} lacks {missing}")
        return {key: annotations[key] for key in keys}


def _boxes_array(boxes: list[list[Box]], clip: SourceClip) -> np.ndarray:
    """(T, F, 4) decoded-pixel boxes, NaN where a frame has fewer than F."""
    most = max([len(frame_boxes) for frame_boxes in boxes] + [1])
    array = np.full((len(boxes), most, 4), np.nan, np.float32)
    for t, frame_boxes in enumerate(boxes):
        if frame_boxes:
            array[t, : len(frame_boxes)] = frame_boxes
    # every corner at once (a street's stretch had 1 700 boxes: one call each took a millisecond a frame)
    return clip.points_down(array.reshape(-1, 2)).reshape(array.shape)


def implied_heads(people: list[Box], height: int) -> list[Box]:
    """The head region of each of one frame's person boxes (source pixels, frames of ``height`` rows): the top of the
    box, full width, a quarter of its rows (a standing person's head and neck, with the box's slack), or, for a box
    cut off by the frame's bottom edge (an upper-body view), ``max(h / 4, min(w, h) / 2)`` rows.

    Every person's, whether a face was found in it or not: a face found there is not proof that it is this person's
    (issue 81: CenterFace's false face on the gravel beside a man in a 720p pan lay in his band, which was then left
    out, and his profile was released sharp). Each box gets its own band: two walkers' boxes that touch are two heads,
    not one band over a merged blob (a street's merged walkers gave one band over half of vtest's frame); a box of a
    group found as one blob gets a quarter of its rows, over all of their heads.

    >>> implied_heads([(40.0, 10.0, 60.0, 90.0), (0.0, 50.0, 40.0, 70.0), (0.0, 60.0, 40.0, 100.0)], 100)
    [(40.0, 10.0, 60.0, 30.0), (0.0, 50.0, 40.0, 55.0), (0.0, 60.0, 40.0, 80.0)]
    """
    heads = []
    for x0, y0, x1, y1 in people:
        rows = (y1 - y0) / 4
        if y1 >= height - 1:
            rows = max(rows, min(x1 - x0, y1 - y0) / 2)
        heads.append((x0, y0, x1, y0 + rows))
    return heads


def _poses(
    kept: np.ndarray, person: np.ndarray, params: AnonymizeParams, keyed: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BlazePose on every person blob of the key frames ``keyed``; depth ordered by where a person stands (lower in the
    frame is nearer); one column per person track through the clip (:func:`tasks.anonymize.tracks.track_numbers`), so
    a person keeps their avatar, and each track's pose interpolated through the frames between its key frames."""
    from tasks.anonymize.detector import poses_in_boxes

    boxes = [person_boxes(mask) if keyed[t] else [] for t, mask in enumerate(person)]
    skeleton, depth, mask = poses_in_boxes(kept, boxes, params.detector_confidence)
    for t, frame_boxes in enumerate(boxes):
        for p, box in enumerate(frame_boxes):
            depth[t, p] += (
                10.0 * box[3] / kept.shape[1]
            )  # mediapipe's z is relative to each crop's own hips
    numbers = track_numbers(boxes)
    reach = params.detect_every - 1
    return (
        between(by_track(skeleton, numbers), reach),
        between(by_track(depth, numbers), reach),
        mask,
    )


def face_search(clip: SourceClip, keyed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The key frames CenterFace searches, and the factors (x, y, x, y) that map its boxes onto the people copy.

    People are found on a copy of at most 240 rows; faces on one of up to ``FACE_ROWS`` where the frames are bigger
    (``privhar protect``, which holds them): a 17-pixel face of a 720p street is 6 pixels on the 240-row copy, under
    CenterFace's smallest (issue 81: two faces of vtest_pan at 1280 × 720 released; none at 360 or 480 rows). 480, not
    360 (issue 84): a 12 × 16-pixel face of a 720p car park, 6 × 8 on the 360-row copy, was released by a live run's
    face_blur and found on the 480-row one. CenterFace takes 37 / 48 / 88 ms a key frame at 240 / 360 / 480 rows
    here."""
    kept = clip.kept[keyed]
    if clip.output is None or min(clip.output.shape[1], FACE_ROWS) <= kept.shape[1]:
        return kept, np.ones(4, np.float32)
    # the key frames only, indexed before the copy: a stretch of 720p frames is 276 MB
    full = clip.output[clip.picked[keyed]]
    rows = min(full.shape[1], FACE_ROWS)
    columns = max(1, round(full.shape[2] * rows / full.shape[1]))
    copy = np.stack(
        [cv2.resize(frame, (columns, rows), interpolation=cv2.INTER_AREA) for frame in full]
    )
    factor = np.array([kept.shape[2] / columns, kept.shape[1] / rows] * 2, np.float32)
    return copy, factor


def detect(
    row: dict[str, Any],
    frames: np.ndarray,
    keys: tuple[str, ...],
    *,
    source: str,
    params: AnonymizeParams,
    decode: DecodeParams,
    workdir: Path,
    identity: int,
) -> People:
    """People of one decoded clip ``frames`` found by the detectors of ``source`` on its source frames."""
    return detect_in(
        source_clip(row, frames, decode, workdir),
        keys,
        source=source,
        params=params,
        identity=identity,
    )


def detect_in(
    clip: SourceClip,
    keys: tuple[str, ...],
    *,
    source: str,
    params: AnonymizeParams,
    identity: int,
    before: tuple[list[Box], ...] = (),
) -> People:
    """People of ``clip`` found by the detectors of ``source`` on its kept frames (every ``anonymize.detect_every``-th
    of them, and both sides of each cut, :func:`key_frames`; tracks carry them through the rest), mapped onto the clip's
    output frames. ``before``: the faces found in the frames just before the clip (a stream's stretch before, its
    ``People.face_finds``), whose tracks go on into it."""
    kept = clip.kept
    detectors = detectors_of(source, params)
    count, height, width = kept.shape[:3]
    camera = camera_of(clip.frames)
    cuts = tuple(np.searchsorted(clip.picked, [shot.start for shot in camera.shots[1:]]).tolist())
    keyed = key_frames(count, params.detect_every, cuts)
    scene_maps = camera.maps[clip.picked] if camera.moves else None
    finds, faces = _faces(clip, keyed, detectors, params, scene_maps, before)
    person, moved = _moving(clip, camera, detectors, params)
    person[keyed] |= _found_on_key_frames(kept[keyed], detectors, params)
    # a face is a person's
    person |= np.stack([fill_boxes((height, width), boxes) for boxes in faces])
    person, people = carried(
        person, keyed, params.detect_every, scene_maps, motion_every_frame="motion" in detectors
    )
    # a face method blurs every person's head: the face found in it, or the one its body implies
    faces_only = "face_box" in keys and not set(keys) - {"face_box"}
    if faces_only:
        faces = [found + implied_heads(boxes, height) for found, boxes in zip(faces, people)]
    skeleton = np.full((count, 1, len(JOINTS), 2), np.nan, np.float32)
    depth = np.full((count, 1, len(JOINTS)), np.nan, np.float32)
    if "skeleton" in keys and "mediapipe" in detectors:
        skeleton, depth, posed = _poses(kept, person, params, keyed)
        person |= posed
        skeleton = clip.points_down(skeleton)
    person_mask = clip.mask_down(person)
    face_box = _boxes_array(faces, clip)
    arrays = {
        "person_mask": person_mask.view(np.uint8),  # no copy: a 4K stretch's is a gigabyte
        "skeleton": skeleton,
        "joint_depth": depth,
        "identity": identity + np.arange(skeleton.shape[1], dtype=np.int64),
        "face_box": face_box,
    }
    where = "decoded" if clip.geometry is None else "source"
    return People(
        {key: arrays[key] for key in keys},
        # a face method's: the heads of the people found (and every face found), where the frame has detail
        box_masks(face_box, person_mask.shape[1:]) & detail(clip.decoded(), clip.picked)
        if faces_only
        else moving_reference(clip, moved),
        f"{where} {width}x{height}",
        "head pixels of the people found" if faces_only else "moving pixels",
        found=bool(person_mask.any()),
        judge=judge_of(detectors),
        cuts=cuts,
        face_finds=tuple(finds),
    )


def _faces(
    clip: SourceClip,
    keyed: np.ndarray,
    detectors: tuple[str, ...],
    params: AnonymizeParams,
    scene_maps: np.ndarray | None,
    before: tuple[list[Box], ...] = (),
) -> tuple[list[list[Box]], list[list[Box]]]:
    """The faces found on the key frames (CenterFace, else BlazeFace, and the Haar cascade where ``faces`` is a member),
    and those of every kept frame: each found face followed through the frames it was missed in, with the camera,
    held where it was last found and swept along its way from there (:func:`tasks.anonymize.tracks.swept`; a face
    found once, the way its pixels move, :func:`tasks.anonymize.key_frames.face_speeds`), its track begun in the frames
    ``before`` the clip (on a moving camera, taken as seen from the clip's first frame)."""
    kept = clip.kept
    faces: list[list[Box]] = [[] for _ in range(len(kept))]
    if "centerface" in detectors:
        from tasks.anonymize.centerface import find_faces

        search, factor = face_search(clip, keyed)
        found = iter(find_faces(search))
        faces = [
            [tuple(map(float, factor * np.asarray(box))) for box in next(found)] if key else []
            for key in keyed
        ]
    elif "mediapipe" in detectors:
        # BlazeFace finds faces only where CenterFace does not: else it is the gate's judge
        from tasks.anonymize.detector import find_faces as blazeface

        found = iter(blazeface(kept[keyed], params.detector_confidence))
        faces = [next(found) if key else [] for key in keyed]
    if not any(member in detectors for member in FACE_FINDERS):
        return faces, faces
    if "faces" in detectors:
        faces = [
            found + (face_boxes(frame, params.hog_upscale) if key else [])
            for found, frame, key in zip(faces, kept, keyed)
        ]
    lead = len(before)
    maps = None if scene_maps is None else np.concatenate([scene_maps[:1]] * lead + [scene_maps])
    speeds = [face_speeds(kept, t, boxes) for t, boxes in enumerate(faces)]
    unknown = [[(np.nan, np.nan)] * len(boxes) for boxes in before]
    tracked = scene_tracks([*before, *faces], maps, sweep=True, speeds=[*unknown, *speeds])
    return faces, as_frames(tracked[lead:])


def _moving(
    clip: SourceClip, camera: Any, detectors: tuple[str, ...], params: AnonymizeParams
) -> tuple[np.ndarray, np.ndarray | None]:
    """The people the motion member finds in every kept frame (all False without it), and, on a moving camera, what
    moves against the registered background (the gate's reference; None on a still one)."""
    person = np.zeros(clip.kept.shape[:3], bool)
    if not camera.moves:
        if "motion" in detectors:
            for model in params.motion_models:
                person |= moving_people(
                    clip.frames, clip.picked, model=model, grow=params.motion_grow
                )
        return person, None
    # issue 81: a moving background is no person; what moves against it is, past single pixels
    before, after = registered_differences(clip.frames, clip.picked, clip.fps, camera)
    moved = np.stack([tidy(mask, 0) for mask in before & after])
    if "motion" in detectors:
        # three-frame differencing: a person's pixels differ from the frames before and after (the union adds
        # their ghosts and, under parallax no map explains, half of the background: bikes.mp4 blacked out 76 %)
        person |= np.stack([tidy(mask, params.motion_grow) for mask in before & after])
    return person, moved


def _found_on_key_frames(
    frames: np.ndarray, detectors: tuple[str, ...], params: AnonymizeParams
) -> np.ndarray:
    """The people the HOG detector's boxes and mediapipe's segmenter mark on the key frames ``frames``."""
    person = np.zeros(frames.shape[:3], bool)
    if "hog" in detectors:
        person |= np.stack(
            [
                fill_boxes(
                    frames.shape[1:3], people_boxes(frame, params.hog_upscale, params.hog_scale)
                )
                for frame in frames
            ]
        )
    if "mediapipe" in detectors:
        from tasks.anonymize.detector import segment_people

        person |= segment_people(frames)
    return person


def box_masks(face_box: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The frames' masks of a ``face_box`` array (frames × people × 4, NaN where a person has no box)."""
    return np.stack(
        [fill_boxes(shape, [tuple(b) for b in boxes if np.isfinite(b).all()]) for boxes in face_box]
    )


def judge_of(detectors: tuple[str, ...]) -> str:
    """The gate's face judge for these finders, never a family the finder found faces with, so a face the finder
    missed is looked for by another: BlazeFace where CenterFace finds the faces and mediapipe is loaded (6 ms a
    320 × 240 frame here); CenterFace where mediapipe's BlazeFace finds them (24 ms; OpenCV's Haar cascade, 70 ms,
    also fired on a space shuttle behind a blurred face, which the gate then took for a released face); else OpenCV's
    Haar cascade, as before CenterFace came (the stage's finders without mediapipe, and the ground truth).

    >>> judge_of(("centerface", "mediapipe", "hog")), judge_of(("mediapipe", "hog"))
    ('blazeface', 'centerface')
    """
    if "mediapipe" not in detectors:
        return "haar"
    if "centerface" in detectors:
        return "blazeface"
    from tasks.anonymize.centerface import installed

    return "centerface" if installed() else "haar"


def moving_reference(clip: SourceClip, moved: np.ndarray | None = None) -> np.ndarray:
    """The moving pixels a people-removing method must change, at the output size. Found at the output size (decode's
    frames, as the stage always has), except where the detectors searched a smaller copy of frames the caller holds
    (``privhar protect`` on footage above 240 rows): there on the copy, mapped up failing closed, so the reference is
    measured on the frames the people were found on. On a 768 × 576 ``vtest`` clip this lifted blackout's coverage
    from 0.917 to 0.932; the rest of that gap was pure-black clothing (:func:`tasks.anonymize.coverage.coverage`).
    ``moved``: the searched frames' moving pixels where the camera moves (registered frame to frame), already found
    for the motion member; None on a static camera."""
    if clip.output is None and (clip.geometry is None and moved is not None):
        return moved  # searched at the output size
    if clip.output is None:
        decoded = clip.decoded()
        camera = camera_of(decoded) if moved is not None else None
        return moving_pixels(decoded, clip.picked, clip.fps, camera)
    if moved is None:
        moved = moving_pixels(clip.frames, clip.picked, clip.fps)
    return clip.mask_down(moved)


DETAIL_LEVELS = 2  # grey levels a 5 x 5 Gaussian must move a pixel by for it to carry detail


def detail(frames: np.ndarray, picked: np.ndarray | None = None) -> np.ndarray:
    """(T, H, W) bool: pixels of ``frames`` (of ``frames[picked]``) with detail, which a 5 × 5 Gaussian blur moves by more than ``DETAIL_LEVELS`` in some
    channel. A face method's coverage is measured on these: a blur leaves a flat region (a wall, an animated film's
    painted cheek) as it was, and counting it as missed held back every clip of ``Megamind.avi`` at 720 × 528.

    >>> frame = np.zeros((1, 8, 8, 3), np.uint8); frame[0, 4:, :] = 200
    >>> detail(frame)[0, :, 0].tolist()
    [False, False, True, True, True, True, False, False]
    """
    picked = range(len(frames)) if picked is None else picked
    out = np.empty((len(picked), *frames.shape[1:3]), bool)
    for index, t in enumerate(
        picked
    ):  # a frame at a time: a blurred copy of a 4K stretch is gigabytes (issue 82)
        out[index] = _changed(
            frames[t][None], cv2.GaussianBlur(frames[t], (5, 5), 0)[None], DETAIL_LEVELS
        )[0]
    return out


def find_people(
    row: dict[str, Any],
    frames: np.ndarray,
    keys: tuple[str, ...],
    *,
    source: str,
    params: AnonymizeParams,
    decode: DecodeParams,
    annotations: Path,
    workdir: Path,
    identity: int,
) -> People:
    """The people of one clip from ``source`` (already resolved from ``auto``), with the coverage reference."""
    if source != "ground_truth":
        return detect(
            row,
            frames,
            keys,
            source=source,
            params=params,
            decode=decode,
            workdir=workdir,
            identity=identity,
        )
    reference_key = "face_box" if keys == ("face_box",) else "person_mask"
    truth = ground_truth(row, annotations, tuple(dict.fromkeys((*keys, reference_key))))
    if reference_key == "face_box":
        reference = box_masks(truth["face_box"], frames.shape[1:3])
    else:
        reference = truth["person_mask"] > 0
    # one person a column: a face turned away or occluded in some frames is followed through them
    if "face_box" in keys:
        truth = {**truth, "face_box": fill(truth["face_box"].astype(np.float32))}
    measured = "true face pixels" if reference_key == "face_box" else "true person pixels"
    return People(
        {key: truth[key] for key in keys},
        reference,
        "ground truth",
        measured,
        found=bool(reference.any()),
    )
