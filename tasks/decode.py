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
import time
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pyarrow as pa

from tasks.core import stage_options as arg
from tasks.core.errors import PrivharError
from tasks.core.manifest import (
    MANIFEST_NAME,
    QUARANTINE_NAME,
    read_manifest,
    resolve_path,
    write_manifest,
    write_table,
)
from tasks.core.parallel import map_ordered, worker_count
from tasks.core.params import BaseParams, DecodeParams
from tasks.core.storage import atomic_directory, save_arrays, save_frames
from tasks.core.tracking import stage_run, stage_work
from tasks.video_data.video_reading import Geometry, Quarantined, read_video, resample_indices

LOG = logging.getLogger(__name__)

QUARANTINE_SCHEMA = pa.schema(
    [("video_id", pa.string()), ("path", pa.string()), ("reason", pa.string())]
)


def transform_annotations(
    annotations: dict[str, np.ndarray], indices: np.ndarray, geometry: Geometry
) -> dict[str, np.ndarray]:
    """Carry ground truth through the same frame selection and geometry as the pixels."""
    masks, boxes, skeleton = geometry.annotations(
        annotations["person_mask"][indices],
        {name: annotations[name][indices] for name in ("body_box", "face_box")},
        annotations["skeleton"][indices],
    )
    out = {
        "person_mask": masks,
        "face_visible": annotations["face_visible"][indices],
        "identity": annotations["identity"],
        "skeleton": skeleton,
    }
    # depth is along the camera axis: the image geometry leaves it alone
    if "joint_depth" in annotations:
        out["joint_depth"] = annotations["joint_depth"][indices]
    limits = np.array(
        [geometry.target[1], geometry.target[0], geometry.target[1], geometry.target[0]], np.float32
    )
    for name, value in boxes.items():
        out[name] = np.clip(value, 0, limits)
    return out


def decode_one(
    row: dict[str, Any], *, params: DecodeParams, source_folder: Path, out: Path, workdir: Path
) -> dict[str, Any]:
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
    decoded = {
        **row,
        "path": f"frames/{row['video_id']}.npy",
        "n_frames": params.frames,
        "fps": float(params.fps),
        "height": target[0],
        "width": target[1],
        "source_path": str(path),
        "source_frames": int(len(frames)),
        "source_fps": float(fps),
    }
    if row.get("annotations"):
        with np.load(workdir / resolve_path(row["annotations"], source_folder)) as stored:
            annotations = transform_annotations(dict(stored), indices, geometry)
        save_arrays(out / "annotations" / f"{row['video_id']}.npz", **annotations)
        decoded["annotations"] = f"annotations/{row['video_id']}.npz"
    return decoded


@stage_work
def decode(
    *,
    base: BaseParams,
    params: DecodeParams,
    source: Annotated[
        Path, arg.folder("Folder of the source manifest (the synthesize stage's output).")
    ],
    out: Annotated[
        Path, arg.folder("Where to write the decoded clips and their manifest.", "output")
    ],
    run_name: Annotated[
        str, arg.value("The stage's MLflow run name (decode-public for the public set).")
    ] = "decode",
) -> list[dict[str, Any]]:
    """Run the stage on the manifest in folder ``source``; return the decoded rows (logged as MLflow run ``run_name``).
    ``params``: the decode section as :func:`tasks.core.params_files.load_decode` gives it (a zoo backbone's clip)."""
    rows = read_manifest(source / MANIFEST_NAME)
    with (
        stage_run(run_name, {"base": base, "decode": params}) as run,
        atomic_directory(out) as staging,
    ):
        (staging / "frames").mkdir()
        (staging / "annotations").mkdir()
        started = time.perf_counter()
        work = partial(
            decode_one, params=params, source_folder=source, out=staging, workdir=Path.cwd()
        )
        results = map_ordered(work, rows, workers=worker_count(base.workers), desc="decode")
        seconds = time.perf_counter() - started
        decoded = [result for result in results if "reason" not in result]
        failed = [result for result in results if "reason" in result]
        failed_fraction = len(failed) / len(results)
        if failed_fraction > params.max_failed_fraction:
            example = failed[0]
            raise PrivharError(
                f"decode: {len(failed)} of {len(results)} videos failed ({failed_fraction:.0%} > "
                f"decode.max_failed_fraction = {params.max_failed_fraction}); first: {example['path']}: {example['reason']}"
            )
        for item in failed:
            LOG.info(f"decode: quarantined {item['path']}: {item['reason']}")
        write_table(failed, staging / QUARANTINE_NAME, schema=QUARANTINE_SCHEMA)
        write_manifest(decoded, staging / MANIFEST_NAME)
        source_frames = sum(row["source_frames"] for row in decoded)
        speed = {
            "videos": len(decoded),
            "quarantined": len(failed),
            "decode_seconds": seconds,
            "source_frames_per_second": source_frames / seconds,
            "videos_per_second": len(results) / seconds,
        }
        run.log_summary(speed)
        LOG.info(
            f"decode: {len(decoded)} videos, {len(failed)} quarantined, {speed['source_frames_per_second']:.0f} source frames/s"
        )
    return decoded
