"""Stage ``anonymize``: every decoded clip (both splits) through one anonymization method.

``avatar`` (paper 001 §5.2): people removed (:mod:`tasks.anonymize.inpaint`) and replaced by
virtual humans in the same pose (:mod:`tasks.anonymize.avatars`), the avatars' pixels written
as the public mask MaskDP needs. The baselines of paper 000 §4.2 are in
:mod:`tasks.anonymize.obfuscate`.

    decode manifest ─▶ frames/<id>.npy + annotations/<id>.npz ─▶ method ─▶ frames/<id>.npy
                                                                    └─▶ masks/<id>.npz (public pixels, 0/1;
                                                                        only methods that make any)

One output per method (``anonymize@face_blur``, ``anonymize@low_res_32x24`` …), so each feeds
training and evaluation like the raw clips do. People come from ``anonymize.source``: the
dataset's ground truth (the person masks, skeletons and face boxes the decode stage carried
along; a clip without them stops the stage with one line naming the video), or ``detector``:
models bundled in mediapipe (:mod:`tasks.anonymize.detector`), for real footage. The manifest adds
``public_fraction`` (share of public pixels, MaskDP's input) and the mask's path; the
speed of the method (frames/s, the f_speed of paper 004) goes to the stage's MLflow run.
"""

from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from tasks.anonymize.avatars import avatar_for, render
from tasks.anonymize.detector import detect_people, load_mediapipe
from tasks.anonymize.inpaint import remove_people
from tasks.anonymize.obfuscate import LOW_RES, black_out, blur_faces, dilate, low_res_size, low_resolution, no_public_pixels
from tasks.core.budget import check_unprotected
from tasks.core.errors import PrivharError
from tasks.core.manifest import MANIFEST_NAME, read_manifest, rebase_path, resolve_path, write_manifest
from tasks.core.parallel import map_ordered, worker_count
from tasks.core.params import AnonymizeParams, BaseParams, load_section
from tasks.core.speed import write_speed
from tasks.core.storage import atomic_directory, load_frames, save_arrays, save_frames
from tasks.core.tracking import stage_run

NEEDS_PEOPLE = {"avatar": ("person_mask", "skeleton", "joint_depth", "identity"), "face_blur": ("face_box",),
                      "blackout": ("person_mask",)}
PUBLIC_PIXEL_METHODS = {"avatar", "blackout"}  # methods whose output has synthetic pixels: they write masks/


def replace_with_avatars(frames: np.ndarray, truth: dict[str, np.ndarray], dilation: int,
                         seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Paper 001 §5.2: remove every person (dilated mask), render avatars in their poses.

    The public mask is the avatars' coverage (:func:`tasks.anonymize.avatars.render`); a
    person whose skeleton is not finite in a frame is not drawn there.
    """
    clean = remove_people(frames, dilate(truth["person_mask"], dilation))
    avatars = [avatar_for(seed, identity) for identity in truth["identity"]]
    out, public = np.empty_like(frames), np.empty(frames.shape[:3], np.uint8)
    for t in range(len(frames)):
        people = [(truth["skeleton"][t, p], truth["joint_depth"][t, p], avatar) for p, avatar in enumerate(avatars)
                  if np.isfinite(truth["skeleton"][t, p]).all() and np.isfinite(truth["joint_depth"][t, p]).all()]
        out[t], coverage = render(clean[t], people)
        public[t] = coverage > 0
    return out, public


def ground_truth(row: dict[str, Any], source: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The clip's annotations ``keys``, or a one-line error naming the video; nothing is read when none are needed."""
    if not keys:
        return {}
    stored = row.get("annotations")
    path = resolve_path(stored, source) if stored else None
    if path is None or not path.is_file():
        raise PrivharError(f"anonymize: video {row['video_id']} has no ground-truth annotations "
                           f"({path or 'no annotations column'}); anonymize.source = ground_truth needs them")
    with np.load(path) as annotations:
        missing = [key for key in keys if key not in annotations.files]
        if missing:
            raise PrivharError(f"anonymize: {path}: video {row['video_id']} lacks {missing}")
        return {key: annotations[key] for key in keys}


def apply_method(method: str, frames: np.ndarray, truth: dict[str, np.ndarray], params: AnonymizeParams,
                 seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(protected clip, public mask) for one method."""
    if method == "avatar":
        return replace_with_avatars(frames, truth, params.mask_dilation, seed)
    if method == "face_blur":
        return blur_faces(frames, truth["face_box"], params.face_blur_kernel, params.face_blur_sigma), no_public_pixels(frames)
    if method == "blackout":
        return black_out(frames, truth["person_mask"], params.mask_dilation)
    if LOW_RES.match(method):
        return low_resolution(frames, low_res_size(method)), no_public_pixels(frames)
    return frames.copy(), no_public_pixels(frames)  # none


def anonymize_one(row: dict[str, Any], *, method: str, params: AnonymizeParams, seed: int, source: Path, out: Path,
                  final: Path, workdir: Path) -> tuple[dict[str, Any], float]:
    """One clip: protected frames and public mask written; its manifest row and the method's seconds returned."""
    frames = load_frames(workdir / resolve_path(row["path"], source))
    keys = NEEDS_PEOPLE.get(method, ())
    started = time.perf_counter()
    if params.source == "detector":  # finding people is part of the method's cost (f_speed)
        people = detect_people(frames, keys, video_id=str(row["video_id"]), min_confidence=params.detector_confidence)
    else:
        people = ground_truth(row, workdir / source, keys)
        started = time.perf_counter()
    protected, public = apply_method(method, frames, people, params, seed)
    seconds = time.perf_counter() - started
    save_frames(workdir / out / "frames" / f"{row['video_id']}.npy", protected)
    mask = ""
    if method in PUBLIC_PIXEL_METHODS:
        mask = f"masks/{row['video_id']}.npz"
        save_arrays(workdir / out / mask, public=public)
    annotations = rebase_path(row.get("annotations"), workdir / source, workdir / final)
    return {**row, "path": f"frames/{row['video_id']}.npy", "mask": mask, "annotations": annotations,
            "anonymize_method": method, "public_fraction": round(float(public.mean()), 6)}, seconds


def anonymize(*, params_path: Path, frames: Path, method: str, out: Path, speed_path: Path | None = None) -> list[dict[str, Any]]:
    """Protect every clip of the decoded manifest in ``frames`` with ``method``; its measured frames/s to ``speed_path``."""
    base = load_section(params_path, "base", BaseParams)
    params = load_section(params_path, "anonymize", AnonymizeParams)
    if method not in params.methods:
        raise PrivharError(f"anonymize: method {method!r} is not one of anonymize.methods = {params.methods}")
    check_unprotected(params_path, f"the anonymized copy anonymize@{method}")  # obfuscation: no DP guarantee
    rows = read_manifest(frames / MANIFEST_NAME)
    if params.source == "detector" and NEEDS_PEOPLE.get(method):
        load_mediapipe()  # one line now if it is missing, not one per worker
    with stage_run(f"anonymize@{method}", {"base": base, "anonymize": params}) as run, atomic_directory(out) as staging:
        (staging / "frames").mkdir()
        (staging / "masks").mkdir()
        work = partial(anonymize_one, method=method, params=params, seed=base.seed, source=frames, out=staging, final=out,
                       workdir=Path.cwd())
        results = map_ordered(work, rows, workers=worker_count(base.workers), desc=f"anonymize {method}")
        protected = [row for row, _ in results]
        seconds = sum(spent for _, spent in results)
        write_manifest(protected, staging / MANIFEST_NAME)
        total_frames = sum(int(row["n_frames"]) for row in protected)
        speed = total_frames / max(seconds, 1e-9)
        if speed_path is not None:
            write_speed(speed_path, frames=total_frames, seconds=seconds,
                        measured=f"anonymize {method}: the method alone (and the detector when it finds people), one core")
        public = float(np.mean([row["public_fraction"] for row in protected]))
        run.log_metrics({"frames_per_second": speed, "public_fraction": public, "videos": len(protected)})
        run.set_tags({"privhar.method": method, "privhar.people_source": params.source})
        print(f"anonymize: {method}: {len(protected)} videos, {speed:.0f} frames/s (the method alone, one core), "
              f"public pixels {public:.3f}", file=sys.stderr)
    return protected
