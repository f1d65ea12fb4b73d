"""Reading a video file into frames, and the frame selection and geometry every clip goes through.

Below the stages: decode turns each source video into a clip with them, anonymize (:mod:`tasks.anonymize.source_clip`)
and the single-video Video-DPRP (:mod:`tasks.dprp.single_video`) read sources the same way. A file that cannot be
used raises :class:`Quarantined` with the reason the decode stage records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import tasks.torchvision_compat  # noqa: F401  (first: declares the operators torchvision needs here)

# isort: split
import av
import numpy as np
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from tasks.video_data.datasets import probe, read_frames

TRUNCATION_TOLERANCE = 0.9  # fewer decoded frames than this share of the header's count = truncated


class Quarantined(Exception):
    """A video this stage cannot use; the message is the reason recorded."""


@dataclass(frozen=True)
class Geometry:
    """Resize-to-cover then centre-crop, source (h, w) -> target (h, w), as one torchvision ``transforms.v2`` pipeline:
    frames (antialiased bilinear), masks (nearest), boxes and keypoints move together as ``tv_tensors``."""

    source: tuple[int, int]
    size: tuple[int, int]  # the covering size, before the crop
    target: tuple[int, int]

    @classmethod
    def fit(cls, source: tuple[int, int], target: tuple[int, int]) -> Geometry:
        scale = max(target[0] / source[0], target[1] / source[1])
        scaled = (
            max(target[0], round(source[0] * scale)),
            max(target[1], round(source[1] * scale)),
        )
        return cls((int(source[0]), int(source[1])), scaled, (int(target[0]), int(target[1])))

    @property
    def crop_x(self) -> int:
        return int(round((self.size[1] - self.target[1]) / 2.0))  # v2.CenterCrop's offset

    @property
    def crop_y(self) -> int:
        return int(round((self.size[0] - self.target[0]) / 2.0))

    def transform(self) -> v2.Compose:
        return v2.Compose(
            [v2.Resize(list(self.size), antialias=True), v2.CenterCrop(list(self.target))]
        )

    def frames(self, clip: np.ndarray) -> np.ndarray:
        """(T, H, W, C) → (T, h, w, C): uint8 frames, or float masks (antialiased: each output pixel weighs a footprint
        at least as wide as the area it covers, so ``> 0`` marks every pixel a source pixel falls in)."""
        video = tv_tensors.Video(torch.from_numpy(np.ascontiguousarray(clip)).permute(0, 3, 1, 2))
        return self.transform()(video).permute(0, 2, 3, 1).contiguous().numpy()

    def points(self, xy: np.ndarray) -> np.ndarray:
        """Points (..., 2) in source pixels → target pixels, not clamped (a joint may lie outside the frame)."""
        return self.transform()(self._keypoints(xy)).reshape(xy.shape).numpy()

    def _keypoints(self, xy: np.ndarray) -> tv_tensors.KeyPoints:
        return tv_tensors.KeyPoints(
            torch.from_numpy(np.ascontiguousarray(xy, np.float32)).reshape(-1, 2),
            canvas_size=self.source,
        )

    def annotations(
        self, masks: np.ndarray, boxes: dict[str, np.ndarray], points: np.ndarray
    ) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
        """Masks (T, H, W), boxes (..., 4) x0 y0 x1 y1 and points (..., 2), in one pass of the same transform."""
        sample = {
            "mask": tv_tensors.Mask(torch.from_numpy(np.ascontiguousarray(masks))),
            "points": self._keypoints(points),
            **{
                name: tv_tensors.BoundingBoxes(
                    torch.from_numpy(np.ascontiguousarray(value, np.float32)).reshape(-1, 4),
                    format="XYXY",
                    canvas_size=self.source,
                )
                for name, value in boxes.items()
            },
        }
        out = self.transform()(sample)
        return (
            out["mask"].numpy(),
            {name: out[name].reshape(value.shape).numpy() for name, value in boxes.items()},
            out["points"].reshape(points.shape).numpy(),
        )


def resample_indices(
    n_source: int, source_fps: float, target_fps: float, frames: int, short_videos: str
) -> np.ndarray:
    """Source frame index for each output frame.

    >>> resample_indices(48, 24.0, 8.0, 16, "loop").tolist()[:4]
    [0, 3, 6, 9]
    >>> resample_indices(6, 24.0, 8.0, 4, "loop").tolist()
    [0, 3, 0, 3]
    >>> resample_indices(6, 24.0, 8.0, 4, "pad").tolist()
    [0, 3, 3, 3]
    """
    available = max(1, math.floor(n_source * target_fps / source_fps + 1e-9))
    times = np.arange(min(frames, available)) / target_fps
    indices = np.minimum(np.floor(times * source_fps + 1e-6).astype(int), n_source - 1)
    if len(indices) < frames:
        if short_videos == "loop":
            indices = np.resize(indices, frames)
        else:
            indices = np.concatenate([indices, np.full(frames - len(indices), indices[-1])])
    return indices


def _decode_directly(path: Path, reason: str) -> torch.Tensor | None:
    """Every frame as EncodedVideo returns them, (3, T, H, W) float RGB, decoded by PyAV itself (None: no frame);
    :class:`Quarantined` with ``reason`` if PyAV cannot read it either."""
    try:
        frames = read_frames(path)
    except (av.FFmpegError, OSError, ValueError, IndexError):
        raise Quarantined(reason) from None
    return torch.from_numpy(np.stack(frames)).permute(3, 0, 1, 2).float() if frames else None


def read_video(path: Path) -> tuple[np.ndarray, float]:
    """All frames (T, H, W, 3) uint8 RGB and the frame rate; raises :class:`Quarantined`."""
    from pytorchvideo.data.encoded_video import EncodedVideo

    if not path.is_file():
        raise Quarantined("file not found")
    if path.stat().st_size == 0:
        raise Quarantined("empty file (0 bytes)")
    header = probe(path)
    try:
        video = EncodedVideo.from_path(str(path), decode_audio=False, decoder="pyav")
        duration = video.duration
        clip = video.get_clip(0, duration + 1.0)["video"] if duration is not None else None
        video.close()
    except (RuntimeError, ValueError, OSError) as error:
        # EncodedVideo's own av.open refuses metadata that is not UTF-8 (HMDB51 titles in Latin-1): PyAV directly,
        # metadata dropped; a file it cannot read either is quarantined with EncodedVideo's reason
        clip, duration = (
            _decode_directly(path, f"not a readable video ({str(error).splitlines()[0][:120]})"),
            None,
        )
    if clip is None or clip.shape[1] == 0:
        raise Quarantined("no decodable video frames")
    # exact: the decoder's floats are whole 0..255
    frames = clip.permute(1, 2, 3, 0).to(dtype=torch.uint8).numpy()
    if header["n_frames"] and len(frames) < TRUNCATION_TOLERANCE * header["n_frames"]:
        raise Quarantined(
            f"truncated: decoded {len(frames)} of the {header['n_frames']} frames its header announces"
        )
    fps = header["fps"] or len(frames) / max(float(duration or 1.0), 1e-6)
    return frames, fps
