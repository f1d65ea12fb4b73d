"""The video representation LDP encodes (paper 002 applied to video): each clip's person-centred motion image, and its
multi-hot attribute labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.errors import PrivharError
from tasks.core.manifest import MANIFEST_NAME, resolve_path
from tasks.core.storage import load_frames
from tasks.people_finding.regions import expanded, warp_region
from tasks.video_data.annotations import body_boxes


def motion_images(rows: list[dict[str, Any]], folder: Path, size: tuple[int, int]) -> np.ndarray:
    """(videos, h, w): per clip, the mean absolute difference of consecutive grey frames inside the person's box.

    The box is the union of the first person's body boxes over the clip, enlarged by 10 %, resampled to ``size``. A
    clip without annotations (real footage) has no box: its camera encodes the whole frame, as paper 002's cameras do.
    """
    images = []
    for row in rows:
        clip = load_frames(resolve_path(row["path"], folder))
        if not row.get("annotations"):
            images.append(
                _motion(clip, (0.0, 0.0, float(clip.shape[2]), float(clip.shape[1])), size)
            )
            continue
        every = body_boxes(row, folder)
        # the first person's box in each frame
        boxes = every[:, 0] if every.shape[1] else np.zeros((0, 4))
        if not len(boxes):
            raise PrivharError(
                f"{folder / MANIFEST_NAME}: video {row['video_id']} has no person box; the camera's crop needs one"
            )
        images.append(
            _motion(
                clip,
                expanded(
                    (boxes[:, 0].min(), boxes[:, 1].min(), boxes[:, 2].max(), boxes[:, 3].max()),
                    1.1,
                ),
                size,
            )
        )
    return np.stack(images)


def _motion(
    clip: np.ndarray, region: tuple[float, float, float, float], size: tuple[int, int]
) -> np.ndarray:
    """The mean absolute grey-frame difference of ``clip`` (T, H, W, 3) inside ``region``, at ``size`` (h, w)."""
    crops = (
        np.stack([warp_region(frame, region, (size[1], size[0])) for frame in clip]).astype(
            np.float32
        )
        / 255.0
    )
    return np.abs(np.diff(crops, axis=0)).mean(axis=0) * 10.0 if len(crops) > 1 else crops[0]


def video_labels(row: dict[str, Any], names: list[str]) -> np.ndarray:
    """The video-level attribute vector (face visible: in any frame, as the manifest column says)."""
    values = []
    for name in names:
        column, _, value = name.partition("=")
        values.append(str(row[column]) == value if value else bool(row[column]))
    return np.asarray(values, dtype=bool)
