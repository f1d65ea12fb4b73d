"""``privhar protect URL|/dev/videoN|- -o FOLDER|FILE|URL|-``: a live source protected as it arrives (issue 84).

The file path's core (:class:`tasks.anonymize.frame_protector.FrameProtector`: the finder, the method and the
fail-closed gate) on stretches of a stream read with PyAV: a network URL (``rtsp://``, ``http(s)://``, ``udp://``,
``tcp://``, an HLS playlist), a V4L2 camera or standard input (``-``: a pipe, e.g. ``ffmpeg … -f mpegts -``). A stretch
is written only once the gate has passed it or blacked it out, so no unchecked frame reaches the output; frames of a
stretch not yet complete when the stream ends are protected as a short stretch, and those pending at Ctrl-C are dropped
(never written unchecked), which the summary says.

The output is a folder of segments, one playable file per ``segment_seconds`` of the stream, each named by its start
on the wall clock (``20261204-193005.mp4``), or one file, or a stream (``udp://``, ``tcp://``, … or ``-`` for standard
output: MPEG-TS). A file is written beside its final name and renamed into place when closed — at its end, at the
stream's end, failure or reconnection, at a write error and at Ctrl-C — so whatever stops the run, every file under a
final name is a closed, playable container and nothing half-written is left. Every frame is stamped with its time on
the stream's clock since the run's first frame (:data:`OUTPUT_TIME_BASE`), so a reconnection's gap stays a gap.

The stream is decoded in a thread (:mod:`tasks.video_data.live_reader`, whose rule holds ``--max-latency``: people
searched less often, then frames dropped, never written unchecked, each counted). With ``reconnect`` a source that
breaks off or ends is opened again (after 1, 2, 4 … 30 s) until ``duration`` or Ctrl-C. With ``keep_audio`` the first
audio stream is copied unchanged, each packet placed on the video's clock.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from tasks.anonymize.frame_protector import (
    FrameProtector,
    ProtectOptions,
    Summary,
    check_options,
    warm_up,
)
from tasks.anonymize.video_container import (
    VIDEO_CODECS,
    add_video,
    encode_frames,
    format_of,
    frame_rate,
    reason_of,
    start_stream,
)
from tasks.core.errors import PrivharError, printable
from tasks.core.params import AnonymizeParams
from tasks.core.storage import staging_file
from tasks.video_data.live_reader import (
    Frame,
    Sound,
    StreamReader,
    detection_interval,
    plan,
    typical_work,
    work_per_frame,
)

log = logging.getLogger(__name__)
REPORT_SECONDS = 60.0  # a live run logs its counts this often
SEGMENT_SUFFIX = ".mp4"
# MPEG-TS's clock: every live output's frames are stamped on it
OUTPUT_TIME_BASE = Fraction(1, 90_000)
# --reconnect: the first wait before opening the source again, and the longest
RECONNECT_WAIT = (1.0, 30.0)
# a stream's receiver gets each frame as it is encoded, not a second of look-ahead later
STREAM_OPTIONS = {"tune": "zerolatency"}


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
        raise PrivharError(
            f"{_shown(source)}: cannot be read as a video stream ({reason_of(error)})"
        ) from None
    if not container.streams.video:
        container.close()
        raise PrivharError(f"{_shown(source)}: has no video stream")
    return container


def _shown(source: str) -> str:
    return {"-": "standard input"}.get(source, printable(source))


@dataclass
class LiveSummary(Summary):
    """A live run's outcome: a file's, plus its segments, its frames' latency and why it stopped."""

    segments: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    behind: float = 0.0  # the most a frame was written after its time on the stream's clock (--max-latency's bound)
    received: int = 0  # frames decoded from the source
    dropped: int = 0  # frames dropped unwritten to keep within --max-latency
    slowest_detection: int = 0  # the longest detection interval --max-latency lowered to (0: never)
    reconnects: int = 0
    stopped: str = "the stream ended"
    failed: bool = False  # the stream or the output broke off (not: ended, run out, interrupted)
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
        again = (
            f"; reconnected {self.reconnects} time{'s' * (self.reconnects > 1)}"
            if self.reconnects
            else ""
        )
        return (
            f"{super().line()}; {len(self.segments)} segments{latency}; at most {self.behind:.1f} s behind the "
            f"stream{kept_up}{again}; stopped: {self.stopped}"
        )

    def counts(self) -> str:
        """The once-a-minute log line: frames in and out, latency, dropped, released black."""
        latencies = self.latencies[-10_000:] or [float("nan")]
        return (
            f"{self.received} frames in, {self.frames} written, latency p50 {np.percentile(latencies, 50):.2f} s, "
            f"p99 {np.percentile(latencies, 99):.2f} s, {self.dropped} dropped, {self.held_back_frames} released "
            f"black by the gate, {len(self.segments)} segments closed"
        )


@dataclass
class Output:
    """Where the gated frames go: segments of ``seconds`` of the stream in the folder ``target`` (one file with
    ``seconds`` None), or a stream (``target`` a URL, or ``-`` for standard output), stamped on the stream's clock."""

    target: Path | str
    seconds: float | None
    keep_metadata: bool
    keep_audio: bool
    summary: LiveSummary
    clock: tuple[datetime, float] = field(
        default_factory=lambda: (datetime.now(), time.monotonic())
    )
    # the open file or stream: final name and staging file (None for a stream), container, video stream
    _open: tuple[Path | None, Path | None, Any, Any] | None = None
    _stream: Any = None  # a stream target's container, open for the whole run
    _sound: Any = None  # the open file's or stream's audio stream (--keep-audio)
    _last_sound: int = -1  # the last audio timestamp written into it
    _first: float = 0.0  # the open file's first frame on the stream's clock (time.monotonic())
    _origin: float | None = None  # the first frame written, on the stream's clock
    _last: int = -1  # the last timestamp written into it
    _frames: int = 0  # frames written into it
    written: int = 0  # frames written in all

    def __post_init__(self) -> None:
        if isinstance(self.target, str):  # a stream: one container for the whole run
            where = sys.stdout.buffer if self.target == "-" else self.target
            try:
                self._stream = av.open(where, mode="w", format="mpegts")
            except (av.FFmpegError, OSError, ValueError) as error:
                raise PrivharError(
                    f"-o {printable(self.target)}: cannot be opened as a stream ({reason_of(error)})"
                ) from None

    def write(
        self, frames: np.ndarray, taken: list[Frame], source: Any, fps: float, sounds: list[Sound]
    ) -> None:
        """A gated stretch, ``taken`` from ``source`` at ``fps``, into the file or stream it falls in, and the audio
        packets ``sounds`` of its time (copied as they came, restamped on the same clock)."""
        due = taken[0].due
        if (
            self._open is not None
            and self.seconds is not None
            and due - self._first >= self.seconds - 0.5 / fps
        ):
            self.cut()
        if self._open is None:
            self._start(frames, taken[0], source, fps)
        _, _, output, video = self._open
        stamps = []  # strictly increasing, as the muxers want, whatever the source's timestamps
        for frame in taken:
            self._last = max(self._last + 1, self._stamp(frame.due))
            stamps.append(self._last)
        encode_frames(video, output, frames[:, : video.height, : video.width], stamps, 0)
        for sound in sounds if self._sound is not None else []:
            packet = sound.packet
            stamp = self._stamp(sound.due)
            if stamp <= self._last_sound:  # before the file began, or out of order: not muxable
                continue
            self._last_sound = packet.pts = packet.dts = stamp
            packet.time_base, packet.stream = OUTPUT_TIME_BASE, self._sound
            output.mux(packet)
        self._frames += len(frames)
        self.written += len(frames)

    def _stamp(self, due: float) -> int:
        """A time on the stream's clock as a timestamp of the open file or stream."""
        return round((due - self._first) / OUTPUT_TIME_BASE)

    def _start(self, frames: np.ndarray, first: Frame, source: Any, fps: float) -> None:
        if self._stream is not None:
            final = staging = None
            output, codec, options = self._stream, "libx264", STREAM_OPTIONS
            self._first = self._first or first.due  # one clock for the whole stream, gaps kept
        else:
            final = self._final_name(first.due)
            staging = staging_file(final)
            output = av.open(str(staging), mode="w", format=format_of(staging))
            codec, options = VIDEO_CODECS[final.suffix.lower()], None
            self._first, self._last = first.due, -1
        if self.keep_audio and source.streams.audio and self._sound is None:
            self._sound, self._last_sound = (
                output.add_stream_from_template(source.streams.audio[0]),
                -1,
            )
        video = add_video(
            output,
            source,
            fps,
            codec,
            time_base=OUTPUT_TIME_BASE,
            keep_metadata=self.keep_metadata,
            options=options,
        )
        self.summary.height, self.summary.width = start_stream(video, frames, first.rotation)
        self._open = (final, staging, output, video)
        self._frames = 0
        self._origin = first.due if self._origin is None else self._origin
        log.info(
            "%s: from %.3f s of the stream",
            printable(str(final or self.target)),
            first.due - self._origin,
        )

    def origin(self, due: float) -> float:
        """The stream's clock at its first frame written (``due`` before any is)."""
        return due if self._origin is None else self._origin

    def _final_name(self, due: float) -> Path:
        if self.seconds is None:
            assert isinstance(self.target, Path)
            return self.target
        started, monotonic = self.clock
        name = (started + timedelta(seconds=due - monotonic)).strftime("%Y%m%d-%H%M%S")
        final, count = Path(self.target) / f"{name}{SEGMENT_SUFFIX}", 1
        while final.exists() or str(final) in self.summary.segments:
            final, count = Path(self.target) / f"{name}-{count}{SEGMENT_SUFFIX}", count + 1
        return final

    def cut(self) -> None:
        """The open file flushed, closed and renamed into place (removed if it holds no frame); a stream's encoder
        flushed (at the run's end)."""
        if self._open is None:
            return
        final, staging, output, video = self._open
        self._open = None
        if final is not None:
            self._sound = None  # the next file gets its own
        try:
            for packet in video.encode():
                output.mux(packet)
            if final is None:
                return
            output.close()
            if self._frames:
                staging.replace(final)
                self.summary.segments.append(str(final))
                log.info("segment %s: %d frames", printable(str(final)), self._frames)
        finally:
            if staging is not None:
                staging.unlink(missing_ok=True)

    def close(self) -> None:
        """Every file closed; a stream's container closed."""
        try:
            self.cut()
        finally:
            if self._stream is not None:
                self._stream.close()
                self._stream = None


def protect_live(
    source: str,
    target: Path | str,
    *,
    params: AnonymizeParams,
    options: ProtectOptions,
    segment_seconds: float | None,
    duration: float | None = None,
    timeout: float = 10.0,
    max_latency: float = 2.0,
    reconnect: bool = False,
) -> LiveSummary:
    """Protect the live ``source`` into ``target`` (a folder of ``segment_seconds`` segments; one file with None; a
    stream for a str) until it ends (with ``reconnect``: never), ``duration`` seconds of it have passed, or Ctrl-C;
    every frame written has passed the gate."""
    _check(source, options, reconnect)
    shown = "standard output" if target == "-" else printable(str(target))
    summary = LiveSummary(_shown(source), shown)
    warm_up(params, options)
    run = LiveRun(source, params, options, timeout, max_latency, reconnect, duration, summary)
    output = Output(target, segment_seconds, options.keep_metadata, options.keep_audio, summary)
    started, broken = time.perf_counter(), None
    try:
        while run.connection(output):
            summary.reconnects += 1
    except KeyboardInterrupt:
        summary.interrupted = True
        summary.stopped = "interrupted (Ctrl-C; the frames of the stretch in progress were dropped, never written)"
    except (OSError, av.FFmpegError) as error:  # the main thread reads nothing: the output's
        broken = reason_of(error)
    finally:
        try:
            output.close()
        except (OSError, av.FFmpegError) as error:
            broken = broken or reason_of(error)
    if broken is not None:
        if not output.written:
            raise PrivharError(f"-o {shown}: cannot be written ({broken}); nothing was written")
        summary.stopped, summary.failed = f"the output could not be written ({broken})", True
    summary.seconds = time.perf_counter() - started
    if summary.frames == 0 and not summary.interrupted and not summary.failed:
        raise PrivharError(f"{_shown(source)}: no decodable video frames ({summary.stopped})")
    return summary


def _check(source: str, options: ProtectOptions, reconnect: bool) -> None:
    """The options a live source cannot take, one line each, before it is opened."""
    check_options(options)
    if options.on_fail != "blackout":
        raise PrivharError(
            "--on-fail skip: a live source cannot be left unwritten after the fact; use blackout"
        )
    if reconnect and source == "-":
        raise PrivharError(
            "--reconnect: standard input cannot be opened again; give a URL or a camera"
        )


@dataclass
class LiveRun:
    """One live run's connections to its source, each read until it stops, its stretches gated and written."""

    source: str
    params: AnonymizeParams
    options: ProtectOptions
    timeout: float
    max_latency: float
    reconnect: bool
    duration: float | None
    summary: LiveSummary
    protector: FrameProtector | None = None  # made at the first connection, for its size and rate
    shape: tuple[int, int] = (0, 0)  # the first connection's frame rows and columns
    # the last frame read, on the stream's clock: a reconnection's clock starts after it
    clock_end: float = 0.0
    opened: float = 0.0  # when the source began to be opened: its clock starts no later

    def connection(self, output: Output) -> bool:
        """One connection to the source protected until it stops; whether to connect again."""
        summary = self.summary
        container = self._connect()
        stream = container.streams.video[0]
        fps, shape = frame_rate(stream), (stream.height, stream.width)
        if self.protector is None:
            self.protector = FrameProtector(
                fps, params=self.params, options=self.options, name="stream", summary=summary
            )
            self.shape = shape
        elif shape != self.shape:
            container.close()
            came, was = f"{shape[1]}x{shape[0]}", f"{self.shape[1]}x{self.shape[0]}"
            summary.stopped, summary.failed = f"the stream came back at {came}, not {was}", True
            return False
        size = self.protector.start(*shape)
        limit = None if self.duration is None else max(1, round(self.duration * fps))
        remaining = None if limit is None else limit - summary.received
        capacity = 2 * size + math.ceil(self.max_latency * fps)
        reader = StreamReader(
            container,
            fps,
            capacity,
            remaining,
            self.clock_end + 1 / fps,
            self.options.keep_audio,
            opened=self.opened,
        )
        before = summary.received
        try:
            self._run(reader, container, output, size, before)
        finally:
            summary.received = before + reader.read
            # a decoder still in a stalled read keeps the container until the process ends
            if reader.close():
                container.close()
        ended = _ending(reader, summary)
        if self.reconnect and not (limit and summary.received >= limit):
            log.warning("%s: %s; connecting again", _shown(self.source), ended)
            return True
        return False

    def _connect(self) -> av.container.InputContainer:
        """The source opened; with ``reconnect``, tried again after 1, 2, 4 … 30 s until it opens."""
        wait = RECONNECT_WAIT[0]
        while True:
            try:
                self.opened = time.monotonic()
                container = open_live(self.source, self.timeout)
                self.summary.failed = False  # a break before is mended
                return container
            except PrivharError as error:
                if not self.reconnect:
                    raise
                log.warning("%s; trying again in %g s", error, wait)
                time.sleep(wait)
                wait = min(RECONNECT_WAIT[1], wait * 2)

    def _run(
        self, reader: StreamReader, container: Any, output: Output, size: int, before: int
    ) -> None:
        """Every stretch of the stream gated, then written, under the ``max_latency`` rule
        (:func:`~tasks.video_data.live_reader.plan`, :func:`~tasks.video_data.live_reader.detection_interval`)."""
        protector, summary, fps, bound = self.protector, self.summary, reader.fps, self.max_latency
        assert protector is not None
        slowest, fastest = protector.slowest, protector.fastest
        reported, people, history, per_frame = time.monotonic(), summary.people_frames, [], 0.0
        try:
            # how long after its oldest frame's time a stretch may wait for the rest (--max-latency 0: until complete)
            while dues := reader.waiting(size, bound - per_frame * size if bound > 0 else math.inf):
                now = time.monotonic()
                work = per_frame * min(size, len(dues))
                every = detection_interval(
                    now + work - dues[0], work, bound, protector.detect_every, slowest, fastest
                )
                protector.detect_every = every
                if every > fastest:
                    summary.slowest_detection = max(summary.slowest_detection, every)
                dropped, count = plan(dues, now, per_frame, size, bound, typical_work(history))
                if dropped:
                    reader.drop(dropped)
                    summary.dropped += dropped
                    log.warning(
                        "live %s: %d frames dropped unwritten at %.1f s of the stream to keep within "
                        "--max-latency %g s (people searched every %d frames)",
                        _shown(self.source),
                        dropped,
                        dues[0] - output.origin(dues[0]),
                        bound,
                        every,
                    )
                taken = reader.take(count)
                # a stretch interrupted is not counted
                started, people = time.monotonic(), summary.people_frames
                released = protector.protect(np.stack([frame.image for frame in taken]))
                sounds = reader.sounds_until(taken[-1].due + 1 / fps)
                output.write(released.frames, taken, container, fps, sounds)
                now = time.monotonic()
                summary.latencies.extend(now - frame.arrived for frame in taken)
                summary.behind = max(
                    summary.behind, now - taken[0].due
                )  # its oldest frame, the latest written
                history.append((now - started) / len(taken))
                per_frame = work_per_frame(history)
                if now - reported >= REPORT_SECONDS:
                    summary.received = before + reader.read
                    log.info("live %s: %s", _shown(self.source), summary.counts())
                    reported = now
        except KeyboardInterrupt:
            summary.people_frames = people
            raise


def _ending(reader: StreamReader, summary: LiveSummary) -> str:
    """Why the stream stopped, once its frames are written: a break, ``--duration``, or its end."""
    if reader.error is not None:
        summary.stopped, summary.failed = f"the stream broke off ({reason_of(reader.error)})", True
    elif reader.limit is not None and reader.read >= reader.limit:
        summary.stopped = f"--duration {summary.received / reader.fps:g} s reached"
    else:
        summary.stopped = "the stream ended"
    return summary.stopped
