"""A live stream read as fast as it comes, so that a protector slower than its camera can keep up (issue 84).

Decoding runs in a thread into a bounded queue; each frame carries its place on the stream's own clock (its
timestamp's offset from the first frame's arrival, or from when the source began to be opened if that was earlier). :func:`plan` and :func:`detection_interval` are the ``--max-latency``
rule the protector applies before each stretch, from the work its last stretches cost a frame
(:func:`work_per_frame`): a stretch starts early, shorter, when waiting for all its frames would write its oldest too
late; near the bound people are searched half as often (down to once a second: the remedy for a lasting overload);
and the frames that cannot make it in time are dropped, the oldest first — never written unchecked — each counted. A source that delivers faster than real time
(a recorded file piped in) is ahead of its clock and loses nothing while the protector keeps the stream's pace.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Any

import av
import numpy as np

WAKE_SECONDS = 0.2  # a wait for frames wakes this often, so Ctrl-C is taken at once


@dataclass(frozen=True)
class Sound:
    packet: Any  # an audio packet as it came (copied, not decoded)
    due: float  # time.monotonic() when the stream's clock reaches it


@dataclass(frozen=True)
class Frame:
    image: np.ndarray
    rotation: int
    arrived: float  # time.monotonic() when decoded
    due: float  # time.monotonic() when the stream's clock reaches it


class StreamReader:
    """The first video stream of ``container`` decoded in a thread into a queue of at most ``capacity`` frames (the
    decoder waits when it is full: a source faster than real time is held back, not dropped), up to ``limit``
    frames. The stream's clock starts at the first frame's arrival, or when the source began to be ``opened`` if that
    was earlier: opening a stream reads its first frames (FFmpeg probes ~20 for the frame rate), which then arrive at
    once, so a clock started at the first of them would run late by the probe's time and every later frame arrive
    before its time on it."""

    def __init__(
        self,
        container: Any,
        fps: float,
        capacity: int,
        limit: int | None = None,
        not_before: float = 0.0,
        audio: bool = False,
        opened: float | None = None,
    ) -> None:
        self.fps, self.capacity, self.limit, self.opened = fps, capacity, limit, opened
        self.not_before = not_before  # the clock starts no earlier (a reconnection's, after the last connection's)
        self.last_due = 0.0
        self.audio = audio and bool(
            container.streams.audio
        )  # its first audio stream's packets, kept
        self.sounds: collections.deque[Sound] = collections.deque()
        self._unheard: list[Any] = []  # audio packets before the clock is set
        self.queue: collections.deque[Frame] = collections.deque()
        self.error: av.FFmpegError | None = None
        self.ended, self.read = False, 0
        self._container, self._stop = container, False
        self._condition = threading.Condition()
        self._clock: tuple[float, int, float] | None = (
            None  # first arrival, first pts, the stream's time base
        )
        self._thread = threading.Thread(
            target=self._decode, name="privhar-live-reader", daemon=True
        )
        self._thread.start()

    @property
    def stream(self) -> Any:
        return self._container.streams.video[0]

    def _due(self, pts: int | None, arrived: float, base: Any) -> float:
        if self._clock is None:
            start = arrived if self.opened is None else min(arrived, self.opened)
            self._clock = (max(start, self.not_before), pts or 0, float(base or 0))
        start, first, seconds = self._clock
        if pts is None or not seconds:
            return start + self.read / self.fps
        return start + (pts - first) * seconds

    def _decode(self) -> None:
        try:
            video = self._container.streams.video[0]
            sound = self._container.streams.audio[:1] if self.audio else []
            for packet in self._container.demux(video, *sound):
                if packet.stream.type == "audio":
                    self._hear(packet)
                    continue
                for frame in packet.decode():
                    if not self._put(frame, video.time_base):
                        return
        except av.FFmpegError as error:
            self.error = error
        finally:
            with self._condition:
                self.ended = True
                self._condition.notify_all()

    def _put(self, frame: Any, base: Any) -> bool:
        """A decoded frame queued on the stream's clock (waiting while the queue is full); whether to read on."""
        arrived = time.monotonic()
        item = Frame(
            frame.to_ndarray(format="rgb24"),
            int(frame.rotation),
            arrived,
            self._due(frame.pts, arrived, base),
        )
        self.last_due = item.due
        with self._condition:
            while len(self.queue) >= self.capacity and not self._stop:
                self._condition.wait(WAKE_SECONDS)
            self.queue.append(item)
            self.read += 1
            self._condition.notify_all()
        return not self._stop and (self.limit is None or self.read < self.limit)

    def _hear(self, packet: Any) -> None:
        """An audio packet placed on the video's clock (held until the first frame has set it: the video decoder
        gives its first frame a few packets in)."""
        if packet.pts is None or not packet.size:
            return
        self._unheard.append(packet)
        if self._clock is None:
            return
        start, first, seconds = self._clock
        with self._condition:
            for held in self._unheard:
                due = start + float(held.pts * held.time_base) - first * seconds
                self.sounds.append(Sound(held, due))
        self._unheard.clear()

    def sounds_until(self, due: float) -> list[Sound]:
        """The audio packets up to ``due`` on the stream's clock (those of the frames just written), in order."""
        with self._condition:
            taken = []
            while self.sounds and self.sounds[0].due < due:
                taken.append(self.sounds.popleft())
            return taken

    def waiting(self, size: int, lead: float) -> list[float]:
        """The waiting frames' times on the stream's clock, once ``size`` frames wait, the stream has ended, or the
        clock is ``lead`` seconds past the oldest's time (the latest a stretch may start and still be written within
        its bound): [] once the stream is drained."""
        with self._condition:
            while len(self.queue) < size and not self.ended:
                left = self.queue[0].due + lead - time.monotonic() if self.queue else WAKE_SECONDS
                if left <= 0:
                    break
                self._condition.wait(min(WAKE_SECONDS, left))
            return [frame.due for frame in self.queue]

    def take(self, size: int) -> list[Frame]:
        """The next ``size`` frames of those waiting (fewer at the stream's end)."""
        with self._condition:
            taken = [self.queue.popleft() for _ in range(min(size, len(self.queue)))]
            self._condition.notify_all()
            return taken

    def drop(self, count: int) -> None:
        """The ``count`` oldest waiting frames dropped."""
        with self._condition:
            for _ in range(min(count, len(self.queue))):
                self.queue.popleft()
            self._condition.notify_all()

    def close(self) -> bool:
        """The decoder asked to stop and given a second to; whether it has (a stalled read ends at the source's
        timeout)."""
        with self._condition:
            self._stop = True
            self._condition.notify_all()
        self._thread.join(timeout=1.0)
        return not self._thread.is_alive()


WORK_HISTORY = 20  # the stretches whose work per frame predicts the next one's
WORK_SPREAD = 3.0  # the prediction: their median plus this many robust standard deviations (1.4826 MAD): a stretch's
# work varies by a third at 1280x720 (faces to blur, the decoder's share of the CPU), and one slow stretch in 20 (a
# model's first call, a reconnection) is not the rule
# people are searched half as often when a stretch is predicted to be written later than this share of
# --max-latency after its oldest frame's time
LOWER_AT = 0.9


def work_per_frame(history: list[float]) -> float:
    """The seconds of work a frame is expected to cost, from the last stretches' (0 before any).

    >>> work_per_frame([]), work_per_frame([0.02] * 19 + [0.2])  # one slow stretch is not the rule
    (0.0, 0.02)
    >>> round(work_per_frame([0.04, 0.05, 0.06] * 5), 4)  # work that varies: predicted above its slowest
    0.0945
    """
    recent = np.asarray(history[-WORK_HISTORY:])
    if not len(recent):
        return 0.0
    median = typical_work(history)
    return median + WORK_SPREAD * 1.4826 * float(np.median(np.abs(recent - median)))


def typical_work(history: list[float]) -> float:
    """The seconds of work a frame has typically cost (the median of the last stretches'; 0 before any): whether the
    protector keeps up with its stream, where :func:`work_per_frame`'s margin is for the bound.

    >>> typical_work([]), typical_work([0.02] * 19 + [0.2])
    (0.0, 0.02)
    """
    recent = history[-WORK_HISTORY:]
    return float(np.median(recent)) if recent else 0.0


def plan(
    dues: list[float],
    now: float,
    per_frame: float,
    size: int,
    max_latency: float,
    typical: float | None = None,
) -> tuple[int, int]:
    """(the oldest waiting frames to drop, the frames to protect next) so that the next stretch, whose frames wait with
    times ``dues`` on the stream's clock and whose work is ``per_frame`` seconds a frame, is written at most
    ``max_latency`` after its oldest frame's time: where a frame's ``typical`` work (by default ``per_frame``) is
    shorter than the frames' spacing (a busy second's lateness, not an overload, where a shorter stretch would only
    put it off: a stretch's work is not all in proportion to its frames), the stretch shortened down to half first,
    the rest left to the next; then the fewest frames dropped, the newest always kept (a protector slower than the
    bound for one frame still writes, late, and its lateness is counted). At 640x360 a stretch's oldest frame missed
    its bound by a little after a busy second, and 7 of 15 000 frames were dropped where a shorter stretch would have
    made it; and a stretch 10 s into a run dropped 2 frames as an overload because its work predicted with a margin
    (45 ms a frame, from the first stretches' spread) passed the 40 ms spacing, where it typically took 28.

    >>> plan([10.0, 10.5, 11.0], 11.0, 0.2, 3, 2.0)  # written at 11.6, 1.6 s after 10.0
    (0, 3)
    >>> plan([10.0, 10.5, 11.0], 11.2, 0.4, 3, 2.0)  # three would write 10.0 at 2.4 s, two at 2.0: shortened
    (0, 2)
    >>> plan([10.0, 10.5, 11.0], 11.0, 0.6, 3, 2.0)  # a frame's work is longer than its spacing: one dropped
    (1, 2)
    >>> plan([10.0, 10.5, 11.0, 11.5], 11.6, 0.4, 4, 2.0)  # even two would be 2.4 s late: two dropped
    (2, 2)
    >>> plan([10.0, 10.5], 13.0, 5.0, 3, 2.0)  # no frame can make it: the newest is written anyway
    (1, 1)
    >>> plan([10.0, 10.25, 10.5, 10.75], 11.0, 0.3, 4, 2.0)  # the margin's 0.3 s a frame: an overload, one dropped
    (1, 3)
    >>> plan([10.0, 10.25, 10.5, 10.75], 11.0, 0.3, 4, 2.0, typical=0.2)  # typically keeping up: shortened
    (0, 3)
    """
    count = min(size, len(dues))
    if max_latency <= 0:
        return 0, count
    typical = per_frame if typical is None else typical
    keeping_up = len(dues) > 1 and typical * (len(dues) - 1) < dues[-1] - dues[0]
    for shorter in range(count, (count + 1) // 2 - 1 if keeping_up else count, -1):
        if now + per_frame * shorter - dues[0] <= max_latency:
            return 0, shorter
    drop = 0
    while drop < len(dues) - 1:
        if now + per_frame * min(size, len(dues) - drop) - dues[drop] <= max_latency:
            break
        drop += 1
    return drop, min(size, len(dues) - drop)


def detection_interval(
    lateness: float, work: float, max_latency: float, every: int, slowest: int, fastest: int
) -> int:
    """The detection interval for a stretch predicted to be written ``lateness`` seconds after its oldest frame's time,
    ``work`` of them its protection: halved rate (doubled interval, up to ``slowest``) near the bound, before any frame
    has to be dropped, and raised again (down to ``fastest``) once the stretch would stay clear of that even with half
    as much work again (searching twice as often cost 30-40 % more at 1280x720). A live run at 640x360 that raised it
    only below 0.7 of the bound (a 1 s stretch and its work are seldom under 1.4 s) searched once a second for most of
    ten minutes, and face_blur released a face between two searches.

    >>> detection_interval(1.5, 0.5, 2.0, 3, 25, 3), detection_interval(1.9, 0.9, 2.0, 3, 25, 3)
    (3, 6)
    >>> detection_interval(2.5, 1.5, 2.0, 24, 25, 3)  # down to once a second
    25
    >>> detection_interval(1.45, 0.45, 2.0, 12, 25, 3), detection_interval(1.7, 0.7, 2.0, 12, 25, 3)  # room: raised
    (6, 12)
    """
    if max_latency <= 0:
        return every
    if lateness > LOWER_AT * max_latency:
        return min(slowest, every * 2)
    if lateness + work / 2 < LOWER_AT * max_latency and every > fastest:
        return max(fastest, every // 2)
    return every
