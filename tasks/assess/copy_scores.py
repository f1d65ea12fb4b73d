"""Every score of one copy in the assess stage: attribute cMAP / F1 against the raw and adaptive attackers,
re-identification, detection and tracking against the annotations, what is left (detectors re-run), similarity and
speed (paper 004's signature)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from tasks.assess.attackers import RAW, RawAttackers, copy_attacker, frames_and_truth
from tasks.assess.attributes import (
    attribute_model,
    attribute_privacy,
    load_frame_set,
)
from tasks.assess.detection import (
    BundledDetector,
    Detector,
    Kind,
    detection_rate,
    matched_patches,
    window_box,
)
from tasks.assess.faces import crop
from tasks.assess.fusion import fused_pairs, ssim_groups
from tasks.assess.reid import (
    identification_aggr,
    identification_fused,
    identification_ind,
    recognised_flags,
)
from tasks.assess.residual import residual_scores
from tasks.assess.similarity import mse_similarity, ssim
from tasks.assess.tracking import track_video
from tasks.assess.truth import VideoTruth, clips_of, released
from tasks.core.manifest import MANIFEST_NAME, read_manifest, resolve_path
from tasks.core.params import AssessParams
from tasks.core.scores import SIGNATURE_COLUMNS, frame_hit_rate, speed_score
from tasks.core.speed import read_speed
from tasks.people_finding.regions import expanded, warp_region

log = logging.getLogger(__name__)


ATTRIBUTE_SCORES = ("cmap_raw_attacker", "f1_raw_attacker", "cmap_adaptive", "f1_adaptive")


# e_id, e_det, e_track: scored against annotated faces and bodies
TRUTH_SCORES = SIGNATURE_COLUMNS[:10]


def fused_windows(
    kind: Kind,
    frames: list[np.ndarray],
    boxes: list[list],
    owners: list[list[int]],
    *,
    threshold: float,
    pairs: int,
) -> tuple[list[np.ndarray], list[list]]:
    """Fused frames for detection: each person's object windows (1.5× the window box, one size), grouped by SSIM,
    fused pairwise; the true box of a fused window is the central window box."""
    scale = 1.5
    width, height = (round(side * scale / kind.upscale / 4) * 4 for side in kind.window)
    inner = (width / 6, height / 6, 5 * width / 6, 5 * height / 6)
    by_person: dict[int, list[np.ndarray]] = {}
    for frame, frame_boxes, frame_owners in zip(frames, boxes, owners):
        for box, owner in zip(frame_boxes, frame_owners):
            region = expanded(window_box(box, kind), scale)
            by_person.setdefault(owner, []).append(
                warp_region(frame, region, (width, height), cv2.INTER_AREA)
            )
    fused, truth = [], []
    for images in by_person.values():
        for image in fused_pairs(images, ssim_groups(images, threshold), pairs):
            fused.append(image)
            truth.append([inner])
    return fused, truth


def detection_scores(
    detector: Detector | BundledDetector,
    frames: list[np.ndarray],
    boxes: list[list],
    owners: list[list[int]],
    params: AssessParams,
) -> dict[str, float]:
    """e_det ind (eq. 20), aggr (eq. 21: adapted on the protected frames' hits), fused (eq. 22: adapted on fused windows)."""
    kind = detector.kind
    found = [detector.detect(frame) for frame in frames]
    scores = {"ind": float(np.mean([frame_hit_rate(f, b) for f, b in zip(found, boxes)]))}
    aggregated = detector.clone()
    added = aggregated.learn(
        matched_patches(frames, found, boxes, kind)
    )  # the hits of the pass above, not a new search
    scores["aggr"] = detection_rate(aggregated, frames, boxes) if added else scores["ind"]
    fused, fused_truth = fused_windows(
        kind,
        frames,
        boxes,
        owners,
        threshold=params.ssim_group,
        pairs=params.fused_pairs_per_person,
    )
    adapted = detector.clone()
    added = adapted.adapt(fused, fused_truth)
    scores["fused"] = detection_rate(adapted, frames, boxes) if added else scores["ind"]
    return scores


def _owners(
    rows: list[dict[str, Any]], truths: dict[str, VideoTruth], kind: str, step: int
) -> list[list[int]]:
    """The identity of each true box, frame by frame, in the order of frames_and_truth."""
    owners = []
    for row in rows:
        truth = truths[row["video_id"]]
        people = [int(i) for i in row.get("identities", [row.get("identity", 0)])]
        for t in range(0, len(truth.bodies), step):
            if kind == "body":
                owners.append(people[: len(truth.bodies[t])])
            else:
                owners.append([o.identity for o in truth.occurrences if o.frame == t])
    return owners


def no_avatar(rows: list[dict[str, Any]]) -> int | None:
    """Released clips of a copy that has public masks (avatar) where no public pixel was drawn: no person was found, so
    nothing of the person was replaced and MaskDP has no public view of them; None for a copy without masks (``rows``:
    its manifest)."""
    if not any(row.get("mask") for row in rows):
        return None
    return sum(
        1
        for row in rows
        if row.get("mask") and not row.get("blacked_out") and float(row["public_fraction"]) == 0.0
    )


def public_pixels(rows: list[dict[str, Any]]) -> float | None:
    """Mean share of public pixels (MaskDP's public mask: pixels the avatars cover fully, or blacked-out people) over
    the released clips of a copy that writes masks, clips released black left out; None for a copy without masks."""
    rows = [row for row in rows if not row.get("blacked_out")]
    if not any(row.get("mask") for row in rows):
        return None
    return float(np.mean([float(row["public_fraction"]) for row in rows]))


def unchanged_clips(rows: list[dict[str, Any]]) -> int | None:
    """Released clips of a copy that claims to remove people or faces which it left unchanged byte for byte although
    people were found in them (the anonymize stage names them in its log); None for a copy that claims nothing."""
    gated = [
        row for row in rows if row.get("coverage") is not None and np.isfinite(row["coverage"])
    ]
    if not gated:
        return None
    return sum(1 for row in gated if row.get("unchanged_with_people"))


def assess_copy(
    item: tuple[str, Path],
    *,
    raw: Path,
    train_rows: list[dict[str, Any]],
    test_rows: list[dict[str, Any]],
    truths: dict[str, VideoTruth],
    attackers: RawAttackers,
    params: AssessParams,
    seed: int,
    speeds: Path,
    device: str = "cpu",
) -> dict[str, Any]:
    """Every score of one copy (``name``, ``folder``)."""
    name, folder = item
    started = clock = time.perf_counter()
    test_rows, test_copy, held_test = released(test_rows, folder)
    train_rows, _, held_train = released(train_rows, folder)
    test_clips = clips_of(test_rows, folder)
    raw_clips = test_clips if name == RAW else clips_of(test_rows, raw)
    scores: dict[str, Any] = {
        "copy": name,
        "folder": str(folder),
        **dict.fromkeys((*ATTRIBUTE_SCORES, *TRUTH_SCORES)),
        **_release_facts(test_copy, held_test + held_train, folder),
    }

    clock = _lap(scores, "load", clock)
    if attackers.names:
        _attribute_scores(
            scores,
            name,
            raw,
            train_rows,
            test_rows,
            test_clips,
            folder,
            attackers,
            params,
            seed,
            device,
        )
    clock = _lap(scores, "attributes", clock)
    if truths:
        _truth_scores(scores, test_rows, test_clips, truths, attackers, params)
    clock = _lap(scores, "detection", clock)
    scores.update(_left(raw_clips, test_clips, test_rows, test_copy, folder, truths, params))
    clock = _lap(scores, "residual", clock)
    # f_sim: every test frame against its raw frame.
    pairs = [
        (raw_clips[v][t], test_clips[v][t]) for v in test_clips for t in range(len(test_clips[v]))
    ]
    scores["e_sim_ssim"] = float(np.mean([ssim(a, b) for a, b in pairs]))
    scores["e_sim_mse"] = float(np.mean([mse_similarity(a, b) for a, b in pairs]))

    clock = _lap(scores, "similarity", clock)
    # f_speed: the frames/s the protecting stage measured.
    scores["frames_per_second"] = (
        float("inf") if name == RAW else read_speed(speeds / f"{name}.json")
    )
    scores["e_speed"] = (
        1.0 if name == RAW else speed_score(scores["frames_per_second"], params.target_fps)
    )
    scores["assess_seconds"] = time.perf_counter() - started
    return scores


def _release_facts(
    test_copy: list[dict[str, Any]], quarantined: int, folder: Path
) -> dict[str, Any]:
    """What the protecting stage's manifest says of its release: the gate's mean coverage of the test clips, the
    clips held back, those without an avatar, the public pixels, the clips unchanged although people were found."""
    covered = [
        float(row["coverage"])
        for row in test_copy
        if row.get("coverage") is not None and np.isfinite(row["coverage"])
    ]
    manifest = read_manifest(folder / MANIFEST_NAME)
    return {
        "coverage": float(np.mean(covered)) if covered else None,
        "quarantined": quarantined,
        "no_avatar": no_avatar(manifest),
        "public_pixels": public_pixels(manifest),
        "unchanged": unchanged_clips(manifest),
    }


def _left(
    raw_clips: dict[str, np.ndarray],
    test_clips: dict[str, np.ndarray],
    test_rows: list[dict[str, Any]],
    test_copy: list[dict[str, Any]],
    folder: Path,
    truths: dict[str, VideoTruth],
    params: AssessParams,
) -> dict[str, Any]:
    """What is left: detectors re-run on ``assess.residual_videos`` protected test clips (avatar pixels excluded)."""
    picked = np.unique(
        np.linspace(0, len(test_rows) - 1, min(params.residual_videos, len(test_rows))).astype(int)
    )
    videos = [test_rows[index]["video_id"] for index in picked]
    public = {row["video_id"]: _public_mask(row, folder) for row in test_copy}
    return residual_scores(
        raw_clips,
        test_clips,
        public,
        videos,
        params.detection_frame_step,
        {video: truths[video].faces for video in videos if video in truths} if truths else None,
    )


def _public_mask(row: dict[str, Any], folder: Path) -> np.ndarray | None:
    """A protected clip's avatar (synthetic) pixels, when its copy wrote any."""
    if not row.get("mask"):
        return None
    with np.load(resolve_path(row["mask"], folder)) as stored:
        return stored["public"]


def _attribute_scores(
    scores: dict[str, Any],
    name: str,
    raw: Path,
    train_rows: list[dict[str, Any]],
    test_rows: list[dict[str, Any]],
    test_clips: dict[str, np.ndarray],
    folder: Path,
    attackers: RawAttackers,
    params: AssessParams,
    seed: int,
    device: str = "cpu",
) -> None:
    """Privacy attributes: the raw-trained attacker, then one trained on this copy's training frames."""
    model = attribute_model(len(attackers.names))
    model.load_state_dict(attackers.attacker)
    model.eval()
    size = tuple(params.attacker_size)
    test_set = load_frame_set(test_rows, raw, attackers.names, test_clips, size=size)
    raw_attack = attribute_privacy(model, test_set)
    scores["cmap_raw_attacker"], scores["f1_raw_attacker"] = raw_attack["cmap"], raw_attack["f1"]
    if name == RAW:
        adaptive = raw_attack  # the adaptive attacker of the raw copy is the raw attacker
    else:
        adaptive_model = copy_attacker(
            train_rows,
            raw,
            attackers.names,
            clips_of(train_rows, folder),
            name,
            params,
            seed,
            device,
        )
        adaptive = attribute_privacy(adaptive_model, test_set)
    scores["cmap_adaptive"], scores["f1_adaptive"] = adaptive["cmap"], adaptive["f1"]


def _truth_scores(
    scores: dict[str, Any],
    test_rows: list[dict[str, Any]],
    test_clips: dict[str, np.ndarray],
    truths: dict[str, VideoTruth],
    attackers: RawAttackers,
    params: AssessParams,
) -> None:
    """e_id, e_det and e_track of paper 004: scored against the annotated faces and bodies."""
    # f_id: faces inside the true boxes of the protected test frames, of the people the recognisers learnt (closed set,
    # as paper 004 §5: a face whose person has no training face cannot be named, and would count as protected).
    known = set(attackers.recognisers.identities)
    occurrences = [
        o
        for row in test_rows
        for o in truths[row["video_id"]].occurrences
        if o.frame % params.identification_frame_step == 0 and o.identity in known
    ]
    log.info(
        "assess: face re-identification over %d faces of %d people (of %d in the recognisers' gallery)",
        len(occurrences),
        len({o.identity for o in occurrences}),
        len(known),
    )
    faces = [crop(test_clips[o.video][o.frame], o.box) for o in occurrences]
    flags = recognised_flags(attackers.recognisers, occurrences, faces)
    scores["e_id_ind"] = identification_ind(flags)
    scores["e_id_aggr"] = identification_aggr(occurrences, flags)
    scores["e_id_fused"] = identification_fused(
        attackers.recognisers,
        occurrences,
        faces,
        threshold=params.ssim_group,
        pairs_per_person=params.fused_pairs_per_person,
    )
    scores["face_occurrences"] = len(occurrences)
    # f_det: faces and bodies, independent / aggregated / fused frames.
    for kind_name, detector in attackers.detectors.items():
        frames, boxes = frames_and_truth(
            test_rows, test_clips, truths, kind_name, params.detection_frame_step
        )
        owners = _owners(test_rows, truths, kind_name, params.detection_frame_step)
        for mode, value in detection_scores(detector, frames, boxes, owners, params).items():
            scores[f"e_det_{kind_name}_{mode}"] = value
    # f_track: on videos spread over the test split.
    picked = np.unique(
        np.linspace(0, len(test_rows) - 1, min(params.tracking_videos, len(test_rows))).astype(int)
    )
    rates = [
        rate
        for index in picked
        for rate in track_video(
            test_clips[test_rows[index]["video_id"]],
            truths[test_rows[index]["video_id"]].bodies,
            tuple(params.trackers),
        )
    ]
    scores["e_track"] = float(np.mean(rates)) if rates else 1.0


def _lap(scores: dict[str, Any], part: str, since: float) -> float:
    """Record the seconds ``part`` took (they go to the stage's log, not to the signature)."""
    now = time.perf_counter()
    scores[f"seconds_{part}"] = now - since
    return now
