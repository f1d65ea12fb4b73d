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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import av
import cv2
import numpy as np

from tasks.anonymize.coverage import changed
from tasks.anonymize.people import detect_in, video_identity
from tasks.anonymize.release import Protected, protect_clip
from tasks.anonymize.source_clip import SourceClip, Upscale
from tasks.anonymize.video_container import (
    VIDEO_CODECS,
    chunks,
    copy_audio,
    encode_frames,
    frame_rate,
    open_input,
    open_output,
    start_stream,
)
from tasks.core.anonymize_catalogue import method_of
from tasks.core.errors import PrivharError, printable
from tasks.core.params import AnonymizeParams
from tasks.core.progress import progress
from tasks.core.storage import staging_file

log = logging.getLogger(__name__)
DETECT_SECONDS = 0.25  # auto --detect-every: a search every quarter second or sooner, tracks between (people move a box width in ~1 s)
DETECT_ROWS = 240  # auto --detect-scale: people are searched on frames of at most this many rows (HOG, Haar and
# mediapipe were tuned on 320 x 240 UCF101 frames: hog_upscale enlarges those; a 720p frame enlarged twice is 9x the work)

# the most pixels a stretch holds: peak memory is a few times their bytes whatever the frame size (issue 82; 1080p and
# 4K measured in docs/methods/anonymization.md); 4 s of 720p at 30 frames/s fit, 1080p gets 2 s and 4K half a second
STRETCH_PIXELS = 128 * 2**20


def stretch_frames(seconds: float, fps: float, height: int, width: int) -> int:
    """Frames a stretch holds: ``seconds`` of video, fewer where they would pass :data:`STRETCH_PIXELS` (issue 82: a 4 s
    4K stretch at 30 frames/s took over 15 GB), at least 2.

    >>> stretch_frames(4.0, 30.0, 720, 1280), stretch_frames(4.0, 30.0, 1080, 1920), stretch_frames(4.0, 30.0, 2160, 3840)
    (120, 64, 16)
    """
    return max(2, min(round(seconds * fps), STRETCH_PIXELS // max(1, height * width)))


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

    @classmethod
    def of(cls, options: dict[str, Any]) -> ProtectOptions:
        """The command's options (``detectors`` comma-separated)."""
        return cls(**{**options, "detectors": tuple(options["detectors"].split(","))})


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
    black_frames: int = (
        0  # frames written all but black, for any reason (the gate's, or a method that removed all)
    )
    coverage_min: float = float("nan")
    people_frames: int = 0  # frames with a person (or face) found
    covered_share: float = (
        0.0  # mean share of each frame the protection changed (over-masking is a cost too)
    )
    seconds: float = 0.0
    announced: int = 0  # frames the video's header announces (0: it does not say)
    replaced: bool = False  # an earlier output was there

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
            f"{self.covered_share:.1%} of the frame changed; coverage min {self.coverage_min:.3f}; "
            f"{self.black_frames} frames written black{held}{self._notes()}"
        )

    def _notes(self) -> str:
        """What a user would otherwise not learn (issue 82): a video cut short, an earlier output replaced."""
        notes = ""
        if self.announced > self.frames:
            notes += f"; only {self.frames} of the {self.announced} frames its header announces could be decoded"
        if self.replaced:
            notes += "; replaced the file that was there"
        return notes


BLACK_LEVELS = 8  # a frame whose every pixel is at most this bright is black


def black(frames: np.ndarray) -> np.ndarray:
    """(T,) bool: the frames left all but black (issue 82: blackout wrote 1 192 black frames of 3 333 while its summary
    said none was released black: the gate's are counted there, a method's that removed everything were not)."""
    return frames.reshape(len(frames), -1).max(axis=1) <= BLACK_LEVELS


def output_for(source: Path, root: Path | None, target: Path) -> Path:
    """Where ``source`` goes: ``target`` itself when it names a video file, else inside the folder ``target`` (under
    its path relative to ``root`` when it came from a folder)."""
    if target.suffix.lower() in VIDEO_CODECS:
        return target
    relative = source.relative_to(root) if root is not None else Path(source.name)
    suffix = source.suffix.lower() if source.suffix.lower() in VIDEO_CODECS else ".mp4"
    return target / relative.with_suffix(suffix)


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
    summary = Summary(printable(str(source)), printable(str(target)))
    container = open_input(source)
    staging = None
    started = time.perf_counter()
    try:
        staging = staging_file(target)
        summary.replaced = target.exists()
        _protect_stream(source, container, staging, options, params, summary)
        os.replace(staging, target)
    except OSError as error:  # named by the output, not the hidden staging file (issue 82)
        raise PrivharError(
            f"{target}: cannot be written ({error.strerror or error}); nothing was written for it"
        ) from None
    except av.FFmpegError as error:  # FFmpeg's words, not its error number (issue 82)
        reason = getattr(error, "strerror", None) or str(error).splitlines()[0][:160]
        raise PrivharError(
            f"{source}: {reason} after {summary.frames} frames; nothing was written for it"
        ) from None
    finally:
        container.close()
        if staging is not None:
            staging.unlink(missing_ok=True)
    summary.seconds = time.perf_counter() - started
    return summary


def stream_params(
    stream: Any, fps: float, options: ProtectOptions, params: AnonymizeParams
) -> tuple[AnonymizeParams, float]:
    """The params a stream is released under, and the scale its people are detected at: the chosen finders, key frames
    every ``DETECT_SECONDS``, on frames ``DETECT_ROWS`` high; the masks come up from the detection scale, so their
    margin in frame pixels grows with them."""
    every = options.detect_every or max(1, math.ceil(fps * DETECT_SECONDS - 1e-9))
    scale = options.detect_scale or min(1.0, DETECT_ROWS / max(stream.height, 1))
    update: dict[str, Any] = {
        "source": "ensemble",
        "ensemble": list(options.detectors),
        "detect_every": every,
        "mask_dilation": math.ceil(params.mask_dilation / scale),
    }
    if options.blur_to_size:
        update |= blur_for(stream.height, params)
    return params.model_copy(update=update), scale


def _protect_stream(
    source: Path,
    container: Any,
    staging: Path,
    options: ProtectOptions,
    params: AnonymizeParams,
    summary: Summary,
) -> None:
    """Every stretch of ``container``'s video protected and encoded into ``staging`` (audio copied when kept)."""
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    fps = frame_rate(stream)
    summary.announced = int(stream.frames or 0)
    output, video, audio = open_output(
        staging,
        container,
        fps,
        keep_audio=options.keep_audio,
        keep_metadata=options.keep_metadata,
    )
    size = stretch_frames(options.chunk_seconds, fps, stream.height, stream.width)
    params, scale = stream_params(stream, fps, options, params)
    bar = progress(summary.announced or 1, f"protect {printable(source.name)}", unit="frame")
    coverages, changed_frames = [], 0.0
    with output:
        for frames, stamps, rotation in chunks(container, size):
            if summary.frames == 0:
                summary.height, summary.width = start_stream(video, frames, rotation)
            frames = frames[:, : video.height, : video.width]
            released = protect_stretch(source, frames, fps, scale, options, params, summary)
            if not np.isnan(released.coverage):
                coverages.append(released.coverage)
            changed_frames += float(changed(frames, released.frames, 0).mean()) * len(frames)
            summary.black_frames += int(black(released.frames).sum())
            encode_frames(video, output, released.frames, stamps, summary.frames)
            summary.frames += len(frames)
            summary.stretches += 1
            bar.update(len(frames))
            del frames, released  # before the next stretch is read: a 4K stretch is gigabytes
        if summary.frames == 0:
            raise PrivharError(f"{source}: no decodable video frames")
        for packet in video.encode():
            output.mux(packet)
        if audio:
            copy_audio(source, output, audio)
    bar.close()
    summary.coverage_min = min(coverages) if coverages else float("nan")
    summary.covered_share = changed_frames / max(summary.frames, 1)


def protect_stretch(
    source: Path,
    frames: np.ndarray,
    fps: float,
    scale: float,
    options: ProtectOptions,
    params: AnonymizeParams,
    summary: Summary,
) -> Protected:
    """One stretch's people found and its frames released; a stretch the gate fails is blacked out where it failed
    (``--on-fail black``) or stops the file (``skip``)."""
    entry = method_of(options.method)
    found = None
    if entry.people:
        found = detect_in(
            _detection_clip(frames, fps, scale),
            entry.people,
            source="ensemble",
            params=params,
            identity=video_identity(source.name),
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
    return result


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


def _is_input(path: Path, folder: Path, target: Path) -> bool:
    """Whether a file found in ``folder`` is a video to protect: not hidden (a writer's staging file, a killed one's
    left-over), and not inside the output folder ``target`` (issue 82: an output folder inside the input folder had
    each rerun protect the earlier outputs again, one level deeper)."""
    inside = path.relative_to(folder).parts
    if path.suffix.lower() not in VIDEO_FILES or any(part.startswith(".") for part in inside):
        return False
    return target.resolve() not in path.resolve().parents and path.is_file()


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
            files = sorted(path for path in source.rglob("*") if _is_input(path, source, target))
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
    if entry.name == "none":  # issue 82: it wrote the unprotected video with exit 0
        raise PrivharError(
            "--method none: copies the video unprotected (the pipeline's raw row); protect needs a method that removes "
            "people or faces"
        )
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
        return printable(str(error))


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

    chosen = ProtectOptions.of(options)
    # the paths first: a bad one is refused before the finders are imported
    pairs = pairs_of(sources, target)
    check_options(chosen)
    results = map_on_processes(
        partial(_protect_one, options=chosen, params=params),
        pairs,
        workers=min(worker_count(workers), len(pairs)),
        desc="protect",
    )
    return results


def total_line(results: list[Summary | str], method: str) -> str:
    """The command's last line: videos written, frames, the rate a worker kept, stretches released black by the gate
    and frames written black for any reason."""
    done = [result for result in results if isinstance(result, Summary)]
    frames, seconds = sum(s.frames for s in done), sum(s.seconds for s in done)
    return (
        f"protect: {len(done)} of {len(results)} videos written with {method}, {frames} frames, "
        f"{frames / max(seconds, 1e-9):.1f} frames/s a worker; "
        f"{sum(len(s.held_back) for s in done)} stretches released black by the gate, "
        f"{sum(s.black_frames for s in done)} frames written black in all"
    )
