"""A protected video's containers, through PyAV: the input opened and checked, decoded a stretch at a time with each
frame's timestamp; the output's H.264 (MPEG-4 part 2 for ``.avi``) stream at the input's timing and display rotation,
and the input's audio packets copied unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from tasks.core.errors import PrivharError
from tasks.video_data.datasets import open_video

VIDEO_CODECS = {".mp4": "libx264", ".mkv": "libx264", ".mov": "libx264", ".avi": "mpeg4"}
QUALITY = {"libx264": {"crf": "18", "preset": "veryfast"}, "mpeg4": {"qscale": "2"}}


def chunks(
    container: av.container.InputContainer, size: int
) -> Iterator[tuple[np.ndarray, list[int | None], int]]:
    """The first video stream's frames, (T, H, W, 3) uint8 RGB, ``size`` at a time, with each one's timestamp and the
    display rotation of the stretch's first frame (counter-clockwise degrees: a phone's portrait video is stored
    sideways with a display matrix; without it the protected copy came out sideways, issue 82)."""
    stretch: np.ndarray | None = (
        None  # filled in place: a list of frames and its stack held a 4K stretch twice
    )
    stamps: list[int | None] = []
    rotation, count = 0, 0
    for frame in container.decode(video=0):
        image = frame.to_ndarray(format="rgb24")
        if stretch is None:
            rotation, count, stamps = int(frame.rotation), 0, []
            stretch = np.empty((size, *image.shape), np.uint8)
        stretch[count] = image
        stamps.append(frame.pts)
        count += 1
        if count == size:
            yield stretch, stamps, rotation
            stretch = None
    if stretch is not None:
        yield stretch[:count], stamps, rotation


def frame_rate(stream: Any) -> float:
    """A video stream's frames a second: its average rate, else FFmpeg's guess, else 25."""
    return float(stream.average_rate or stream.guessed_rate or 25.0)


def reason_of(error: BaseException, limit: int = 160) -> str:
    """FFmpeg's (or the OS's) own words for ``error``, without its error number and the path again (issue 82)."""
    return getattr(error, "strerror", None) or str(error).splitlines()[0][:limit]


def open_input(source: Path) -> av.container.InputContainer:
    if source.is_dir():
        raise PrivharError(f"{source}: is a folder; expected a video file")
    if not source.is_file():
        raise PrivharError(f"{source}: no such file")
    if source.stat().st_size == 0:
        raise PrivharError(f"{source}: empty file; expected a video")
    try:
        container = open_video(source)
    except (av.FFmpegError, OSError, ValueError) as error:
        raise PrivharError(f"{source}: not a readable video ({reason_of(error, 120)})") from None
    if not container.streams.video:
        container.close()
        raise PrivharError(f"{source}: has no video stream")
    # an MP4 cut before its index (issue 82: a traceback)
    if container.streams.video[0].codec_context is None:
        container.close()
        raise PrivharError(
            f"{source}: not a readable video (no decoder for its video stream: a file cut short?)"
        )
    return container


def open_output(
    staging: Path,
    source: av.container.InputContainer,
    fps: float,
    *,
    keep_audio: bool,
    keep_metadata: bool,
) -> tuple[av.container.OutputContainer, Any, dict[int, Any]]:
    """The output container, its video stream (created at the first frame, when the size is known) and the audio
    streams copied from the input's (input stream index → output stream)."""
    output = av.open(str(staging), mode="w", format=format_of(staging))
    audio: dict[int, Any] = {}
    if keep_audio:
        for stream in source.streams.audio:
            audio[stream.index] = output.add_stream_from_template(stream)
    # each frame keeps its input timestamp (:func:`encode_frames`)
    video = add_video(
        output,
        source,
        fps,
        VIDEO_CODECS[staging.suffix.lower()],
        time_base=source.streams.video[0].time_base,
        keep_metadata=keep_metadata,
    )
    return output, video, audio


def add_video(
    output: av.container.OutputContainer,
    source: av.container.InputContainer,
    fps: float,
    codec: str,
    *,
    time_base: Fraction | None,
    keep_metadata: bool,
    options: dict[str, str] | None = None,
) -> Any:
    """``output``'s video stream for ``source``'s frames, stamped in ``time_base``; with ``keep_metadata``, the
    container's and the video stream's metadata copied from ``source``."""
    if keep_metadata:
        output.metadata.update(source.metadata)
    video = output.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))
    if time_base is not None:
        video.codec_context.time_base = video.time_base = time_base
    video.pix_fmt = "yuv420p"
    video.options = {**QUALITY[codec], **(options or {})}
    if keep_metadata:
        video.metadata.update(source.streams.video[0].metadata)
    return video


def start_stream(video: Any, first: np.ndarray, rotation: int) -> tuple[int, int]:
    """Set the output ``video`` stream from the first stretch, before its first frame is encoded: the size (H.264's
    4:2:0 wants even sides, so an odd one is cropped by a row or column) and the display ``rotation`` (how the video
    is meant to be shown, not personal metadata: kept without ``keep_metadata``). Returns the (rows, columns)
    written."""
    video.width, video.height = first.shape[2] // 2 * 2, first.shape[1] // 2 * 2
    if rotation:
        video.set_display_rotation(rotation)
    return video.height, video.width


def format_of(path: Path) -> str:
    return {".mp4": "mp4", ".mkv": "matroska", ".mov": "mov", ".avi": "avi"}[path.suffix.lower()]


def encode_frames(
    video: Any, output: Any, frames: np.ndarray, stamps: list[int | None], first: int
) -> None:
    """Encode ``frames`` at their own timestamps (``stamps``, in the input stream's time base, which the output stream
    keeps): a variable-rate video keeps its timing, and its sound stays in step (issue 82: re-timed to the average
    rate, picture and sound drifted 0.7 s apart). Frames without a timestamp are numbered at the stream's rate."""
    for offset, frame in enumerate(frames):
        picture = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
        if stamps[offset] is None:
            picture.pts, picture.time_base = first + offset, 1 / video.codec_context.framerate
        else:
            picture.pts, picture.time_base = stamps[offset], video.codec_context.time_base
        for packet in video.encode(picture):
            output.mux(packet)


def copy_audio(source: Path, output: Any, audio: dict[int, Any]) -> None:
    """Every audio packet of ``source`` into its copied stream, unchanged (demuxed again: the video pass decoded)."""
    with open_video(source) as container:
        wanted = [container.streams[index] for index in audio]
        for packet in container.demux(wanted):
            if packet.dts is None:
                continue
            packet.stream = audio[packet.stream.index]
            output.mux(packet)
