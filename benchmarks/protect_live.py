"""``privhar bench protect-live``: a live stream protected as it arrives — latency, frames/s, frames written, frames
released black — for real clips served on the loopback in real time (issue 84's benchmark; never a test's assertion).

The clips are letterboxed to each size, played one after another and looped for ``seconds`` at ``fps``, encoded to
H.264 in MPEG-TS once, before anything is timed; a server process then only re-sends its packets at their times over
TCP (``ffmpeg -re … -f mpegts tcp://…?listen=1`` done with PyAV), so encoding the stream takes no time from the run it
measures. ``privhar protect tcp://… -o FOLDER`` runs in its own process and its summary line gives the figures.

Then each output is judged as ``privhar bench protect`` judges files (:func:`benchmarks.protect.released_faces`: MTCNN,
in neither privhar's finder nor its gate), on the frames written at every ``judge_every``-th frame of the stream (by
default once a second: MTCNN takes a third of a second a 720p frame here, so every frame of ten minutes is out of
reach): each segment's frames are placed on the stream by its start (the log) and their own timestamps, and compared
with the stream's frame there, decoded again beside them (a 720p stream's face frames held in memory are gigabytes)."""

from __future__ import annotations

import json
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from benchmarks.face_judge import judge_faces
from benchmarks.protect import RELEASED_LEVELS, released_faces
from tasks.anonymize.frame_protector import black
from tasks.core.errors import PrivharError
from tasks.core.storage import atomic_write_bytes

SIZES = {
    "640x360": (360, 640, 25),
    "1280x720": (720, 1280, 30),
}  # rows, columns, frames/s (issue 84's streams)


def letterboxed(frame: np.ndarray, rows: int, columns: int) -> np.ndarray:
    """``frame`` scaled to fit ``rows`` × ``columns``, centred on black."""
    scale = min(rows / frame.shape[0], columns / frame.shape[1])
    height, width = round(frame.shape[0] * scale) // 2 * 2, round(frame.shape[1] * scale) // 2 * 2
    canvas = np.zeros((rows, columns, 3), np.uint8)
    top, left = (rows - height) // 2, (columns - width) // 2
    canvas[top : top + height, left : left + width] = cv2.resize(frame, (width, height))
    return canvas


def _clip_frames(clips: list[Path]) -> Iterator[np.ndarray]:
    while True:
        for clip in clips:
            with av.open(str(clip)) as container:
                yield from (frame.to_ndarray(format="rgb24") for frame in container.decode(video=0))


def stream_file(
    clips: list[Path], rows: int, columns: int, fps: int, seconds: float, out: Path
) -> Path:
    """``clips`` one after another, looped, letterboxed to ``rows`` × ``columns``, as ``seconds`` of H.264 in MPEG-TS
    at ``fps`` (a camera's keyframe every second)."""
    frames = _clip_frames(clips)
    with av.open(str(out), mode="w", format="mpegts") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width, stream.pix_fmt = rows, columns, "yuv420p"
        stream.options = {"preset": "veryfast", "g": str(fps), "tune": "zerolatency"}
        for index in range(round(seconds * fps)):
            picture = av.VideoFrame.from_ndarray(
                letterboxed(next(frames), rows, columns), format="rgb24"
            )
            picture.pts = index
            container.mux(stream.encode(picture))
        container.mux(stream.encode())
    return out


def serve(path: str, url: str, pace: float = 1.0, times: int = 1, pause: float = 0.0) -> None:
    """Send the MPEG-TS file ``path``'s video packets to ``url`` (``tcp://…?listen=1``: to the one client that connects),
    each at its time (``pace`` × real time; 0: at once), without re-encoding; ``times`` over, a connection each,
    ``pause`` seconds apart (a camera that drops out)."""
    for time_ in range(times):
        time.sleep(pause if time_ else 0.0)
        _send(path, url, pace)


def _send(path: str, url: str, pace: float) -> None:
    with av.open(path) as source, av.open(url, "w", format="mpegts") as out:
        video = source.streams.video[0]
        sent = out.add_stream_from_template(video)
        # the clock starts once the first packet is out: PyAV opens the output, and a listening one waits for its
        # client, at the first mux (a clock started at av.open ran ahead by the client's start-up, sent as a burst)
        started, first = None, None
        for packet in source.demux(video):
            if packet.dts is None:
                continue
            if pace and packet.pts is not None and started is not None:
                due = started + float((packet.pts - first) * video.time_base) / pace
                time.sleep(max(0.0, due - time.monotonic()))
            packet.stream = sent
            if first is None and packet.pts is not None:
                first = packet.pts
            out.mux(packet)
            if started is None and first is not None:
                started = time.monotonic()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    """Whether a socket listens on ``port`` (read from /proc: a probe would take the one connection FFmpeg accepts)."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(row.split()[1].endswith(f":{port:04X}") and row.split()[3] == "0A" for row in rows)


def served(
    path: Path, pace: float = 1.0, times: int = 1, pause: float = 0.0
) -> tuple[subprocess.Popen, str]:
    """A server process sending ``path`` on a free loopback port (``times`` over), once it listens; its URL."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    code = f"from benchmarks.protect_live import serve; serve({str(path)!r}, {url + '?listen=1'!r}, {pace}, {times}, {pause})"
    root = Path(__file__).resolve().parent.parent
    server = subprocess.Popen([sys.executable, "-c", code], cwd=root, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not listening(port):
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            raise PrivharError(f"the loopback stream server of {path} did not start")
        time.sleep(0.05)
    return server, url


SUMMARY = re.compile(
    r": (?P<frames_written>\d+) frames \S+ at (?P<frames_per_second>[\d.]+) frames/s;.*?"
    r"(?P<share_changed>[\d.]+)% of the frame changed;.*? (?P<frames_written_black>\d+) frames written black;.*?"
    r"latency p50 (?P<latency_p50_s>[\d.]+) s, p99 (?P<latency_p99_s>[\d.]+) s; "
    r"at most (?P<behind_s>-?[\d.]+) s behind the stream(?:; (?P<frames_dropped>\d+) frames dropped unwritten to "
    r"keep up)?(?:; detection lowered to every (?P<slowest_detection>\d+) frames to keep up)?; stopped: (?P<stopped>.*)$"
)


def summary_figures(line: str) -> dict[str, Any]:
    """The figures of ``privhar protect``'s live summary line.

    >>> summary_figures("tcp://h -> o: 40 frames 320x240 at 12.6 frames/s; people in 40; 11.2% of the frame changed; "
    ...     "coverage min 0.977; 0 frames written black; 3 segments; latency p50 0.64 s, p99 1.00 s; "
    ...     "at most 0.3 s behind the stream; stopped: it ended")
    {'frames_written': 40, 'frames_per_second': 12.6, 'share_changed': 0.112, 'frames_written_black': 0, \
'latency_p50_s': 0.64, 'latency_p99_s': 1.0, 'behind_s': 0.3, 'frames_dropped': 0, 'slowest_detection': 0, \
'stopped': 'it ended'}
    """
    found = SUMMARY.search(line)
    if found is None:
        raise PrivharError(f"not a live summary line: {line}")
    figures: dict[str, Any] = {
        key: float(value) if "." in value else int(value)
        for key, value in found.groupdict(default="0").items()
        if key != "stopped"
    }
    figures["share_changed"] = round(figures["share_changed"] / 100, 6)
    return {**figures, "stopped": found["stopped"]}


def run_live_bench(
    clips: list[Path],
    sizes: list[str],
    methods: list[str],
    seconds: float,
    out: Path,
    detectors: str = "centerface,mediapipe,motion",
    keep: Path | None = None,
    judge: bool = True,
    judge_every: int | None = None,
) -> dict[str, Any]:
    """Each method on each size's stream, served in real time: the figures of its summary and the frames sent; then,
    with ``judge``, every output against its stream by the independent face judge (:func:`judge_live`) on every
    ``judge_every``-th frame of the stream (None: once a second). The streams and outputs go to ``keep`` (a temporary
    folder without it)."""
    privhar = str(Path(sys.executable).with_name("privhar"))
    record: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(),
        },
        "clips": [clip.name for clip in clips],
        "seconds": seconds,
        "detectors": detectors,
        "judge": f"MTCNN (facenet-pytorch 2.6.0, benchmarks/face_judge.py) on the written frames at every "
        f"{judge_every or 'fps'}-th frame of the stream; released = a face found again at a raw face's place, moved "
        f"< {RELEASED_LEVELS:g} levels",
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as scratch:
        folder = keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for size in sizes:
            rows, columns, fps = SIZES[size]
            path = stream_file(clips, rows, columns, fps, seconds, folder / f"{size}.ts")
            for method in methods:
                written = folder / f"{size}-{method}"
                shutil.rmtree(written, ignore_errors=True)
                run = _live_run(privhar, path, written, method, detectors)
                sent = round(seconds * fps)
                run = {
                    "size": size,
                    "fps": fps,
                    "method": method,
                    "frames_sent": sent,
                    "frames_not_written": sent - run["frames_written"],
                    **run,
                }
                record["runs"].append(run)
                atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
            if judge:
                truth = raw_faces(path, judge_every or fps)
                for run in record["runs"]:
                    if run["size"] == size:
                        written = folder / f"{size}-{run['method']}"
                        run.update(judge_live(path, truth, written, run["starts"], fps))
                atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
    return record


def _live_run(
    privhar: str, path: Path, written: Path, method: str, detectors: str
) -> dict[str, Any]:
    """``privhar protect`` on ``path`` served in real time, into the folder ``written`` (its log beside it, as
    ``written``.log): its summary's figures and where each segment starts on the stream's clock (the log)."""
    server, url = served(path)
    command = [
        privhar,
        "protect",
        url,
        "-o",
        str(written),
        "--method",
        method,
        "--detectors",
        detectors,
        "--segment-seconds",
        "60",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    finally:
        server.kill()
    # the log beside the output: when frames were dropped and stretches written black
    written.with_name(f"{written.name}.log").write_text(done.stderr)
    line = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    if done.returncode or " -> " not in line:
        raise PrivharError(f"privhar protect {url} ({path.name}, {method}) failed: {line}")
    figures = summary_figures(line)
    figures["released_black"] = (
        line.split(" released black: ", 1)[1].split(";")[0] if " released black: " in line else ""
    )
    starts = {Path(name).name: float(start) for name, start in START.findall(done.stderr)}
    return {**figures, "starts": starts}


START = re.compile(r"^(.*\.mp4): from ([\d.]+) s of the stream$", re.MULTILINE)
JUDGE_BATCH = 16  # frames MTCNN takes at once (its pyramid of a 720p frame is a few hundred MB)


def raw_faces(path: Path, every: int) -> dict[int, list[Any]]:
    """The judge's faces in every ``every``-th frame of the stream (index → boxes; [] where it finds none)."""
    faces: dict[int, list[Any]] = {}
    batch: list[tuple[int, np.ndarray]] = []
    with av.open(str(path)) as container:
        for index, frame in enumerate(container.decode(video=0)):
            if index % every == 0:
                batch.append((index, frame.to_ndarray(format="rgb24")))
            if len(batch) == JUDGE_BATCH:
                faces |= _judged(batch)
                batch = []
    return faces | _judged(batch)


def _judged(batch: list[tuple[int, np.ndarray]]) -> dict[int, list[Any]]:
    if not batch:
        return {}
    found = judge_faces(np.stack([image for _, image in batch]))
    return {index: boxes for (index, _), boxes in zip(batch, found, strict=True)}


def written_frames(
    written: Path, starts: dict[str, float], fps: int
) -> Iterator[tuple[int, av.VideoFrame]]:
    """The frames of ``written``'s segments with their place on the stream (each segment's start, from the log, and
    the frame's own timestamp), in the stream's order."""
    for segment in sorted(written.glob("*.mp4")):
        with av.open(str(segment)) as container:
            first = None
            for frame in container.decode(video=0):
                first = frame.time if first is None else first
                yield round((starts[segment.name] + frame.time - first) * fps), frame


def judge_live(
    path: Path,
    truth: dict[int, list[Any]],
    written: Path,
    starts: dict[str, float],
    fps: int,
) -> dict[str, Any]:
    """The written frames at the judged places of the stream (``truth``'s) against the stream's frames there, decoded
    again from ``path``: judged, with a raw face, faces released, black."""
    judged = black_frames = face_frames = 0
    released = []  # (the stream's frame, the judge's box): a person looks at each
    batch: list[tuple[int, np.ndarray, np.ndarray]] = []
    with av.open(str(path)) as container:
        raw = enumerate(container.decode(video=0))
        at, raw_frame = -1, None
        for index, frame in written_frames(written, starts, fps):
            if index not in truth:
                continue
            image = frame.to_ndarray(format="rgb24")
            judged += 1
            black_frames += int(black(image[None])[0])
            if not truth[index]:
                continue  # no raw face there to release
            face_frames += 1
            while at < index:
                at, raw_frame = next(raw)
            if at != index:
                raise PrivharError(
                    f"{written}: a written frame at the stream's frame {index}, after {at}"
                )
            batch.append((index, raw_frame.to_ndarray(format="rgb24"), image))
            if len(batch) == JUDGE_BATCH:
                released += _released(batch, truth)
                batch = []
    released += _released(batch, truth)
    return {
        "frames_judged": judged,
        "raw_face_frames_judged": face_frames,
        "faces_released": len(released),
        "released_at": released,
        "black_frames_judged": black_frames,
    }


def _released(
    batch: list[tuple[int, np.ndarray, np.ndarray]], truth: dict[int, list[Any]]
) -> list[tuple[int, list[int]]]:
    if not batch:
        return []
    before = np.stack([raw for _, raw, _ in batch])
    after = np.stack([image for _, _, image in batch])
    found = released_faces(before, [truth[index] for index, _, _ in batch], after)
    return [(batch[t][0], [round(v) for v in box]) for t, box in found]
