"""``privhar bench protect-memory``: the peak resident memory of ``privhar protect`` at large frame sizes (issue 82: a
4 s 4K video needed over 15 GB). A real clip is looped and resized to each size for ``seconds`` at ``fps``, and each
method protects it in a process of its own (``--workers 1``); the peak is that process's own (``os.wait4``'s
``ru_maxrss``), the figure docs/methods/anonymization.md states. A measurement, never a test's assertion."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import av
import cv2

from tasks.core.errors import PrivharError
from tasks.core.storage import atomic_write_bytes

SIZES = ((1080, 1920), (2160, 3840))  # (rows, columns): 1080p and 4K


def looped_clip(source: Path, size: tuple[int, int], seconds: float, fps: int, out: Path) -> Path:
    """``source``'s frames, looped and resized to ``size``, as ``seconds`` of H.264 at ``fps``."""
    with av.open(str(source)) as container:
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    if not frames:
        raise PrivharError(f"{source}: no decodable video frames")
    with av.open(str(out), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width, stream.pix_fmt = *size, "yuv420p"
        stream.options = {"preset": "ultrafast"}
        for index in range(round(seconds * fps)):
            picture = cv2.resize(frames[index % len(frames)], size[::-1])
            container.mux(stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
        container.mux(stream.encode())
    return out


def peak_memory(command: list[str]) -> tuple[float, int]:
    """(seconds, peak resident bytes) of ``command``'s own process."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    errors = process.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise PrivharError(f"{command[0]} failed: {errors.strip().splitlines()[-1:]}")
    return time.perf_counter() - started, usage.ru_maxrss * 1024  # Linux counts kilobytes


def run_memory_bench(
    source: Path,
    methods: list[str],
    out: Path,
    *,
    sizes: tuple[tuple[int, int], ...] = SIZES,
    seconds: float = 4.0,
    fps: int = 30,
    detectors: str | None = None,
) -> dict[str, Any]:
    """Peak memory of each method at each size; the record is written to ``out``."""
    privhar = str(Path(sys.executable).with_name("privhar"))
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="privhar-memory-") as scratch:
        for height, width in sizes:
            clip = looped_clip(
                source, (height, width), seconds, fps, Path(scratch) / f"{width}x{height}.mp4"
            )
            for method in methods:
                command = [
                    privhar,
                    "protect",
                    str(clip),
                    "-o",
                    str(Path(scratch) / f"{method}.mp4"),
                ]
                command += ["--method", method, "--workers", "1"]
                command += ["--detectors", detectors] if detectors else []
                spent, peak = peak_memory(command)
                rows.setdefault(f"{width}x{height}", {})[method] = {
                    "peak_gb": round(peak / 1e9, 3),
                    "seconds": round(spent, 1),
                }
    record = {
        "machine": {"cpu": platform.machine(), "cores": os.cpu_count()},
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "clip": f"{Path(source).name} looped, {seconds:g} s at {fps} frames/s",
        "measured": "peak resident memory of privhar protect --workers 1 (os.wait4 ru_maxrss), its own process",
        "sizes": rows,
    }
    atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
    return record
