"""Scores of the assessment, each in [0, 1]: class-wise AP / F1 (paper 000 §4.3) and box hits (paper 004 eq. 20, 26).

cMAP and F1 are scikit-learn's; the tests check them against the definitions written out by hand. The box scores are
written from paper 004's equations.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Box = Sequence[float]  # x0, y0, x1, y1 in pixels

# paper 004's privacy-utility signature: the assess stage scores every copy by these, the report tabulates them
SIGNATURE_COLUMNS = (
    "e_id_ind",
    "e_id_aggr",
    "e_id_fused",
    "e_det_face_ind",
    "e_det_face_aggr",
    "e_det_face_fused",
    "e_det_body_ind",
    "e_det_body_aggr",
    "e_det_body_fused",
    "e_track",
    "e_sim_ssim",
    "e_sim_mse",
    "e_speed",
)
# detectors re-run on a protected copy: the people, faces and pixels they still find there
RESIDUAL_COLUMNS = (
    "residual_people",
    "residual_faces",
    "residual_pixels",
    "face_leak_frames",
    "face_leak_clips",
)
# what is left of people: the anonymize coverage check, clips held back or with no avatar drawn, the residuals
LEFT_COLUMNS = (
    "coverage",
    "quarantined",
    "no_avatar",
    "public_pixels",
    "unchanged",
    *RESIDUAL_COLUMNS,
)


def class_wise_map(labels: np.ndarray, scores: np.ndarray) -> float:
    """cMAP: the unweighted mean of per-attribute AP over the attributes with a positive (paper 000 §4.3), by
    scikit-learn's ``average_precision_score`` (tied scores form one threshold). scikit-learn is imported here, not
    at the top: the box scores below serve ``privhar protect``'s gate, whose every worker would pay its 1-4 s import."""
    from sklearn.metrics import average_precision_score

    labels = np.asarray(labels, dtype=bool)
    present = labels.any(axis=0)
    if not present.any():
        return float("nan")
    return float(
        average_precision_score(
            labels[:, present], np.asarray(scores, dtype=np.float64)[:, present], average="macro"
        )
    )


def class_wise_f1(labels: np.ndarray, predicted: np.ndarray) -> float:
    """Macro F1 over attributes (0 for an attribute with neither a positive nor a prediction), scikit-learn's."""
    from sklearn.metrics import f1_score

    return float(
        f1_score(
            np.asarray(labels, dtype=bool),
            np.asarray(predicted, dtype=bool),
            average="macro",
            zero_division=0,
        )
    )


def dice(first: Box, second: Box) -> float:
    """Sørensen-Dice coefficient of two boxes, 2|A∩B| / (|A| + |B|) (paper 004 eq. 26)."""
    width = max(0.0, min(first[2], second[2]) - max(first[0], second[0]))
    height = max(0.0, min(first[3], second[3]) - max(first[1], second[1]))
    areas = (first[2] - first[0]) * (first[3] - first[1]) + (second[2] - second[0]) * (
        second[3] - second[1]
    )
    return 2.0 * width * height / areas if areas > 0 else 0.0


def matches(first: Box, second: Box, threshold: float = 0.5) -> bool:
    """Paper 004's b_det ≈ b_gt: Dice above 0.5."""
    return dice(first, second) > threshold


def frame_hit_rate(found: Sequence[Box], truth: Sequence[Box]) -> float:
    """h of one frame (the algorithm under eq. 20): found boxes matching a true box, over the true boxes; 1 with none.

    Each true box is matched at most once: a second detection of the same object is not a second hit
    (as printed, h could exceed J — an overlapping pair of detections would count twice).
    """
    if not truth:
        return 1.0
    unmatched = list(truth)
    hits = 0
    for box in found:
        best = max(
            range(len(unmatched)), key=lambda index: dice(box, unmatched[index]), default=None
        )
        if best is not None and matches(box, unmatched[best]):
            hits += 1
            unmatched.pop(best)
    return hits / len(truth)


def speed_score(frames_per_second: float, target: float) -> float:
    """f_speed (paper 004 eq. 25) with the mean frame time: min(fps / τ, 1).

    Eq. 25 prints max(1 / (τ Δt), 1), which is never below 1; min keeps it in [0, 1], as the paper says e must be.
    """
    if target <= 0:
        raise ValueError("target speed must be positive")
    return float(min(frames_per_second / target, 1.0))
