"""A live stream read as fast as it comes, so that a protector slower than its camera can keep up (issue 84).

Decoding runs in a thread into a bounded queue; each frame carries its place on the stream's own clock (the first
frame's arrival plus its timestamp's offset). :func:`keep_up` is the ``--max-latency`` rule the protector applies before
each stretch: when the oldest waiting frame would be written later than ``max_latency`` seconds after its time on the
stream's clock, the detection rate is lowered (people searched half as often, down to once a second: the remedy for a
lasting overload) and the frames that cannot make it in time are dropped — never written unchecked — each counted. A source that delivers faster than real time
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
    frames."""

    def __init__(
        self,
        container: Any,
        fps: float,
        capacity: int,
        limit: int | None = None,
        not_before: float = 0.0,
        audio: bool = False,
    ) -> None:
        self.fps, self.capacity, self.limit = fps, capacity, limit
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
            self._clock = (max(arrived, self.not_before), pts or 0, float(base or 0))
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

    def _wait_for(self, size: int) -> None:
        """Until ``size`` frames wait or the stream has ended (the caller holds the condition)."""
        while len(self.queue) < size and not self.ended:
            self._condition.wait(WAKE_SECONDS)

    def take(self, size: int) -> list[Frame]:
        """The next ``size`` frames once they are there (fewer at the stream's end; none once it is drained)."""
        with self._condition:
            self._wait_for(size)
            taken = [self.queue.popleft() for _ in range(min(size, len(self.queue)))]
            self._condition.notify_all()
            return taken

    def oldest_due(self, size: int) -> float | None:
        """When the stream's clock reaches the oldest frame of the next stretch, once ``size`` frames wait (None
        before)."""
        with self._condition:
            self._wait_for(size)
            return self.queue[0].due if self.queue else None

    def drop_oldest(self, late: float) -> int:
        """The waiting frames whose time on the stream's clock is before ``late``, dropped; how many."""
        with self._condition:
            dropped = 0
            while self.queue and self.queue[0].due < late:
                self.queue.popleft()
                dropped += 1
            self._condition.notify_all()
            return dropped

    def close(self) -> bool:
        """The decoder asked to stop and given a second to; whether it has (a stalled read ends at the source's
        timeout)."""
        with self._condition:
            self._stop = True
            self._condition.notify_all()
        self._thread.join(timeout=1.0)
        return not self._thread.is_alive()


def keep_up(
    due: float,
    now: float,
    work: float,
    max_latency: float,
    detect_every: int,
    slowest: int,
    fastest: int,
) -> tuple[int, float | None]:
    """(the detection interval to use, the stream-clock time before which waiting frames are dropped, or None) for a
    stretch whose oldest frame is ``due`` on the stream's clock and whose work is expected to take ``work`` seconds
    (the last stretch's). Within ``max_latency`` nothing changes, and a lowered rate is raised again once there is
    room to spare. Past it the rate is halved, down to every ``slowest`` frames, and the frames that could not be
    written in time are dropped, so the bound holds for what is written (up to one stretch's change of work).

    >>> keep_up(10.0, 10.5, 0.5, 2.0, 3, 25, 3)  # written 1 s after its time: within 2 s
    (3, None)
    >>> keep_up(10.0, 11.8, 0.5, 2.0, 3, 25, 3)  # 2.3 s: search half as often, drop what is due before 10.3
    (6, 10.3)
    >>> keep_up(10.0, 11.8, 0.5, 2.0, 25, 25, 3)  # already once a second
    (25, 10.3)
    >>> keep_up(10.0, 10.1, 0.2, 2.0, 12, 25, 3)  # 0.3 s: room to spare, search twice as often again
    (6, None)
    """
    lateness = now + work - due
    if max_latency <= 0 or lateness <= max_latency:
        if lateness < max_latency / 4 and detect_every > fastest:
            return max(fastest, detect_every // 2), None
        return detect_every, None
    return min(slowest, detect_every * 2), round(due + lateness - max_latency, 6)
