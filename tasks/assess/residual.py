"""What a protected copy still shows of people: person and face detectors re-run on its frames.

Paper 004 scores detectors against ground truth; real footage has none, and the question a
camera owner asks is simpler — does anything still find a person? On every
``assess.detection_frame_step``-th frame of ``assess.residual_videos`` test videos:

    residual_people  OpenCV's HOG people detections per frame (frames enlarged :data:`UPSCALE`×)
    residual_faces   Haar frontal-face detections per frame (enlarged the same)
    residual_pixels  share of the raw frame's person pixels — the anonymize ensemble without
                     mediapipe: MOG2 / KNN motion over the clip ∪ HOG boxes — that the same
                     ensemble still finds on the protected frame

A detection more than half on avatar pixels (the copy's public mask) is the avatar, not a
person, and public pixels are not residual person pixels. On a copy filled with noise (DPRP)
the motion models fire everywhere: there residual_pixels is an upper bound.

Faces across time (issue 32: one sharp frame of eight is a released face), on every frame of the same videos:

    face_leak_frames  of the frames where the Haar detector finds a face in the raw frame, the share where it finds
                      it again in the protected frame (Dice > 0.5, paper 004's match, not on avatar pixels)
    face_leak_clips   of the clips with such a face, the share where it survives in at least one frame

Where the dataset annotates faces, only raw detections on a true visible face count (Haar also fires on background
texture, which every copy keeps); on real footage every raw detection counts. What survives is what Haar still calls
a face: a face-shaped blob (a blurred synthetic head still is one; re-identification says whether it can be named),
and on real footage a lower bound of the faces a person would see, since Haar misses many. The raw row is 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tasks.core.scores import matches
from tasks.people_finding.motion_detector import moving_people
from tasks.people_finding.opencv_detectors import face_boxes, fill_boxes, people_boxes

Box = tuple[float, float, float, float]
UPSCALE = 4.0  # decoded frames are small (people 10-40 rows at 96): HOG wants ~96 rows, Haar ~24
MOTION_GROW = 1  # decoded pixels around a moving blob


def _outside_public(
    boxes: list[tuple[float, float, float, float]], public: np.ndarray | None
) -> int:
    """Boxes not mostly on avatar pixels."""
    if public is None:
        return len(boxes)
    kept = 0
    for box in boxes:
        area = fill_boxes(public.shape, [box])
        kept += int(area.sum() == 0 or public[area].mean() <= 0.5)
    return kept


def _person_pixels(clip: np.ndarray, t: int) -> np.ndarray:
    moving = np.zeros(clip.shape[1:3], bool)
    for model in ("mog2", "knn"):
        moving |= moving_people(clip, np.array([t]), model=model, grow=MOTION_GROW)[0]
    return moving | fill_boxes(clip.shape[1:3], people_boxes(clip[t], UPSCALE))


def residual_scores(
    raw: dict[str, np.ndarray],
    protected: dict[str, np.ndarray],
    public: dict[str, np.ndarray | None],
    videos: list[str],
    step: int,
    true_faces: dict[str, list[list[Box]]] | None = None,
) -> dict[str, Any]:
    """The residual figures over ``videos`` (ids present in ``protected``), every ``step``-th frame (the face leakage:
    every frame; ``true_faces``: the annotated visible faces per frame, where the dataset has them)."""
    people, faces, found, kept, frames = 0, 0, 0, 0, 0
    for video in videos:
        clip, mask = protected[video], public.get(video)
        for t in range(0, len(clip), step):
            frame_public = None if mask is None else mask[t].astype(bool)
            people += _outside_public(people_boxes(clip[t], UPSCALE), frame_public)
            faces += _outside_public(face_boxes(clip[t], UPSCALE), frame_public)
            before = _person_pixels(raw[video], t)
            after = _person_pixels(clip, t) & before
            if frame_public is not None:
                after &= ~frame_public
            found += int(before.sum())
            kept += int(after.sum())
            frames += 1
    return {
        "residual_people": people / max(frames, 1),
        "residual_faces": faces / max(frames, 1),
        "residual_pixels": kept / found if found else 0.0,
        **face_leakage(raw, protected, public, videos, true_faces),
    }


def face_leakage(
    raw: dict[str, np.ndarray],
    protected: dict[str, np.ndarray],
    public: dict[str, np.ndarray | None],
    videos: list[str],
    true_faces: dict[str, list[list[Box]]] | None = None,
) -> dict[str, float | None]:
    """``face_leak_frames`` and ``face_leak_clips`` over every frame of ``videos`` (None where no raw face is found);
    with ``true_faces`` (annotations), only raw detections that match a true face."""
    with_face = leaked = clips_with_face = clips_leaked = 0
    for video in videos:
        clip, mask = protected[video], public.get(video)
        seen = survived = False
        for t in range(len(clip)):
            before = face_boxes(raw[video][t], UPSCALE)
            if true_faces is not None and video in true_faces:
                before = [
                    box
                    for box in before
                    if any(matches(box, true) for true in true_faces[video][t])
                ]
            if not before:
                continue
            frame_public = None if mask is None else mask[t].astype(bool)
            after = [
                box for box in face_boxes(clip[t], UPSCALE) if _outside_public([box], frame_public)
            ]
            kept = any(matches(old, new) for old in before for new in after)
            seen, survived = True, survived or kept
            with_face += 1
            leaked += int(kept)
        clips_with_face += int(seen)
        clips_leaked += int(survived)
    return {
        "face_leak_frames": leaked / with_face if with_face else None,
        "face_leak_clips": clips_leaked / clips_with_face if clips_with_face else None,
    }
