"""``privhar protect URL|/dev/videoN|- -o FOLDER``: a live source protected as it arrives (issue 84, first part).

The file path's core (:func:`tasks.anonymize.protect_video.protect_stretch`: the finder, the method and the
fail-closed gate) on stretches of a stream read with PyAV: a network URL (``rtsp://``, ``http(s)://``, ``udp://``,
``tcp://``, an HLS playlist), a V4L2 camera or standard input (``-``: a pipe, e.g. ``ffmpeg … -f mpegts -``). A stretch
is written only once the gate has passed it or blacked it out, so no unchecked frame reaches the output; frames of a
stretch not yet complete when the stream ends are protected as a short stretch, and those pending at Ctrl-C are dropped
(never written unchecked), which the summary says.

The output is a folder of segments, one playable file per ``segment_seconds`` of stream time, each named by its start
(the run's start on the wall clock plus the stream time of its first frame: ``20261204-193005.mp4``), or one file.
Each is written beside its final name and renamed into place when closed — at its end, at the stream's end or failure,
and at Ctrl-C — so whatever stops the run, every file under a final name is a closed, playable container and nothing
half-written is left. Latency is measured per frame, from its decoding to its stretch's encoding, and against the stream's clock.

The stream is decoded in a thread as it arrives (:mod:`tasks.video_data.live_reader`) and ``--max-latency`` holds each
frame's writing to that bound after its time on the stream's clock: people searched less often, then frames dropped,
never written unchecked, each counted in the summary.

Not yet here (issue 84 goes on): reconnecting, a stream as the output, audio, a Python entry point taking frames.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import av
import numpy as np

from tasks.anonymize.coverage import changed
from tasks.anonymize.protect_video import (
    ProtectOptions,
    Summary,
    black,
    check_options,
    protect_stretch,
    stream_params,
    stretch_frames,
)
from tasks.anonymize.video_container import encode_frames, frame_rate, open_output, start_stream
from tasks.core.errors import PrivharError, printable
from tasks.core.params import AnonymizeParams
from tasks.core.storage import staging_file
from tasks.video_data.live_reader import Frame, StreamReader, keep_up

log = logging.getLogger(__name__)
LIVE_SCHEMES = ("rtsp", "rtsps", "rtmp", "http", "https", "udp", "tcp", "srt", "rtp")
REPORT_SECONDS = 60.0  # a live run logs its counts this often
SEGMENT_SUFFIX = ".mp4"


def is_live(source: str) -> bool:
    """A stream rather than a file: ``-`` (standard input), a URL of a streaming scheme, or a V4L2 camera.

    >>> [is_live(s) for s in ("-", "rtsp://cam/1", "/dev/video0", "clip.mp4", "a/b")]
    [True, True, True, False, False]
    """
    scheme = source.split("://", 1)[0].lower() if "://" in source else ""
    return source == "-" or scheme in LIVE_SCHEMES or source.startswith("/dev/video")


def open_live(source: str, timeout: float) -> av.container.InputContainer:
    """The live source opened, with ``timeout`` seconds to connect and for each read; one line when it cannot be."""
    try:
        if source == "-":
            container = av.open(sys.stdin.buffer, mode="r", timeout=timeout)
        elif source.startswith("/dev/"):
            container = av.open(source, format="v4l2", timeout=timeout)
        else:
            container = av.open(source, timeout=timeout)
    except (av.FFmpegError, OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or str(error).splitlines()[0][:120]
        raise PrivharError(
            f"{_shown(source)}: cannot be read as a video stream ({reason})"
        ) from None
    if not container.streams.video:
        container.close()
        raise PrivharError(f"{_shown(source)}: has no video stream")
    return container


def _shown(source: str) -> str:
    return "standard input" if source == "-" else printable(source)


@dataclass
class LiveSummary(Summary):
    """A live run's outcome: a file's, plus its segments, its frames' latency and why it stopped."""

    segments: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    behind: float = 0.0  # the most a frame was written after its time on the stream's clock (--max-latency's bound)
    dropped: int = 0  # frames dropped unwritten to keep within --max-latency
    slowest_detection: int = (
        0  # the longest detection interval --max-latency lowered the rate to (0: never lowered)
    )
    stopped: str = "the stream ended"
    failed: bool = (
        False  # the stream broke off (an error, a stall), as against ended, run out or interrupted
    )
    interrupted: bool = False

    def line(self) -> str:
        latency = (
            f"; latency p50 {np.percentile(self.latencies, 50):.2f} s, p99 "
            f"{np.percentile(self.latencies, 99):.2f} s"
            if self.latencies
            else ""
        )
        kept_up = (
            f"; {self.dropped} frames dropped unwritten to keep up" if self.dropped else ""
        ) + (
            f"; detection lowered to every {self.slowest_detection} frames to keep up"
            if self.slowest_detection
            else ""
        )
        return (
            f"{super().line()}; {len(self.segments)} segments{latency}; at most {self.behind:.1f} s behind the "
            f"stream{kept_up}; stopped: {self.stopped}"
        )


@dataclass
class Segments:
    """The recording: one playable file per ``seconds`` of stream time in a folder (or one ``file``), each written beside
    its final name and renamed into place when closed."""

    target: Path
    seconds: float | None  # None: one file, ``target``
    container: Any  # the input (its stream's time base and metadata)
    fps: float
    keep_metadata: bool
    started: datetime
    summary: LiveSummary
    _open: tuple[Path, Path, Any, Any] | None = (
        None  # final name, staging file, output, its video stream
    )
    _frames: int = 0
    _base: int | None = None  # the segment's first timestamp: each file starts at 0

    def write(
        self, frames: np.ndarray, stamps: list[int | None], rotation: int, offset: float
    ) -> None:
        """A gated stretch into the segment it falls in (``offset``: its first frame's stream time, seconds)."""
        if (
            self._open is not None
            and self.seconds is not None
            and self._frames >= self.seconds * self.fps
        ):
            self.close()
        if self._open is None:
            self._start(frames, rotation, offset)
        _, _, output, video = self._open
        if self._base is None:
            self._base = next((stamp for stamp in stamps if stamp is not None), None)
        shifted = [None if s is None or self._base is None else s - self._base for s in stamps]
        encode_frames(
            video, output, frames[:, : video.height, : video.width], shifted, self._frames
        )
        self._frames += len(frames)

    def _start(self, frames: np.ndarray, rotation: int, offset: float) -> None:
        if self.seconds is None:
            final = self.target
        else:
            name = (self.started + timedelta(seconds=offset)).strftime("%Y%m%d-%H%M%S")
            final = self.target / f"{name}{SEGMENT_SUFFIX}"
            count = 1
            while final.exists() or str(final) in self.summary.segments:
                final, count = self.target / f"{name}-{count}{SEGMENT_SUFFIX}", count + 1
        staging = staging_file(final)
        output, video, _ = open_output(
            staging, self.container, self.fps, keep_audio=False, keep_metadata=self.keep_metadata
        )
        height, width = start_stream(video, frames, rotation)
        self.summary.height, self.summary.width = height, width
        self._open, self._frames, self._base = (final, staging, output, video), 0, None

    def close(self) -> None:
        """The open segment flushed, closed and renamed into place (removed if it holds no frame)."""
        if self._open is None:
            return
        final, staging, output, video = self._open
        self._open = None
        try:
            for packet in video.encode():
                output.mux(packet)
            output.close()
            if self._frames:
                staging.replace(final)
                self.summary.segments.append(str(final))
                log.info("segment %s: %d frames", printable(str(final)), self._frames)
        finally:
            staging.unlink(missing_ok=True)


def protect_live(
    source: str,
    target: Path,
    *,
    params: AnonymizeParams,
    options: ProtectOptions,
    segment_seconds: float | None,
    duration: float | None = None,
    timeout: float = 10.0,
    max_latency: float = 2.0,
) -> LiveSummary:
    """Protect the live ``source`` into ``target`` (a folder of ``segment_seconds`` segments, or one file with None)
    until it ends, ``duration`` seconds of it have passed, or Ctrl-C; every frame written has passed the gate."""
    check_options(options)
    if options.keep_audio:
        raise PrivharError(
            "--keep-audio: not yet for a live source (its audio would need its own gate in time)"
        )
    if options.on_fail != "blackout":
        raise PrivharError(
            "--on-fail skip: a live source cannot be left unwritten after the fact; use blackout"
        )
    summary = LiveSummary(_shown(source), printable(str(target)))
    container = open_live(source, timeout)
    started = time.perf_counter()
    stream = container.streams.video[0]
    fps = frame_rate(stream)
    segments = Segments(
        target, segment_seconds, container, fps, options.keep_metadata, datetime.now(), summary
    )
    size = stretch_frames(options.chunk_seconds, fps, stream.height, stream.width)
    limit = None if duration is None else max(1, round(duration * fps))
    capacity = 2 * size + math.ceil(max_latency * fps)
    reader = StreamReader(container, fps, capacity, limit)
    try:
        _run(source, reader, segments, size, options, params, max_latency)
    finally:
        if (
            reader.close()
        ):  # a decoder still in a stalled read keeps the container until the process ends
            container.close()
    summary.seconds = time.perf_counter() - started
    if summary.frames == 0 and not summary.interrupted:
        raise PrivharError(f"{_shown(source)}: no decodable video frames ({summary.stopped})")
    return summary


def _run(
    source: str,
    reader: StreamReader,
    segments: Segments,
    size: int,
    options: ProtectOptions,
    params: AnonymizeParams,
    max_latency: float,
) -> None:
    """Every stretch of the stream gated, then written, under the ``max_latency`` rule (:func:`keep_up`); the open
    segment closed whatever stops the run."""
    summary, fps = segments.summary, segments.fps
    params, scale = stream_params(reader.stream, fps, options, params)
    fastest = params.detect_every
    reported, coverages, people, work = time.monotonic(), [], 0, 0.0
    try:
        while (due := reader.oldest_due(size)) is not None:
            every, late = keep_up(
                due,
                time.monotonic(),
                work,
                max_latency,
                params.detect_every,
                max(fastest, round(fps)),
                fastest,
            )
            if every != params.detect_every:
                params = params.model_copy(update={"detect_every": every})
                summary.slowest_detection = max(summary.slowest_detection, every)
            if late is not None:
                summary.dropped += reader.drop_oldest(late)
            taken = reader.take(size)
            if not taken:
                break
            started, people = (
                time.monotonic(),
                summary.people_frames,
            )  # a stretch interrupted is not counted
            frames = np.stack([frame.image for frame in taken])
            released = protect_stretch(Path("stream"), frames, fps, scale, options, params, summary)
            segments.write(
                released.frames, [f.pts for f in taken], taken[0].rotation, summary.frames / fps
            )
            _record(summary, frames, released, taken, coverages)
            work = time.monotonic() - started
            if time.monotonic() - reported >= REPORT_SECONDS:
                log.info("live %s: %s", _shown(source), _counts(summary))
                reported = time.monotonic()
        _ending(reader, summary)
    except KeyboardInterrupt:
        summary.interrupted, summary.people_frames = True, people
        summary.stopped = "interrupted (Ctrl-C; the frames of the stretch in progress were dropped, never written)"
    finally:
        segments.close()
    summary.coverage_min = min(coverages) if coverages else float("nan")


def _ending(reader: StreamReader, summary: LiveSummary) -> None:
    """Why the stream stopped, once its frames are written: a break, ``--duration``, or its end."""
    if reader.error is not None:
        error = reader.error
        reason = getattr(error, "strerror", None) or str(error).splitlines()[0][:160]
        summary.stopped, summary.failed = f"the stream broke off ({reason})", True
    elif reader.limit is not None and reader.read >= reader.limit:
        summary.stopped = f"--duration {reader.limit / reader.fps:g} s reached"


def _record(
    summary: LiveSummary,
    frames: np.ndarray,
    released: Any,
    taken: list[Frame],
    coverages: list[float],
) -> None:
    """A written stretch counted: its frames, their latency (decoded → written) and how far behind the stream's clock
    it was written, black frames, coverage, share changed."""
    now = time.monotonic()
    summary.latencies.extend(now - frame.arrived for frame in taken)
    summary.behind = max(summary.behind, now - taken[0].due)  # its oldest frame, the latest written
    if not np.isnan(released.coverage):
        coverages.append(released.coverage)
    share = float(
        changed(frames, released.frames, 0).mean()
    )  # the running mean over the frames written
    summary.covered_share = (summary.covered_share * summary.frames + share * len(frames)) / (
        summary.frames + len(frames)
    )
    summary.black_frames += int(black(released.frames).sum())
    summary.frames += len(frames)
    summary.stretches += 1


def _counts(summary: LiveSummary) -> str:
    latencies = summary.latencies[-10_000:]
    return (
        f"{summary.frames} frames written, latency p50 {np.percentile(latencies, 50):.2f} s, p99 "
        f"{np.percentile(latencies, 99):.2f} s, {summary.black_frames} written black, "
        f"{len(summary.segments)} segments closed"
    )
