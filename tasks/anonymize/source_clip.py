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
from typing import Any, Protocol

import cv2
import numpy as np

from tasks.core.errors import PrivharError
from tasks.core.params import DecodeParams


class Mapping(Protocol):
    """Frames and points from the searched size to the output size: decode's :class:`Geometry` or :class:`Upscale`."""

    def frames(self, clip: np.ndarray) -> np.ndarray: ...

    def points(self, xy: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class Upscale:
    """A detection copy's finds mapped back up to the frames it was made from (``privhar protect``): decode's
    resize-to-cover and centre crop, on OpenCV instead of torchvision, one frame at a time. Bilinear, so a mask's
    ``> 0`` marks every output pixel a searched pixel reaches (failing closed, as :class:`Geometry`'s); torch's import
    alone took 3.5 s of each ``privhar protect``'s start."""

    source: tuple[int, int]  # (h, w) searched
    target: tuple[int, int]  # (h, w) of the frames

    @property
    def ratio(self) -> float:
        return max(self.target[0] / self.source[0], self.target[1] / self.source[1])

    @property
    def size(self) -> tuple[int, int]:
        return (
            max(self.target[0], round(self.source[0] * self.ratio)),
            max(self.target[1], round(self.source[1] * self.ratio)),
        )

    @property
    def crop(self) -> tuple[int, int]:
        return round((self.size[0] - self.target[0]) / 2.0), round(
            (self.size[1] - self.target[1]) / 2.0
        )

    def frames(self, clip: np.ndarray) -> np.ndarray:
        """(T, h, w[, C]) uint8 frames or float masks → (T, H, W[, C]), each frame resized then cropped.

        >>> mask = np.zeros((1, 2, 2), np.float32); mask[0, 0, 0] = 1
        >>> (Upscale((2, 2), (4, 4)).frames(mask)[0] > 0).astype(int).tolist()
        [[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]]
        """
        (top, left), (height, width) = self.crop, self.target
        return np.stack(
            [
                cv2.resize(frame, self.size[::-1], interpolation=cv2.INTER_LINEAR).reshape(
                    *self.size, *frame.shape[2:]
                )[top : top + height, left : left + width]
                for frame in clip
            ]
        )

    def points(self, xy: np.ndarray) -> np.ndarray:
        """Points (..., 2) in searched pixels → frame pixels (torchvision's keypoint resize, then the crop)."""
        (top, left), (height, width) = self.crop, self.size
        scale = np.array([width / self.source[1], height / self.source[0]], np.float32)
        return (xy.astype(np.float32) * scale - np.array([left, top], np.float32)).astype(
            np.float32
        )


@dataclass(frozen=True)
class SourceClip:
    """Every source frame, the ones decode kept, and decode's geometry (None: the frames are the decoded ones)."""

    frames: np.ndarray
    picked: np.ndarray
    fps: float
    geometry: Mapping | None
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
        # a frame at a time into one array: float copies of a whole 4K stretch took 4 GB (issue 82)
        out = np.empty((len(masks), *self.target), bool)
        for index, mask in enumerate(masks):
            out[index] = (
                self.geometry.frames(mask[None, ..., None].astype(np.float32))[0, ..., 0] > 0
            )
        return out

    def points_down(self, xy: np.ndarray) -> np.ndarray:
        """Points (..., 2) in source pixels → decoded pixels (NaN stays NaN)."""
        return xy.astype(np.float32) if self.geometry is None else self.geometry.points(xy)


def source_clip(
    row: dict[str, Any], decoded: np.ndarray, decode: DecodeParams, workdir: Path
) -> SourceClip:
    """The clip's source frames as decode selected them, or one line naming the video when its source is gone."""
    from tasks.video_data.video_reading import Geometry, Quarantined, read_video, resample_indices

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
