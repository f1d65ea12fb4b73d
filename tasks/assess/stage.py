"""Stage ``assess``: how private and how useful each protected copy is, attacker by attacker.

    data/decode (raw, annotated) ───────┬─▶ raw-trained attackers: attribute CNN, face recognisers, HOG detectors
    data/anonymize/<m>, data/dprp/eps<ε> ┴─▶ per copy: attribute cMAP / F1 (raw-trained and adaptive attacker),
    reports/speed/<copy>.json ───────────┘   e_id ind / aggr / fused, e_det face and body ind / aggr / fused,
                                             e_track, e_sim (SSIM, MSE), e_speed ─▶ out/signature.json, .csv

The raw copy is assessed too: it is the reference (no protection, e_speed = 1 since there is no
filter). Copies are assessed in parallel (``base.workers``); every attacker is seeded, so the
numbers do not depend on the number of workers.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import cv2
import numpy as np
import torch

from tasks.assess.attributes import (
    attribute_model,
    attribute_privacy,
    load_frame_set,
    train_attacker,
)
from tasks.assess.detection import (
    KINDS,
    BundledDetector,
    Detector,
    Kind,
    detection_rate,
    matched_patches,
    train_detector,
    window_box,
)
from tasks.assess.faces import crop
from tasks.assess.fusion import fused_pairs, ssim_groups
from tasks.assess.reid import (
    FaceRecognisers,
    identification_aggr,
    identification_fused,
    identification_ind,
    recognised_flags,
)
from tasks.assess.residual import residual_scores
from tasks.assess.similarity import mse_similarity, ssim
from tasks.assess.tracking import track_video
from tasks.assess.truth import VideoTruth, clips_of, load_truth, released
from tasks.core import stage_options as arg
from tasks.core.errors import PrivharError
from tasks.core.item_randomness import derive_seed
from tasks.core.manifest import (
    MANIFEST_NAME,
    attribute_names,
    copies_under,
    read_manifest,
    resolve_path,
)
from tasks.core.parallel import map_ordered, worker_count
from tasks.core.params import AssessParams, BaseParams
from tasks.core.scores import LEFT_COLUMNS, SIGNATURE_COLUMNS, frame_hit_rate, speed_score
from tasks.core.speed import read_speed
from tasks.core.storage import atomic_write_bytes
from tasks.core.tables import csv_bytes
from tasks.core.tracking import stage_run, stage_work
from tasks.people_finding.regions import expanded, warp_region
from tasks.video_models.clips import split_rows
from tasks.video_models.device import resolve_device

RAW = "raw"
ATTRIBUTE_SCORES = ("cmap_raw_attacker", "f1_raw_attacker", "cmap_adaptive", "f1_adaptive")
TRUTH_SCORES = SIGNATURE_COLUMNS[
    :10
]  # e_id, e_det, e_track: scored against annotated faces and bodies
log = logging.getLogger(__name__)


@dataclass
class RawAttackers:
    """Everything trained on raw training frames once, shared (pickled) by the workers."""

    names: list[str]
    attacker: dict[str, torch.Tensor]
    recognisers: FaceRecognisers | None  # None without annotated faces
    detectors: dict[str, Detector | BundledDetector]


def copy_name(folder: Path) -> str:
    """``data/anonymize/avatar`` → ``anonymize-avatar``: the key its trained model has in evaluate."""
    return f"{folder.parent.name}-{folder.name}"


def _frames_and_truth(
    rows: list[dict[str, Any]],
    clips: dict[str, np.ndarray],
    truths: dict[str, VideoTruth],
    kind: str,
    step: int,
) -> tuple[list[np.ndarray], list[list]]:
    frames, boxes = [], []
    for row in rows:
        truth = truths[row["video_id"]]
        per_frame = truth.faces if kind == "face" else truth.bodies
        for t in range(0, len(per_frame), step):
            frames.append(clips[row["video_id"]][t])
            boxes.append(per_frame[t])
    return frames, boxes


def train_raw_attackers(
    params: AssessParams,
    seed: int,
    rows: list[dict[str, Any]],
    raw: Path,
    clips: dict[str, np.ndarray],
    truths: dict[str, VideoTruth],
    device: str = "cpu",
) -> RawAttackers:
    names = attribute_names(rows) if any(key.startswith("attr_") for key in rows[0]) else []
    state: dict[str, torch.Tensor] = {}
    if names:
        data = load_frame_set(
            rows,
            raw,
            names,
            clips,
            size=tuple(params.attacker_size),
            every=params.attacker_frame_step,
        )
        state = train_attacker(
            data,
            epochs=params.attacker_epochs,
            batch_size=params.attacker_batch_size,
            learning_rate=params.attacker_learning_rate,
            seed=derive_seed(seed, "assess", "attacker", RAW),
            desc="attribute attacker (raw)",
            device=device,
        ).state_dict()
    faces, identities = [], []
    if not truths:  # real footage without annotations: no face or body boxes to train or score on
        return RawAttackers(names, state, None, {})
    for row in rows:
        found = truths[row["video_id"]].occurrences
        for occurrence in found[:: max(1, len(found) // params.faces_per_video)][
            : params.faces_per_video
        ]:
            faces.append(crop(clips[row["video_id"]][occurrence.frame], occurrence.box))
            identities.append(occurrence.identity)
    detectors: dict[str, Detector | BundledDetector] = {}
    for name, kind in KINDS.items():
        if params.detector == "opencv":
            detectors[name] = BundledDetector(kind)
            continue
        frames, boxes = _frames_and_truth(
            rows, clips, truths, name, params.detector_training_frame_step
        )
        detectors[name] = train_detector(
            kind, frames, boxes, seed=derive_seed(seed, "assess", "detector", name)
        )
    return RawAttackers(names, state, FaceRecognisers(faces, identities), detectors)


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
    """The identity of each true box, frame by frame, in the order of _frames_and_truth."""
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
    }
    covered = [
        float(row["coverage"])
        for row in test_copy
        if row.get("coverage") is not None and np.isfinite(row["coverage"])
    ]
    scores["coverage"] = float(np.mean(covered)) if covered else None
    scores["quarantined"] = held_test + held_train
    manifest = read_manifest(folder / MANIFEST_NAME)
    scores["no_avatar"] = no_avatar(manifest)
    scores["public_pixels"] = public_pixels(manifest)
    scores["unchanged"] = unchanged_clips(manifest)

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
    # what is left: detectors re-run on protected frames (avatar pixels excluded)
    picked = np.unique(
        np.linspace(0, len(test_rows) - 1, min(params.residual_videos, len(test_rows))).astype(int)
    )
    videos = [test_rows[index]["video_id"] for index in picked]
    public = {row["video_id"]: _public_mask(row, folder) for row in test_copy}
    scores.update(
        residual_scores(
            raw_clips,
            test_clips,
            public,
            videos,
            params.detection_frame_step,
            {video: truths[video].faces for video in videos if video in truths} if truths else None,
        )
    )

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
        train_set = load_frame_set(
            train_rows,
            raw,
            attackers.names,
            clips_of(train_rows, folder),
            size=size,
            every=params.attacker_frame_step,
        )
        adaptive_model = train_attacker(
            train_set,
            epochs=params.attacker_epochs,
            batch_size=params.attacker_batch_size,
            learning_rate=params.attacker_learning_rate,
            seed=derive_seed(seed, "assess", "attacker", name),
            desc=f"attribute attacker ({name})",
            device=device,
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
        frames, boxes = _frames_and_truth(
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


@stage_work
def assess(
    *,
    base: BaseParams,
    params: AssessParams,
    frames: Annotated[
        Path,
        arg.folder("Folder of the decoded (raw) clips with their annotations: the ground truth."),
    ],
    copies: arg.Copies,
    speeds: Annotated[
        Path, arg.folder("Folder of the protecting stages' <copy>.json (measured frames/s).")
    ],
    out: Annotated[Path, arg.folder("Where to write signature.json and signature.csv.", "output")],
) -> list[dict[str, Any]]:
    """Assess the raw copy and every protected copy under ``copies``; write ``out/signature.json`` and ``.csv``."""
    rows = read_manifest(frames / MANIFEST_NAME)
    train_rows, test_rows = split_rows(rows, "train"), split_rows(rows, "test")
    if not train_rows or not test_rows:
        raise PrivharError(
            f"{frames / MANIFEST_NAME}: assess needs videos in both splits "
            f"(train {len(train_rows)}, test {len(test_rows)})"
        )
    found = copies_under(copies)
    if not found:
        raise PrivharError(
            f"assess: no protected copy (a folder with {MANIFEST_NAME}) under {', '.join(map(str, copies))}"
        )
    # real footage has no annotations: e_id / e_det / e_track are then not measured, the residual detections are
    truths = (
        {row["video_id"]: load_truth(row, frames) for row in rows}
        if any(row.get("annotations") for row in rows)
        else {}
    )
    with stage_run("assess", {"base": base, "assess": params}) as run:
        if not any(key.startswith("attr_") for key in rows[0]):
            log.info(
                "assess: %s has no attr_* columns (data.attributes): attribute cMAP / F1 not measured",
                frames / MANIFEST_NAME,
            )
        if not truths:
            log.info(
                "assess: no face / body annotations: e_id, e_det and e_track not measured (residual detections are)"
            )
        log.info("assess: training the raw attackers on %d videos", len(train_rows))
        device = str(resolve_device(base.device))  # the attribute attackers train there
        attackers = train_raw_attackers(
            params, base.seed, train_rows, frames, clips_of(train_rows, frames), truths, device
        )
        work = partial(
            assess_copy,
            raw=frames,
            train_rows=train_rows,
            test_rows=test_rows,
            truths=truths,
            attackers=attackers,
            params=params,
            seed=base.seed,
            speeds=speeds,
            device=device,
        )
        items = [(RAW, frames)] + [(copy_name(folder), folder) for folder in found]
        results = map_ordered(work, items, workers=worker_count(base.workers), desc="assess copies")
        columns = [
            "copy",
            *ATTRIBUTE_SCORES,
            *SIGNATURE_COLUMNS,
            *LEFT_COLUMNS,
            "frames_per_second",
            "face_occurrences",
            "folder",
        ]
        table = [{key: _rounded(result.get(key)) for key in columns} for result in results]
        atomic_write_bytes(out / "signature.csv", csv_bytes(table, columns))
        # every copy's scores as one table on the run, not a metric key per copy and score: the report's run has a
        # run per row with its attack scores under plain names
        run.log_artifact(out / "signature.csv")
        metrics = {
            row["copy"]: {
                key: row[key] for key in (*ATTRIBUTE_SCORES, *SIGNATURE_COLUMNS, *LEFT_COLUMNS)
            }
            for row in table
        }
        atomic_write_bytes(
            out / "signature.json", (json.dumps(metrics, indent=2, sort_keys=True) + "\n").encode()
        )
        for result in results:
            log.info(
                "assess: %s: cMAP %s (adaptive %s), e_id %s/%s/%s, e_det face %s body %s, e_track %s, SSIM %.3f, "
                "e_speed %.3f; left: coverage %s, %d quarantined, %s without an avatar, %.2f people and %.2f faces found per frame, "
                "%.3f of the person pixels (%.0f s)",
                result["copy"],
                *(
                    _text(result[key])
                    for key in (
                        "cmap_raw_attacker",
                        "cmap_adaptive",
                        "e_id_ind",
                        "e_id_aggr",
                        "e_id_fused",
                        "e_det_face_ind",
                        "e_det_body_ind",
                        "e_track",
                    )
                ),
                result["e_sim_ssim"],
                result["e_speed"],
                _text(result["coverage"]),
                result["quarantined"],
                "n/a" if result["no_avatar"] is None else result["no_avatar"],
                result["residual_people"],
                result["residual_faces"],
                result["residual_pixels"],
                result["assess_seconds"],
            )
    return results


def _text(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3f}"


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) and np.isfinite(value) else value
