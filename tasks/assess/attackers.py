"""The raw attackers of the assess stage, trained once on the raw training frames and shared by the workers: the
attribute classifier (paper 000 §4.3), the face recognisers and the detectors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tasks.assess.attributes import load_frame_set, train_attacker
from tasks.assess.detection import (
    KINDS,
    BundledDetector,
    Detector,
    train_detector,
)
from tasks.assess.faces import crop
from tasks.assess.reid import FaceRecognisers
from tasks.assess.truth import VideoTruth
from tasks.core.item_randomness import derive_seed
from tasks.core.manifest import attribute_names
from tasks.core.params import AssessParams

RAW = "raw"  # the copy of raw frames: what every attacker trains on and every copy is compared with


@dataclass
class RawAttackers:
    """Everything trained on raw training frames once, shared (pickled) by the workers."""

    names: list[str]
    attacker: dict[str, torch.Tensor]
    recognisers: FaceRecognisers | None  # None without annotated faces
    detectors: dict[str, Detector | BundledDetector]


def frames_and_truth(
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


def copy_attacker(
    rows: list[dict[str, Any]],
    raw: Path,
    names: list[str],
    clips: dict[str, np.ndarray],
    copy: str,
    params: AssessParams,
    seed: int,
    device: str,
) -> torch.nn.Module:
    """The attribute attacker trained on the training frames ``clips`` of one copy (the raw one: the raw attacker;
    a protected one: its adaptive attacker)."""
    data = load_frame_set(
        rows,
        raw,
        names,
        clips,
        size=tuple(params.attacker_size),
        every=params.attacker_frame_step,
    )
    return train_attacker(
        data,
        epochs=params.attacker_epochs,
        batch_size=params.attacker_batch_size,
        learning_rate=params.attacker_learning_rate,
        seed=derive_seed(seed, "assess", "attacker", copy),
        desc=f"attribute attacker ({copy})",
        device=device,
    )


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
        state = copy_attacker(rows, raw, names, clips, RAW, params, seed, device).state_dict()
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
        frames, boxes = frames_and_truth(
            rows, clips, truths, name, params.detector_training_frame_step
        )
        detectors[name] = train_detector(
            kind, frames, boxes, seed=derive_seed(seed, "assess", "detector", name)
        )
    return RawAttackers(names, state, FaceRecognisers(faces, identities), detectors)
