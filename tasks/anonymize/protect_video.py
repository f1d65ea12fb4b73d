"""``privhar protect IN... -o OUT``: people (or faces) removed from whole videos at their own resolution and rate.

The anonymize stage's core on a video instead of a decoded clip: the same people finder
(:func:`tasks.anonymize.people.detect_in`) and the same method and fail-closed gate
(:func:`tasks.anonymize.release.protect_clip`), run on stretches of ``chunk_seconds`` of the video in turn (a long
video never sits in memory whole). People are found on every ``detect_every``-th frame (by default four times a
second), on frames scaled by ``detect_scale`` (by default to at most 240 rows, the size the detectors' settings were
chosen for), and tracks carry them through the frames between (:mod:`tasks.anonymize.tracks`). A stretch the
gate holds back is released black (``on_fail: blackout``; where a face was found again, only the frames around it) or
the whole video is not written (``skip``); the summary says how many stretches and frames, and why.

The output is written beside its final name and renamed into place at the end: nothing half-written. Audio packets
are copied unchanged with ``keep_audio``; container and stream metadata (a camera's serial number, a GPS position)
are dropped unless ``keep_metadata``.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, get_args

import av
import cv2
import numpy as np

from tasks.anonymize.coverage import changed
from tasks.anonymize.people import detect_in, video_identity
from tasks.anonymize.release import protect_clip
from tasks.anonymize.source_clip import SourceClip, Upscale
from tasks.core.anonymize_catalogue import method_of
from tasks.core.datasets import open_video
from tasks.core.errors import PrivharError
from tasks.core.params import AnonymizeParams
from tasks.core.progress import progress
from tasks.core.storage import write_failed

log = logging.getLogger(__name__)
DETECT_SECONDS = 0.25  # auto --detect-every: a search every quarter second or sooner, tracks between (people move a box width in ~1 s)
DETECT_ROWS = 240  # auto --detect-scale: people are searched on frames of at most this many rows (HOG, Haar and
# mediapipe were tuned on 320 x 240 UCF101 frames: hog_upscale enlarges those; a 720p frame enlarged twice is 9x the work)
VIDEO_CODECS = {".mp4": "libx264", ".mkv": "libx264", ".mov": "libx264", ".avi": "mpeg4"}
QUALITY = {"libx264": {"crf": "18", "preset": "veryfast"}, "mpeg4": {"qscale": "2"}}


@dataclass(frozen=True)
class ProtectOptions:
    """What ``privhar protect`` asks of each video, beyond the anonymize section's params."""

    method: str
    detectors: tuple[str, ...]
    detect_scale: float = 0.0  # 0: auto, frames scaled to at most DETECT_ROWS rows
    detect_every: int = 0  # 0: auto, a key frame every DETECT_SECONDS
    chunk_seconds: float = 4.0
    on_fail: str = "blackout"  # blackout: a held-back stretch is released black | skip: the video is not written
    keep_audio: bool = False
    keep_metadata: bool = False
    seed: int = 0  # which avatar each person gets (not a privacy parameter)
    blur_to_size: bool = (
        True  # face_blur's kernel and σ, the paper's at 320 x 240, scaled to the frame's height
    )


@dataclass
class Summary:
    """One video's outcome: what the command prints and the benchmark reads."""

    input: str
    output: str
    frames: int = 0
    width: int = 0
    height: int = 0
    stretches: int = 0
    held_back: list[str] = field(default_factory=list)  # one reason per stretch released black
    held_back_frames: int = 0
    coverage_min: float = float("nan")
    people_frames: int = 0  # frames with a person (or face) found
    covered_share: float = (
        0.0  # mean share of each frame the protection changed (over-masking is a cost too)
    )
    seconds: float = 0.0

    def line(self) -> str:
        held = (
            f"; {self.held_back_frames} frames in {len(self.held_back)} of {self.stretches} stretches "
            f"released black: {self.held_back[0]}"
            if self.held_back
            else ""
        )
        rate = self.frames / max(self.seconds, 1e-9)
        return (
            f"{self.input} -> {self.output}: {self.frames} frames "
            f"{self.width}x{self.height} at {rate:.1f} frames/s; people in {self.people_frames}; "
            f"{self.covered_share:.1%} of the frame changed; coverage min {self.coverage_min:.3f}{held}"
        )


def output_for(source: Path, root: Path | None, target: Path) -> Path:
    """Where ``source`` goes: ``target`` itself when it names a video file, else inside the folder ``target`` (under
    its path relative to ``root`` when it came from a folder)."""
    if target.suffix.lower() in VIDEO_CODECS:
        return target
    relative = source.relative_to(root) if root is not None else Path(source.name)
    suffix = source.suffix.lower() if source.suffix.lower() in VIDEO_CODECS else ".mp4"
    return target / relative.with_suffix(suffix)


def _chunks(container: av.container.InputContainer, size: int) -> Iterator[np.ndarray]:
    """The first video stream's frames, (T, H, W, 3) uint8 RGB, ``size`` at a time."""
    batch: list[np.ndarray] = []
    for frame in container.decode(video=0):
        batch.append(frame.to_ndarray(format="rgb24"))
        if len(batch) == size:
            yield np.stack(batch)
            batch = []
    if batch:
        yield np.stack(batch)


def _detection_clip(frames: np.ndarray, fps: float, scale: float) -> SourceClip:
    """The frames detectors search: the stretch itself, or a copy scaled by ``scale`` whose finds map back up."""
    full = (int(frames.shape[1]), int(frames.shape[2]))
    if scale == 1.0:
        return SourceClip(frames, np.arange(len(frames)), fps, None, full)
    size = (max(16, round(full[1] * scale)), max(16, round(full[0] * scale)))
    small = np.stack([cv2.resize(frame, size, interpolation=cv2.INTER_AREA) for frame in frames])
    return SourceClip(
        small, np.arange(len(frames)), fps, Upscale(small.shape[1:3], full), full, frames
    )


PAPER_ROWS = 240  # paper 000 §4.2's face blur (kernel 21, σ 10) is for 320 x 240 frames


def blur_for(height: int, params: AnonymizeParams) -> dict[str, Any]:
    """face_blur's kernel and σ for frames ``height`` rows tall: the anonymize section's, scaled from 240 rows (the same
    blur relative to the face). At 528 rows the paper's 21-pixel kernel left a face Haar still found, and barely changed
    (``tasks.anonymize.release.FACE_CHANGE_LEVELS``), in 38 of 120 frames.

    >>> from tasks.core.params import AnonymizeParams
    >>> params = AnonymizeParams.model_construct(face_blur_kernel=21, face_blur_sigma=10.0)
    >>> blur_for(240, params), blur_for(576, params)
    ({'face_blur_kernel': 21, 'face_blur_sigma': 10.0}, {'face_blur_kernel': 51, 'face_blur_sigma': 24.0})
    """
    scale = max(1.0, height / PAPER_ROWS)
    kernel = round(params.face_blur_kernel * scale) // 2 * 2 + 1
    return {"face_blur_kernel": kernel, "face_blur_sigma": round(params.face_blur_sigma * scale, 3)}


def _open_input(source: Path) -> av.container.InputContainer:
    if source.is_dir():
        raise PrivharError(f"{source}: is a folder; expected a video file")
    if not source.is_file():
        raise PrivharError(f"{source}: no such file")
    try:
        container = open_video(source)
    except (av.FFmpegError, OSError, ValueError) as error:
        raise PrivharError(
            f"{source}: not a readable video ({str(error).splitlines()[0][:120]})"
        ) from None
    if not container.streams.video:
        container.close()
        raise PrivharError(f"{source}: has no video stream")
    return container


def _open_output(
    staging: Path, source: av.container.InputContainer, fps: float, options: ProtectOptions
) -> tuple[av.container.OutputContainer, Any, dict[int, Any]]:
    """The output container, its video stream (created at the first frame, when the size is known) and the audio
    streams copied from the input's (input stream index → output stream)."""
    output = av.open(str(staging), mode="w", format=_format_of(staging))
    if options.keep_metadata:
        output.metadata.update(source.metadata)
    audio: dict[int, Any] = {}
    if options.keep_audio:
        for stream in source.streams.audio:
            audio[stream.index] = output.add_stream_from_template(stream)
    codec = VIDEO_CODECS[staging.suffix.lower()]
    video = output.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))
    video.pix_fmt = "yuv420p"
    video.options = dict(QUALITY[codec])
    if options.keep_metadata:
        video.metadata.update(source.streams.video[0].metadata)
    return output, video, audio


def _format_of(path: Path) -> str:
    return {".mp4": "mp4", ".mkv": "matroska", ".mov": "mov", ".avi": "avi"}[path.suffix.lower()]


def _encode(output: Any, video: Any, frames: np.ndarray, first: int) -> None:
    for offset, frame in enumerate(frames):
        picture = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
        picture.pts = first + offset
        for packet in video.encode(picture):
            output.mux(packet)


def _copy_audio(source: Path, output: Any, audio: dict[int, Any]) -> None:
    """Every audio packet of ``source`` into its copied stream, unchanged (demuxed again: the video pass decoded)."""
    with open_video(source) as container:
        wanted = [container.streams[index] for index in audio]
        for packet in container.demux(wanted):
            if packet.dts is None:
                continue
            packet.stream = audio[packet.stream.index]
            output.mux(packet)


def protect_file(
    source: Path,
    target: Path,
    *,
    options: ProtectOptions,
    params: AnonymizeParams,
) -> Summary:
    """Protect the video ``source`` into ``target``; one-line errors name the file, nothing is left half-written."""
    if target.resolve() == source.resolve():
        raise PrivharError(f"{target}: is the input video too; write the protected copy elsewhere")
    entry = method_of(options.method)
    params = params.model_copy(update={"source": "ensemble", "ensemble": list(options.detectors)})
    summary = Summary(str(source), str(target))
    container = _open_input(source)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.partial{target.suffix}")
    started = time.perf_counter()
    try:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        fps = float(stream.average_rate or stream.guessed_rate or 25.0)
        total = int(stream.frames or 0)
        output, video, audio = _open_output(staging, container, fps, options)
        size = max(2, round(options.chunk_seconds * fps))
        every = options.detect_every or max(1, math.ceil(fps * DETECT_SECONDS - 1e-9))
        scale = options.detect_scale or min(1.0, DETECT_ROWS / max(stream.height, 1))
        # the masks come up from the detection scale: their margin in frame pixels grows with them
        update: dict[str, Any] = {
            "detect_every": every,
            "mask_dilation": math.ceil(params.mask_dilation / scale),
        }
        if options.blur_to_size:
            update |= blur_for(stream.height, params)
        params = params.model_copy(update=update)
        identity = video_identity(source.name)
        bar = progress(total or 1, f"protect {source.name}", unit="frame")
        coverages, changed_frames = [], 0.0
        with output:
            for frames in _chunks(container, size):
                if summary.frames == 0:
                    video.width, video.height = frames.shape[2] // 2 * 2, frames.shape[1] // 2 * 2
                    summary.height, summary.width = frames.shape[1:3]
                frames = frames[:, : video.height, : video.width]
                found = None
                if entry.people:
                    found = detect_in(
                        _detection_clip(frames, fps, scale),
                        entry.people,
                        source="ensemble",
                        params=params,
                        identity=identity,
                    )
                    summary.people_frames += int(_any_people(found).sum())
                result = protect_clip(
                    frames,
                    found,
                    method=options.method,
                    params=params,
                    seed=options.seed,
                    people_source="detectors " + "+".join(options.detectors),
                )
                if result.reason:
                    if options.on_fail == "skip":
                        raise PrivharError(
                            f"{source}: not written: frames {summary.frames}-{summary.frames + len(frames) - 1}: "
                            f"{result.reason}"
                        )
                    summary.held_back.append(result.reason)
                    summary.held_back_frames += len(result.failed) or len(frames)
                    result = result.blacked_out(only_failed=True)
                if not np.isnan(result.coverage):
                    coverages.append(result.coverage)
                changed_frames += float(changed(frames, result.frames, 0).mean()) * len(frames)
                _encode(output, video, result.frames, summary.frames)
                summary.frames += len(frames)
                summary.stretches += 1
                bar.update(len(frames))
            if summary.frames == 0:
                raise PrivharError(f"{source}: no decodable video frames")
            for packet in video.encode():
                output.mux(packet)
            if audio:
                _copy_audio(source, output, audio)
        bar.close()
        os.replace(staging, target)
    except OSError as error:
        raise write_failed(error, target) from None
    except av.FFmpegError as error:
        raise PrivharError(f"{source}: {str(error).splitlines()[0][:160]}") from None
    finally:
        container.close()
        staging.unlink(missing_ok=True)
    summary.seconds = time.perf_counter() - started
    summary.coverage_min = min(coverages) if coverages else float("nan")
    summary.covered_share = changed_frames / max(summary.frames, 1)
    return summary


def _any_people(found: Any) -> np.ndarray:
    """(T,) bool: frames with a person pixel or a face box in the arrays found."""
    arrays = found.arrays
    if "person_mask" in arrays:
        return arrays["person_mask"].any(axis=(1, 2))
    boxes = arrays["face_box"]
    return np.isfinite(boxes).all(axis=-1).any(axis=-1)


VIDEO_FILES = (".avi", ".mp4", ".mkv", ".mov", ".webm", ".mpg", ".mpeg", ".m4v", ".wmv", ".flv")
# the people finders anonymize.ensemble accepts, read from its type: one list for the stage and the command
DETECTORS = get_args(get_args(AnonymizeParams.model_fields["ensemble"].annotation)[0])


def pairs_of(sources: tuple[Path, ...], target: Path) -> list[tuple[Path, Path]]:
    """(input video, output path) of every video the command was given: files as named, folders searched for files
    with a video suffix; one line for a folder without any, or a file output given several videos."""
    if target.suffix and target.suffix.lower() not in VIDEO_CODECS and not target.is_dir():
        raise PrivharError(
            f"-o {target}: cannot write a video as {target.suffix!r} (expected a folder or a file ending in "
            f"{', '.join(VIDEO_CODECS)})"
        )
    pairs = []
    for source in sources:
        if source.is_dir():
            files = sorted(
                path
                for path in source.rglob("*")
                if path.suffix.lower() in VIDEO_FILES and path.is_file()
            )
            if not files:
                raise PrivharError(f"{source}: holds no video file ({', '.join(VIDEO_FILES)})")
            pairs += [(path, output_for(path, source, target)) for path in files]
        else:
            pairs.append((source, output_for(source, None, target)))
    if target.suffix.lower() in VIDEO_CODECS and len(pairs) > 1:
        raise PrivharError(
            f"-o {target}: names one video file, but {len(pairs)} videos are given; name a folder"
        )
    outputs = [output for _, output in pairs]
    if len(set(outputs)) < len(outputs):
        twice = next(output for output in outputs if outputs.count(output) > 1)
        raise PrivharError(f"-o {target}: two inputs would both be written to {twice}")
    return pairs


def check_options(options: ProtectOptions) -> None:
    """The method and the detectors, checked before any video is read (one line each)."""
    entry = method_of(options.method)
    if entry.name == "low_res":
        from tasks.anonymize.obfuscate import low_res_size

        low_res_size(options.method)
    unknown = [name for name in options.detectors if name not in DETECTORS]
    if unknown or not options.detectors:
        raise PrivharError(
            f"--detectors {','.join(options.detectors)!r}: expected a comma-separated list of {', '.join(DETECTORS)}"
        )
    if entry.people and "mediapipe" in options.detectors:
        from tasks.anonymize.detector import check_mediapipe

        check_mediapipe()
    if entry.people and "centerface" in options.detectors:
        from tasks.anonymize.centerface import check_centerface

        check_centerface()
    if entry.name == "avatar" and "mediapipe" not in options.detectors:
        raise PrivharError(
            "--method avatar needs mediapipe in --detectors: its poses come from BlazePose"
        )


def _protect_one(
    pair: tuple[Path, Path], *, options: ProtectOptions, params: AnonymizeParams
) -> Summary | str:
    """One video's summary, or the one line that says why it was not protected."""
    try:
        return protect_file(pair[0], pair[1], options=options, params=params)
    except PrivharError as error:
        return str(error)


def protect_videos(
    sources: tuple[Path, ...],
    target: Path,
    *,
    params: AnonymizeParams,
    workers: int,
    **options: Any,
) -> list[Summary | str]:
    """Protect every video of ``sources`` into ``target`` on ``workers`` processes;
    return each video's summary, or the line that says why it was not protected."""
    from functools import partial

    from tasks.core.parallel import map_on_processes, worker_count

    chosen = ProtectOptions(**{**options, "detectors": tuple(options["detectors"].split(","))})
    check_options(chosen)
    pairs = pairs_of(sources, target)
    results = map_on_processes(
        partial(_protect_one, options=chosen, params=params),
        pairs,
        workers=min(worker_count(workers), len(pairs)),
        desc="protect",
    )
    return results


def total_line(results: list[Summary | str], method: str) -> str:
    """The command's last line: videos written, frames, the rate a worker kept, stretches released black."""
    done = [result for result in results if isinstance(result, Summary)]
    frames, seconds = sum(s.frames for s in done), sum(s.seconds for s in done)
    return (
        f"protect: {len(done)} of {len(results)} videos written with {method}, {frames} frames, "
        f"{frames / max(seconds, 1e-9):.1f} frames/s a worker; "
        f"{sum(len(s.held_back) for s in done)} stretches released black"
    )
