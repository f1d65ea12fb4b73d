"""Ground truth of the raw videos (face boxes, body boxes, identities) and the protected frames beside it.

A protected copy keeps each person where they were, so the raw annotations are the ground truth
𝒢𝒯 of paper 004 for every copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tasks.assess.faces import Occurrence, occurrences
from tasks.core.errors import PrivharError
from tasks.core.manifest import MANIFEST_NAME, quarantined, read_manifest, resolve_path
from tasks.core.storage import load_frames

Box = tuple[float, float, float, float]
REQUIRED = ("face_box", "face_visible", "body_box", "identity")


@dataclass(frozen=True)
class VideoTruth:
    video: str
    faces: list[list[Box]]  # per frame, the visible faces
    bodies: list[list[Box]]  # per frame, every person's body
    occurrences: list[Occurrence]  # the visible faces, with identities


def load_truth(row: dict[str, Any], raw: Path) -> VideoTruth:
    """The annotations of one raw manifest row; one line naming the file if they cannot serve."""
    if not row.get("annotations"):
        raise PrivharError(
            f"{raw / MANIFEST_NAME}: video {row['video_id']} has no annotations; assess needs face and "
            f"body boxes with identities (the synthetic dataset writes them)"
        )
    path = resolve_path(row["annotations"], raw)
    with np.load(path) as stored:
        missing = [key for key in REQUIRED if key not in stored]
        if missing:
            raise PrivharError(
                f"{path}: no {', '.join(missing)}; assess needs {', '.join(REQUIRED)}"
            )
        arrays = {key: stored[key] for key in REQUIRED}
    frames = arrays["body_box"].shape[0]
    faces = [
        [
            tuple(map(float, arrays["face_box"][t, p]))
            for p in range(arrays["face_box"].shape[1])
            if arrays["face_visible"][t, p]
        ]
        for t in range(frames)
    ]
    bodies = [[tuple(map(float, box)) for box in arrays["body_box"][t]] for t in range(frames)]
    return VideoTruth(row["video_id"], faces, bodies, occurrences(row["video_id"], arrays))


def clip_paths(folder: Path) -> dict[str, Path]:
    """video_id → clip file of a decoded or protected copy."""
    manifest = folder / MANIFEST_NAME
    if not manifest.is_file():
        raise PrivharError(f"{manifest}: not found; expected a decoded or protected copy")
    return {row["video_id"]: resolve_path(row["path"], folder) for row in read_manifest(manifest)}


def released(
    rows: list[dict[str, Any]], folder: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """(rows the copy released, its manifest rows of them, how many of ``rows`` it quarantined): a clip the anonymize stage quarantined (its
    ``quarantine.parquet``) is not released, so no attacker sees it; any other missing clip is an error."""
    manifest = folder / MANIFEST_NAME
    if not manifest.is_file():
        raise PrivharError(f"{manifest}: not found; expected a decoded or protected copy")
    copy = {row["video_id"]: row for row in read_manifest(manifest)}
    held = quarantined(folder)
    missing = [
        row["video_id"]
        for row in rows
        if row["video_id"] not in copy and row["video_id"] not in held
    ]
    if missing:
        raise PrivharError(
            f"{manifest}: {len(missing)} videos of the raw manifest are missing and not quarantined "
            f"(first: {missing[0]}); a protected copy must hold every video"
        )
    kept = [row for row in rows if row["video_id"] in copy]
    return (
        kept,
        [copy[row["video_id"]] for row in kept],
        sum(row["video_id"] in held for row in rows),
    )


def clips_of(rows: list[dict[str, Any]], folder: Path) -> dict[str, np.ndarray]:
    """The clips of ``rows`` in the copy ``folder``; one line naming the copy if a video is missing."""
    paths = clip_paths(folder)
    missing = [row["video_id"] for row in rows if row["video_id"] not in paths]
    if missing:
        raise PrivharError(
            f"{folder / MANIFEST_NAME}: {len(missing)} videos of the raw manifest are missing "
            f"(first: {missing[0]}); a protected copy must hold every video"
        )
    return {row["video_id"]: load_frames(paths[row["video_id"]]) for row in rows}
