"""``privhar bench protect``: ``privhar protect``'s frames/s and faces found again, side by side with deface.

Each folder of real clips (one resolution each) goes through ``privhar protect`` once per method, on every core
(``--workers 0``), timed from the call to the last file renamed into place (this process's imports excluded, the
worker pool's start included); and, where a ``deface`` executable is given (installed for the benchmark only: it is
not a dependency), through deface 1.5 on the same files in one call (its start-up included). Then an independent
judge looks for faces in every ``JUDGE_EVERY``-th frame of every output: OpenCV's Haar cascade, which is not in
``protect``'s default finders, at :func:`tasks.core.opencv_detectors.judge_upscale`; a face it finds at the same place
in the raw frame (Dice > 0.5) counts as *found again*, and as *released* when the protection changed under half of
its box by more than :data:`tasks.anonymize.release.FACE_CHANGE_LEVELS` grey levels, as ``protect``'s own gate
judges it (both outputs are re-encoded). Not a test: the numbers
depend on the machine and the hour, so the record names both.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tasks.anonymize.coverage import changed
from tasks.anonymize.protect_video import VIDEO_FILES, Summary, protect_videos
from tasks.anonymize.release import FACE_CHANGE_LEVELS, PROTECTED_FACE_SHARE
from tasks.core.datasets import read_frames
from tasks.core.opencv_detectors import faces_found_again, fill_boxes, judge_upscale
from tasks.core.params import AnonymizeParams
from tasks.core.storage import atomic_write_bytes

JUDGE_EVERY = 4


def _videos(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.suffix.lower() in VIDEO_FILES)


def faces_again(raw: Path, protected: Path) -> tuple[int, int, int]:
    """(frames judged, frames with a face found again, frames with one released) of one protected video."""
    before = np.stack(read_frames(raw))[::JUDGE_EVERY]
    after = np.stack(read_frames(protected))[::JUDGE_EVERY]
    count = min(len(before), len(after))
    before, after = before[:count, : after.shape[1], : after.shape[2]], after[:count]
    found, released = 0, 0
    for t, box in faces_found_again(before, after, upscale=judge_upscale(before.shape[1])):
        found += 1
        inside = fill_boxes(before.shape[1:3], [box])
        moved = changed(before[t][None], after[t][None], FACE_CHANGE_LEVELS)[0]
        released += int(moved[inside].mean() < PROTECTED_FACE_SHARE)
    return count, found, released


def _judged(pairs: list[tuple[Path, Path]]) -> dict[str, int]:
    totals = np.sum([faces_again(raw, out) for raw, out in pairs], axis=0)
    return {
        "frames_judged": int(totals[0]),
        "faces_found_again": int(totals[1]),
        "faces_released": int(totals[2]),
    }


def _deface(executable: Path, videos: list[Path], scratch: Path) -> dict[str, Any]:
    copies = []
    for video in videos:
        copy = scratch / video.name
        shutil.copy(video, copy)
        copies.append(copy)
    started = time.perf_counter()
    subprocess.run([str(executable), *map(str, copies)], check=True, capture_output=True)
    seconds = time.perf_counter() - started
    outputs = [copy.with_name(f"{copy.stem}_anonymized{copy.suffix}") for copy in copies]
    return {"seconds": seconds, **_judged(list(zip(videos, outputs)))}


def run_bench(
    *,
    folders: list[Path],
    methods: list[str],
    params: AnonymizeParams,
    deface: Path | None,
    out: Path,
    **options: Any,
) -> dict[str, Any]:
    """Every folder through every method (and deface), judged; the record written to ``out`` (JSON) and returned."""
    record: dict[str, Any] = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "options": {key: str(value) for key, value in options.items()},
        "judge": f"OpenCV Haar on every {JUDGE_EVERY}th frame, changed = more than {FACE_CHANGE_LEVELS} grey levels",
        "folders": {},
    }
    for folder in folders:
        videos = _videos(folder)
        rows: dict[str, Any] = {}
        with tempfile.TemporaryDirectory(prefix="privhar-bench-protect-") as scratch:
            for method in methods:
                target = Path(scratch) / method
                started = time.perf_counter()
                results = protect_videos(
                    (folder,), target, params=params, workers=0, method=method, **options
                )
                seconds = time.perf_counter() - started
                done = [result for result in results if isinstance(result, Summary)]
                rows[method] = {
                    "seconds": seconds,
                    "frames": sum(summary.frames for summary in done),
                    "failed": [result for result in results if isinstance(result, str)],
                    "coverage_min": min(
                        (s.coverage_min for s in done if not np.isnan(s.coverage_min)),
                        default=None,
                    ),
                    "frame_share_changed": float(np.mean([s.covered_share for s in done])),
                    "stretches_black": sum(len(s.held_back) for s in done),
                    "frames_black": sum(s.held_back_frames for s in done),
                    "stretches": sum(s.stretches for s in done),
                    **_judged([(Path(s.input), Path(s.output)) for s in done]),
                }
            if deface is not None:
                (Path(scratch) / "deface").mkdir()
                rows["deface"] = _deface(deface, videos, Path(scratch) / "deface")
        frames = rows[methods[0]]["frames"] if methods else 0
        for row in rows.values():
            row["frames_per_second"] = frames / row["seconds"]
        sizes = {tuple(np.shape(read_frames(video)[0])[:2]) for video in videos[:1]}
        record["folders"][str(folder)] = {
            "videos": len(videos),
            "size": sorted(sizes),
            "rows": rows,
        }
    atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
    return record
