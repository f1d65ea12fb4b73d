"""Cut one long camera recording into a UCF101-shaped folder, so privhar can read it as a dataset.

    recording.avi ─▶ <out>/<Action>/v_<Action>_g01_c<NN>.avi   (clips of ``seconds``, resized to ``size``)
                     <out>/classInd.txt, trainlist01.txt, testlist01.txt   (every ``test_every``-th clip is test)

A static home or surveillance camera records one long file; the papers' setting is clips of
a few seconds. All clips come from one camera and its people, so they are one UCF101 group
(``g01``). Frames are streamed (a recording need not fit in memory) and written with the same
MPEG-4 Part 2 encoder as the synthetic dataset (:func:`tasks.synthetic.encode.write_video`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import av
import cv2
import numpy as np

from tasks.core.errors import PrivharError
from tasks.synthetic.encode import write_video
from tasks.video_data.datasets import open_video

log = logging.getLogger(__name__)


def _frames(video: Path):
    """RGB frames of ``video`` one at a time, and its frame rate first."""
    try:
        container = open_video(video)
    except (av.FFmpegError, OSError) as error:
        raise PrivharError(f"{video}: not a readable video ({error})") from None
    with container:
        stream = container.streams.video[0]
        yield float(stream.average_rate or 25.0)
        for frame in container.decode(stream):
            yield frame.to_ndarray(format="rgb24")


def cut_recording(
    video: Path,
    out: Path,
    *,
    action: str,
    seconds: float,
    size: tuple[int, int] | None = None,
    test_every: int = 4,
    max_clips: int | None = None,
    quantiser: int = 3,
) -> list[Path]:
    """Clips of ``seconds`` of ``video`` (whole clips only), resized to ``size`` (height, width) by area averaging."""
    if not video.is_file():
        raise PrivharError(f"{video}: no such recording")
    if not action.isidentifier():
        raise PrivharError(
            f"action {action!r}: expected one word (it names a class folder and the clip files)"
        )
    frames = _frames(video)
    fps = next(frames)
    per_clip = max(1, round(seconds * fps))
    (out / action).mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    buffer: list[np.ndarray] = []
    for frame in frames:
        if size is not None:
            frame = cv2.resize(frame, (size[1], size[0]), interpolation=cv2.INTER_AREA)
        buffer.append(frame)
        if len(buffer) == per_clip:
            path = out / action / f"v_{action}_g01_c{len(written) + 1:02d}.avi"
            write_video(path, np.stack(buffer), fps=fps, quantiser=quantiser, channel_order="rgb")
            written.append(path)
            log.info("footage: %s (%d frames at %.3g frames/s)", path, per_clip, fps)
            buffer = []
            if max_clips is not None and len(written) == max_clips:
                break
    if not written:
        raise PrivharError(f"{video}: shorter than one clip of {seconds} s")
    names = [f"{action}/{path.name}" for path in written]
    test = {name for index, name in enumerate(names) if index % test_every == test_every - 1}
    (out / "classInd.txt").write_text(f"1 {action}\n")
    (out / "trainlist01.txt").write_text(
        "".join(f"{name} 1\n" for name in names if name not in test)
    )
    (out / "testlist01.txt").write_text("".join(f"{name}\n" for name in names if name in test))
    return written
