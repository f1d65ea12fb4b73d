"""The source video behind a decoded clip: people are found here, before the decode stage downsizes.

Small people of real footage (20-60 pixels at 320×240) are 8-25 pixels at the decoded 96×128:
below what any detector finds. So detectors run on the source frames the decode stage kept
(its own frame selection and resize-and-crop, :mod:`tasks.decode`), and their masks, boxes and
poses are mapped down. A mask is mapped down failing closed: a decoded pixel any source person
pixel falls in is a person pixel. A clip handed in already decoded (no ``source_path`` in its
manifest row) is searched at its own size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.errors import PrivharError
from tasks.core.params import DecodeParams
from tasks.core.video_reading import Geometry, Quarantined, read_video, resample_indices


@dataclass(frozen=True)
class SourceClip:
    """Every source frame, the ones decode kept, and decode's geometry (None: the frames are the decoded ones)."""

    frames: np.ndarray
    picked: np.ndarray
    fps: float
    geometry: Geometry | None
    target: tuple[int, int]
    output: np.ndarray | None = (
        None  # every frame at the output size, where the caller holds them already
    )

    @property
    def kept(self) -> np.ndarray:
        """The source frames the decoded clip shows, at source size."""
        return self.frames[self.picked]

    def decoded(self) -> np.ndarray:
        """Every source frame through decode's resize and crop (for the moving-pixel reference)."""
        if self.output is not None:
            return self.output
        if self.geometry is None:
            return self.frames
        return self.geometry.frames(self.frames)

    def mask_down(self, masks: np.ndarray) -> np.ndarray:
        """(T, H0, W0) bool at source size → (T, H, W) bool decoded, failing closed."""
        if self.geometry is None:
            return masks.astype(bool)
        return self.geometry.frames(masks.astype(np.float32)[..., None])[..., 0] > 0

    def points_down(self, xy: np.ndarray) -> np.ndarray:
        """Points (..., 2) in source pixels → decoded pixels (NaN stays NaN)."""
        return xy.astype(np.float32) if self.geometry is None else self.geometry.points(xy)


def source_clip(
    row: dict[str, Any], decoded: np.ndarray, decode: DecodeParams, workdir: Path
) -> SourceClip:
    """The clip's source frames as decode selected them, or one line naming the video when its source is gone."""
    target = (int(decoded.shape[1]), int(decoded.shape[2]))
    stored = row.get("source_path")
    if not stored:
        return SourceClip(
            decoded, np.arange(len(decoded)), float(row.get("fps") or decode.fps), None, target
        )
    path = workdir / stored
    try:
        frames, fps = read_video(path)
    except Quarantined as reason:
        raise PrivharError(
            f"anonymize: video {row['video_id']}: its source {path} cannot be read again ({reason}); "
            f"people are found on the source frames"
        ) from None
    picked = resample_indices(len(frames), fps, decode.fps, decode.frames, decode.short_videos)
    return SourceClip(frames, picked, fps, Geometry.fit(frames.shape[1:3], target), target)
