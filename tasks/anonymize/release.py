"""One clip through one method and the fail-closed gate: the core both front doors share.

The anonymize stage (:mod:`tasks.anonymize.stage`, a decoded clip) and ``privhar protect``
(:mod:`tasks.anonymize.protect_video`, a stretch of a video at its own resolution) call :func:`protect_clip` with the
people found (:mod:`tasks.anonymize.people`); each decides what a held-back clip becomes (left out or released black).

The gate: a method that removes people or faces (``gated`` in the catalogue) must change at least
``anonymize.min_coverage`` of the clip's reference pixels (:mod:`tasks.anonymize.coverage`), and leave no face the
Haar judge finds again mostly unchanged (:func:`released_faces`; every face method, and a people-removing method
wherever people were detected, :func:`judged`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from tasks.anonymize.coverage import changed, coverage
from tasks.anonymize.key_frames import key_frames
from tasks.anonymize.methods import PROTECT
from tasks.anonymize.people import People
from tasks.core.anonymize_catalogue import method_of
from tasks.core.params import AnonymizeParams
from tasks.people_finding.opencv_detectors import (
    Box,
    face_boxes,
    faces_found_again,
    fill_boxes,
    judge_upscale,
)
from tasks.people_finding.regions import scaled_boxes

FACE_CHANGE_LEVELS = (
    12  # a face pixel counts as protected when some channel moved more than this: a weak blur (the
)
# paper's 21-pixel kernel on a 150-pixel face at 720 x 528) moves most pixels by a few levels and leaves the face
# recognisable, and a re-encoded video moves every pixel by a few
PROTECTED_FACE_SHARE = (
    0.5  # a face found again is released when its protection changed less of its box than this
)


@dataclass(frozen=True)
class Protected:
    """A clip after its method: the frames, the public mask, the coverage (NaN for ungated methods) and why it must
    be held back ("" when it may be released)."""

    frames: np.ndarray
    public: np.ndarray
    coverage: float
    reason: str
    unchanged: bool  # people were found and the method changed no pixel
    seconds: (
        float  # the method's own time, without the gate (paper 004's f_speed counts the method)
    )
    failed: tuple[
        int, ...
    ] = ()  # the frames a face was released in, and those each stands for; () = the whole clip

    def blacked_out(self, only_failed: bool = False) -> Protected:
        """The clip released all black (every pixel synthetic, so public), or only its failed frames where the gate
        named them and ``only_failed``."""
        frames, public = np.zeros_like(self.frames), np.ones(self.frames.shape[:3], np.uint8)
        if only_failed and self.failed:
            kept = np.ones(len(self.frames), bool)
            kept[list(self.failed)] = False
            frames[kept], public[kept] = self.frames[kept], self.public[kept]
        return Protected(
            frames, public, self.coverage, self.reason, False, self.seconds, self.failed
        )


def protect_clip(
    frames: np.ndarray,
    found: People | None,
    *,
    method: str,
    params: AnonymizeParams,
    seed: int,
    people_source: str,
) -> Protected:
    """``frames`` (T, H, W, 3) through ``method`` with the people ``found`` (None for a method that reads none),
    then the gate."""
    entry = method_of(method)
    arrays = found.arrays if found is not None else {}
    if "face_box" in arrays and params.face_scale != 1.0:
        arrays = {**arrays, "face_box": scaled_boxes(arrays["face_box"], params.face_scale)}
    started = time.perf_counter()
    protected, public = PROTECT[entry.name](frames, arrays, params, seed, method)
    seconds = time.perf_counter() - started
    if not entry.gated or found is None:
        return Protected(protected, public, float("nan"), "", False, seconds)
    covered = coverage(frames, protected, found.reference, public)
    # frame by frame: array_equal of a whole stretch builds a boolean copy of it (issue 82: a 4K stretch)
    unchanged = found.found and all(map(np.array_equal, protected, frames))
    reason, failed = "", ()
    if covered < params.min_coverage:
        reason = (
            f"coverage {covered:.3f} < anonymize.min_coverage {params.min_coverage}: {method} changed "
            f"{covered:.1%} of the {int(found.reference.sum())} {found.measured_on} (people from {people_source})"
        )
    elif judged(entry.people, people_source) and (
        leaked := released_faces(frames, protected, found, people_source, params.detect_every)
    ):
        reason = (
            f"a face found again after {method}, mostly unchanged, in {len(leaked)} of {len(frames)} frames "
            f"(first: frame {leaked[0]}; {JUDGES[found.judge].name} judging the released frames, people from "
            f"{people_source})"
        )
        reach = params.detect_every - 1  # a judged key frame stands for the frames around it
        failed = tuple(
            sorted(
                {
                    t
                    for frame in leaked
                    for t in range(frame - reach, frame + reach + 1)
                    if 0 <= t < len(frames)
                }
            )
        )
    return Protected(protected, public, covered, reason, unchanged, seconds, failed)


@dataclass(frozen=True)
class Judge:
    """A face detector the gate looks for faces again with: never of the finder's family (:func:`judge_of`)."""

    name: str
    find: Callable[[np.ndarray, float], list[Box]]  # (RGB frame, upscale) -> face boxes


JUDGE_CONFIDENCE = 0.5  # BlazeFace's score for a face the gate looks for again


def _blazeface(frame: np.ndarray, upscale: float) -> list[Box]:
    """BlazeFace (full range) faces of one RGB frame; its own input is 192 × 192, so ``upscale`` is not used."""
    from tasks.anonymize.detector import find_faces

    return find_faces(frame[None], JUDGE_CONFIDENCE)[0]


def _centerface(frame: np.ndarray, upscale: float) -> list[Box]:
    """CenterFace faces of one RGB frame, on the frame enlarged by ``upscale`` (its smallest face is ~10 pixels)."""
    from tasks.anonymize.centerface import find_faces

    if upscale == 1.0:
        return find_faces(frame[None])[0]
    bigger = cv2.resize(frame, None, fx=upscale, fy=upscale, interpolation=cv2.INTER_LINEAR)
    return [tuple(v / upscale for v in box) for box in find_faces(bigger[None])[0]]


JUDGES = {
    "haar": Judge("OpenCV's Haar judge", face_boxes),
    "blazeface": Judge("BlazeFace (mediapipe) judge", _blazeface),
    "centerface": Judge("CenterFace judge", _centerface),
}


def judged(reads: tuple[str, ...], people_source: str) -> bool:
    """Whether the gate runs its face judge: always for a face method; for a people-removing method wherever the
    people were detected. Its coverage reference is the moving pixels, which a still person no finder found is not
    among: with ``--detectors mediapipe`` alone, avatar released a face in a stretch whose coverage passed. Ground
    truth covers every person by construction.

    >>> judged(("face_box",), "ground_truth"), judged(("person_mask",), "ground_truth"), judged(("person_mask",), "hog")
    (True, False, True)
    """
    return "face_box" in reads or people_source != "ground_truth"


def released_faces(
    frames: np.ndarray, protected: np.ndarray, found: People, source_kind: str, every: int = 1
) -> list[int]:
    """Frames that release a face: the face judge (:data:`JUDGES`) finds it again after the protection
    (:func:`tasks.people_finding.opencv_detectors.faces_found_again`) and the protection changed under
    :data:`PROTECTED_FACE_SHARE` of its box by more than :data:`FACE_CHANGE_LEVELS`. A face it blurred but the judge still calls a face (the paper's blur removes
    the detail, not the blob) is the method's known weakness, which assess measures ("faces kept"), not a face left
    unprotected. The judge searches the dataset's annotated faces where it has them (Haar also fires on background
    texture), else the whole frame. It searches every ``every``-th frame and both sides of each cut the finders found
    (:func:`tasks.anonymize.key_frames.key_frames`): a check of the release, at the detectors' rate (a live run's gate
    keeps the stream's rate where its finder searches less often)."""
    regions = None
    if source_kind == "ground_truth":
        regions = [
            [tuple(float(v) for v in box) for box in boxes if np.isfinite(box).all()]
            for boxes in found.arrays["face_box"]
        ]
    leaked = []
    upscale = judge_upscale(frames.shape[1])
    keyed = np.flatnonzero(key_frames(len(frames), every, found.cuts))
    if regions is not None:
        regions = [regions[t] for t in keyed]
    for index, box in faces_found_again(
        frames[keyed], protected[keyed], regions, upscale=upscale, find=JUDGES[found.judge].find
    ):
        t = int(keyed[index])
        inside = fill_boxes(frames.shape[1:3], [box])
        moved = changed(frames[t][None], protected[t][None], FACE_CHANGE_LEVELS)[0]
        share = moved[inside].mean()
        if share < PROTECTED_FACE_SHARE:
            leaked.append(t)
    return leaked
