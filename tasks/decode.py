"""Stage ``decode``: source videos -> fixed-size, fixed-rate clips stored losslessly.

    source manifest ─▶ EncodedVideo (pytorchvideo, PyAV) ─▶ resample to decode.fps
      ─▶ keep decode.frames (loop or pad short videos) ─▶ resize + centre crop to decode.frame_size
      ─▶ frames/<id>.npy (T, H, W, 3) uint8 RGB  [+ annotations/<id>.npz carried along]

Resampling assumes a constant frame rate: output frame j shows the source frame shown at
time j / decode.fps. Resizing keeps the aspect ratio (scale to cover, crop the centre): one torchvision
``transforms.v2`` pipeline moves the frames and, as ``tv_tensors``, the masks (nearest neighbour), boxes and skeletons.

A file that is missing, empty, not a video, truncated or undecodable is quarantined with
its reason in ``quarantine.parquet`` and the stage goes on; if more than
``decode.max_failed_fraction`` of the videos fail, it stops with one line and writes nothing.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from tasks.core.datasets import probe, read_frames
from tasks.core.errors import PrivharError
from tasks.core.manifest import MANIFEST_NAME, QUARANTINE_NAME, read_manifest, resolve_path, write_manifest, write_table
from tasks.core.params import BaseParams, DecodeParams, load_section
from tasks.core.parallel import map_ordered, worker_count
from tasks.core.storage import atomic_directory, save_arrays, save_frames
from tasks.core.tracking import stage_run, stage_work

LOG = logging.getLogger(__name__)

TRUNCATION_TOLERANCE = 0.9  # fewer decoded frames than this share of the header's count = truncated
QUARANTINE_SCHEMA = pa.schema([("video_id", pa.string()), ("path", pa.string()), ("reason", pa.string())])


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
        scaled = (max(target[0], round(source[0] * scale)), max(target[1], round(source[1] * scale)))
        return cls((int(source[0]), int(source[1])), scaled, (int(target[0]), int(target[1])))

    @property
    def crop_x(self) -> int:
        return int(round((self.size[1] - self.target[1]) / 2.0))  # v2.CenterCrop's offset

    @property
    def crop_y(self) -> int:
        return int(round((self.size[0] - self.target[0]) / 2.0))

    def transform(self) -> v2.Compose:
        return v2.Compose([v2.Resize(list(self.size), antialias=True), v2.CenterCrop(list(self.target))])

    def frames(self, clip: np.ndarray) -> np.ndarray:
        """(T, H, W, C) → (T, h, w, C): uint8 frames, or float masks (antialiased: each output pixel weighs a footprint
        at least as wide as the area it covers, so ``> 0`` marks every pixel a source pixel falls in)."""
        video = tv_tensors.Video(torch.from_numpy(np.ascontiguousarray(clip)).permute(0, 3, 1, 2))
        return self.transform()(video).permute(0, 2, 3, 1).contiguous().numpy()

    def points(self, xy: np.ndarray) -> np.ndarray:
        """Points (..., 2) in source pixels → target pixels, not clamped (a joint may lie outside the frame)."""
        return self.transform()(self._keypoints(xy)).reshape(xy.shape).numpy()

    def _keypoints(self, xy: np.ndarray) -> tv_tensors.KeyPoints:
        return tv_tensors.KeyPoints(torch.from_numpy(np.ascontiguousarray(xy, np.float32)).reshape(-1, 2),
                                    canvas_size=self.source)

    def annotations(self, masks: np.ndarray, boxes: dict[str, np.ndarray], points: np.ndarray
                    ) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
        """Masks (T, H, W), boxes (..., 4) x0 y0 x1 y1 and points (..., 2), in one pass of the same transform."""
        sample = {"mask": tv_tensors.Mask(torch.from_numpy(np.ascontiguousarray(masks))),
                  "points": self._keypoints(points),
                  **{name: tv_tensors.BoundingBoxes(torch.from_numpy(np.ascontiguousarray(value, np.float32)).reshape(-1, 4),
                                                    format="XYXY", canvas_size=self.source) for name, value in boxes.items()}}
        out = self.transform()(sample)
        return (out["mask"].numpy(), {name: out[name].reshape(value.shape).numpy() for name, value in boxes.items()},
                out["points"].reshape(points.shape).numpy())


def resample_indices(n_source: int, source_fps: float, target_fps: float, frames: int, short_videos: str) -> np.ndarray:
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
        clip, duration = _decode_directly(path, f"not a readable video ({str(error).splitlines()[0][:120]})"), None
    if clip is None or clip.shape[1] == 0:
        raise Quarantined("no decodable video frames")
    frames = clip.permute(1, 2, 3, 0).to(dtype=torch.uint8).numpy()  # exact: the decoder's floats are whole 0..255
    if header["n_frames"] and len(frames) < TRUNCATION_TOLERANCE * header["n_frames"]:
        raise Quarantined(f"truncated: decoded {len(frames)} of the {header['n_frames']} frames its header announces")
    fps = header["fps"] or len(frames) / max(float(duration or 1.0), 1e-6)
    return frames, fps


def transform_annotations(annotations: dict[str, np.ndarray], indices: np.ndarray, geometry: Geometry) -> dict[str, np.ndarray]:
    """Carry ground truth through the same frame selection and geometry as the pixels."""
    masks, boxes, skeleton = geometry.annotations(annotations["person_mask"][indices],
                                                  {name: annotations[name][indices] for name in ("body_box", "face_box")},
                                                  annotations["skeleton"][indices])
    out = {"person_mask": masks, "face_visible": annotations["face_visible"][indices], "identity": annotations["identity"],
           "skeleton": skeleton}
    if "joint_depth" in annotations:  # depth is along the camera axis: the image geometry leaves it alone
        out["joint_depth"] = annotations["joint_depth"][indices]
    limits = np.array([geometry.target[1], geometry.target[0], geometry.target[1], geometry.target[0]], np.float32)
    for name, value in boxes.items():
        out[name] = np.clip(value, 0, limits)
    return out


def decode_one(row: dict[str, Any], *, params: DecodeParams, source_folder: Path, out: Path,
               workdir: Path) -> dict[str, Any]:
    """Decode one video; a manifest row, or a quarantine row (``reason``) if it is unusable.

    Paths are recorded as the stage was given them; files are read and written relative
    to ``workdir``, so a worker in another process or on another host finds them too.
    """
    path = resolve_path(row["path"], source_folder)
    out = workdir / out
    try:
        frames, fps = read_video(workdir / path)
    except Quarantined as reason:
        return {"video_id": row["video_id"], "path": str(path), "reason": str(reason)}
    target = (params.frame_size[0], params.frame_size[1])
    indices = resample_indices(len(frames), fps, params.fps, params.frames, params.short_videos)
    geometry = Geometry.fit(frames.shape[1:3], target)
    clip = geometry.frames(frames[indices])
    save_frames(out / "frames" / f"{row['video_id']}.npy", clip)
    decoded = {**row, "path": f"frames/{row['video_id']}.npy", "n_frames": params.frames, "fps": float(params.fps),
               "height": target[0], "width": target[1], "source_path": str(path),
               "source_frames": int(len(frames)), "source_fps": float(fps)}
    if row.get("annotations"):
        with np.load(workdir / resolve_path(row["annotations"], source_folder)) as stored:
            annotations = transform_annotations(dict(stored), indices, geometry)
        save_arrays(out / "annotations" / f"{row['video_id']}.npz", **annotations)
        decoded["annotations"] = f"annotations/{row['video_id']}.npz"
    return decoded


@stage_work
def decode(*, params_path: Path, source: Path, out: Path, run_name: str = "decode") -> list[dict[str, Any]]:
    """Run the stage on the manifest in folder ``source``; return the decoded rows (logged as MLflow run ``run_name``)."""
    base = load_section(params_path, "base", BaseParams)
    params = load_section(params_path, "decode", DecodeParams)
    rows = read_manifest(source / MANIFEST_NAME)
    with stage_run(run_name, {"base": base, "decode": params}) as run, atomic_directory(out) as staging:
        (staging / "frames").mkdir()
        (staging / "annotations").mkdir()
        started = time.perf_counter()
        work = partial(decode_one, params=params, source_folder=source, out=staging, workdir=Path.cwd())
        results = map_ordered(work, rows, workers=worker_count(base.workers), desc="decode")
        seconds = time.perf_counter() - started
        decoded = [result for result in results if "reason" not in result]
        failed = [result for result in results if "reason" in result]
        failed_fraction = len(failed) / len(results)
        if failed_fraction > params.max_failed_fraction:
            example = failed[0]
            raise PrivharError(f"decode: {len(failed)} of {len(results)} videos failed ({failed_fraction:.0%} > "
                               f"decode.max_failed_fraction = {params.max_failed_fraction}); first: {example['path']}: {example['reason']}")
        for item in failed:
            LOG.info(f"decode: quarantined {item['path']}: {item['reason']}")
        write_table(failed, staging / QUARANTINE_NAME, schema=QUARANTINE_SCHEMA)
        write_manifest(decoded, staging / MANIFEST_NAME)
        source_frames = sum(row["source_frames"] for row in decoded)
        speed = {"videos": len(decoded), "quarantined": len(failed), "decode_seconds": seconds,
                 "source_frames_per_second": source_frames / seconds, "videos_per_second": len(results) / seconds}
        run.log_metrics(speed)
        LOG.info(f"decode: {len(decoded)} videos, {len(failed)} quarantined, {speed['source_frames_per_second']:.0f} source frames/s")
    return decoded
