"""``privhar bench protect``: ``privhar protect``'s frames/s, faces released and frame share changed, beside deface.

Each folder of real clips goes through ``privhar protect`` once per method, as a user runs it: the command in a
subprocess at its defaults (one video at a time, on every core through OpenCV's and mediapipe's threads), timed from
its start to its exit (start-up and imports included); and, where a ``deface`` executable is given (installed in its
own venv for the benchmark only), through deface 1.5 on the same files in one call, timed alike. Methods and deface alternate on each folder in the same minutes.

Then every output is judged on every ``JUDGE_EVERY``-th frame, the same way for privhar and deface:

- *faces released*: the independent judge (:mod:`benchmarks.face_judge`, MTCNN: in neither privhar's finder or gate
  nor deface) finds a face in the output at the place of a face it finds in the raw frame (Dice > 0.5) and the
  pixels in that box moved by less than ``RELEASED_LEVELS`` grey levels on average;
- *raw faces*: judged frames where the judge finds a face in the raw frame (what could have been released);
- *frame changed*: the share of each frame's pixels moved by more than ``FACE_CHANGE_LEVELS`` (re-encoding moves every
  pixel by a few), against the *people's share*, the pixels mediapipe's selfie segmenter calls person in the raw frame;
  a clip is *over-masked* when people cover under a quarter of its frames and more than twice their share changed;
- *black frames*: output frames left all but black (the gate's verdict, or a method that removed everything).

Not a test: the numbers depend on the machine and the hour, so the record names both.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.face_judge import judge_faces
from tasks.anonymize.coverage import changed
from tasks.anonymize.frame_protector import black
from tasks.anonymize.protect_video import VIDEO_FILES
from tasks.anonymize.release import FACE_CHANGE_LEVELS
from tasks.core.scores import matches
from tasks.core.storage import atomic_write_bytes
from tasks.video_data.datasets import read_frames

JUDGE_EVERY = 5
RELEASED_LEVELS = (
    10.0  # a face whose box moved less than this on average is recognisable (issue 81's rule)
)
OVER_MASKED = 2.0  # frame share changed against the people's share
CROWDED = (
    0.25  # clips where people cover more than this of the frame are not judged for over-masking
)


def _videos(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.suffix.lower() in VIDEO_FILES)


def _sampled(path: Path) -> np.ndarray:
    return np.stack(read_frames(path))[::JUDGE_EVERY]


def raw_truth(video: Path) -> dict[str, Any]:
    """What the judge and the segmenter see in the raw clip's judged frames (computed once a clip)."""
    from tasks.anonymize.detector import segment_people

    frames = _sampled(video)
    return {
        "frames": frames,
        "faces": judge_faces(frames),
        "people_share": float(segment_people(frames).mean()),
    }


def judge_output(raw: dict[str, Any], output: Path) -> dict[str, Any]:
    """One protected clip against its raw truth."""
    after = _sampled(output)
    before = raw["frames"]
    count = min(len(before), len(after))
    before, after = before[:count, : after.shape[1], : after.shape[2]], after[:count]
    return {
        "frames_judged": count,
        "raw_face_frames": sum(1 for faces in raw["faces"][:count] if faces),
        "faces_released": len(released_faces(before, raw["faces"][:count], after)),
        "frame_share_changed": float(changed(before, after, FACE_CHANGE_LEVELS).mean()),
        "people_share": raw["people_share"],
        "black_frames": int(black(after).sum()),
    }


def released_faces(
    before: np.ndarray, raw_faces: list[list[Any]], after: np.ndarray
) -> list[tuple[int, tuple[float, ...]]]:
    """(frame, box) of the frames of ``after`` where the judge finds a face at the place of one it found in the raw
    frame (``before``) whose pixels moved by less than ``RELEASED_LEVELS`` on average."""
    released = []
    for t, found in enumerate(judge_faces(after)):
        for box in found:
            if not any(matches(old, box) for old in raw_faces[t]):
                continue
            x0, y0 = max(0, int(box[0])), max(0, int(box[1]))
            x1, y1 = int(np.ceil(box[2])), int(np.ceil(box[3]))
            region = (slice(y0, y1), slice(x0, x1))
            moved = np.abs(before[t][region].astype(np.int16) - after[t][region]).mean()
            if moved < RELEASED_LEVELS:
                released.append((t, box))
                break
    return released


def _totals(clips: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rows = list(clips.values())
    over = [
        name
        for name, row in clips.items()
        if row["people_share"] < CROWDED
        and row["frame_share_changed"] > OVER_MASKED * max(row["people_share"], 1e-9)
    ]
    return {
        "frames_judged": sum(row["frames_judged"] for row in rows),
        "raw_face_frames": sum(row["raw_face_frames"] for row in rows),
        "faces_released": sum(row["faces_released"] for row in rows),
        "black_frames_judged": sum(row["black_frames"] for row in rows),
        "frame_share_changed": float(np.mean([row["frame_share_changed"] for row in rows])),
        "people_share": float(np.mean([row["people_share"] for row in rows])),
        "over_masked_clips": over,
    }


def _timed(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed: {done.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - started


def _privhar(
    folder: Path, target: Path, method: str, params_path: Path, options: dict[str, Any]
) -> float:
    command = [str(Path(sys.executable).with_name("privhar")), "protect", str(folder)]
    command += ["-o", str(target), "--method", method, "--params", str(params_path)]
    for name, value in options.items():
        command += [f"--{name.replace('_', '-')}", str(value)]
    return _timed(command)


def _deface(executable: Path, videos: list[Path], scratch: Path) -> tuple[float, list[Path]]:
    copies = []
    for video in videos:
        copy = scratch / video.name
        shutil.copy(video, copy)
        copies.append(copy)
    seconds = _timed([str(executable), *map(str, copies)])
    return seconds, [copy.with_name(f"{copy.stem}_anonymized{copy.suffix}") for copy in copies]


def _named(folder: Path) -> str:
    """A folder as the record names it: relative to the project, or by its name outside it (issue 82: the committed
    record carried the absolute paths of the machine that ran it)."""
    folder, project = Path(folder).resolve(), Path.cwd().resolve()
    return str(folder.relative_to(project)) if folder.is_relative_to(project) else folder.name


def run_bench(
    *,
    folders: list[Path],
    methods: list[str],
    params_path: Path,
    deface: Path | None,
    out: Path,
    **options: Any,
) -> dict[str, Any]:
    """Every folder through every method (and deface), judged; the record written to ``out`` (JSON) and returned."""
    record: dict[str, Any] = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "options": {key: str(value) for key, value in options.items()},
        "judge": f"MTCNN (facenet-pytorch 2.6.0) on every {JUDGE_EVERY}th frame; released = found again at a raw "
        f"face's place, moved less than {RELEASED_LEVELS} grey levels on average",
        "folders": {},
    }
    for folder in folders:
        videos = _videos(folder)
        truth = {video.name: raw_truth(video) for video in videos}
        frames = sum(len(read_frames(video)) for video in videos)
        rows: dict[str, Any] = {}
        with tempfile.TemporaryDirectory(prefix="privhar-bench-protect-") as scratch:
            for method in methods:
                target = Path(scratch) / method
                seconds = _privhar(folder, target, method, params_path, options)
                outputs = {video.name: target / video.relative_to(folder) for video in videos}
                clips = {name: judge_output(truth[name], path) for name, path in outputs.items()}
                rows[method] = {"seconds": seconds, **_totals(clips), "clips": clips}
                if deface is not None and "deface" not in rows:
                    (Path(scratch) / "deface").mkdir()
                    seconds, made = _deface(deface, videos, Path(scratch) / "deface")
                    clips = {
                        video.name: judge_output(truth[video.name], path)
                        for video, path in zip(videos, made)
                    }
                    rows["deface"] = {"seconds": seconds, **_totals(clips), "clips": clips}
        for row in rows.values():
            row["frames_per_second"] = frames / row["seconds"]
        sizes = sorted({tuple(int(v) for v in truth[v.name]["frames"].shape[1:3]) for v in videos})
        record["folders"][_named(folder)] = {
            "videos": len(videos),
            "frames": frames,
            "sizes": sizes,
            "rows": rows,
        }
    atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
    return record
