"""Frames in, protected frames out: ``privhar protect``'s core, under its file and live front doors and for a program
that has its own frames (issue 84's Python entry point, :class:`FrameProtector`).

The anonymize stage's core on stretches of a video instead of decoded clips: the same people finder
(:func:`tasks.anonymize.people.detect_in`) and the same method and fail-closed gate
(:func:`tasks.anonymize.release.protect_clip`), on ``chunk_seconds`` of frames at a time. People are found on every
``detect_every``-th frame (by default four times a second), on frames scaled by ``detect_scale`` (by default to at
most 240 rows, the size the detectors' settings were chosen for), and tracks carry them through the frames between
(:mod:`tasks.anonymize.tracks`). A stretch the gate holds back is released black (``on_fail: blackout``; where a face
was found again, only the frames around it) or stops the video (``skip``, files only); the summary says how many
stretches and frames, and why.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import cv2
import numpy as np

from tasks.anonymize.coverage import changed
from tasks.anonymize.people import detect_in, video_identity
from tasks.anonymize.release import Protected, protect_clip
from tasks.anonymize.source_clip import SourceClip, Upscale
from tasks.anonymize.tracks import Box
from tasks.core.anonymize_catalogue import method_of
from tasks.core.errors import PrivharError
from tasks.core.params import AnonymizeParams

log = logging.getLogger(__name__)
DETECT_SECONDS = 0.25  # auto --detect-every: a search every quarter second or sooner, tracks between (people move a box width in ~1 s)
# a live run keeping up lowers the search rate to this at the slowest, then drops frames (issue 84: at once a second a
# standing man's 11 x 16 face at 1280 x 720 was released; the tracks are held a key frame's distance, half a box
# width of a walker at half a second)
SLOWEST_DETECT_SECONDS = 0.5
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


def stream_params(
    height: int, fps: float, options: ProtectOptions, params: AnonymizeParams
) -> tuple[AnonymizeParams, float]:
    """The params a stream is released under, and the scale its people are detected at: the chosen finders, key frames
    every ``DETECT_SECONDS``, on frames ``DETECT_ROWS`` high; the masks come up from the detection scale, so their
    margin in frame pixels grows with them."""
    every = options.detect_every or max(1, math.ceil(fps * DETECT_SECONDS - 1e-9))
    scale = options.detect_scale or min(1.0, DETECT_ROWS / max(height, 1))
    update: dict[str, Any] = {
        "source": "ensemble",
        "ensemble": list(options.detectors),
        "detect_every": every,
        "mask_dilation": math.ceil(params.mask_dilation / scale),
    }
    if options.blur_to_size:
        update |= blur_for(height, params)
    return params.model_copy(update=update), scale


def protect_stretch(
    source: Path,
    frames: np.ndarray,
    fps: float,
    scale: float,
    options: ProtectOptions,
    params: AnonymizeParams,
    summary: Summary,
    gate: AnonymizeParams | None = None,
    before: tuple[list[Box], ...] = (),
) -> tuple[Protected, tuple[list[Box], ...]]:
    """One stretch's people found (at ``params.detect_every``; the faces found in the frames ``before`` it followed
    into it) and its frames released and gated (the gate's face judge at ``gate.detect_every``, by default the same); a
    stretch the gate fails is blacked out where it failed (``--on-fail black``) or stops the file (``skip``). Returns it
    and the faces found in each of its frames."""
    entry = method_of(options.method)
    found, finds = None, ()
    if entry.people:
        found = detect_in(
            _detection_clip(frames, fps, scale),
            entry.people,
            source="ensemble",
            params=params,
            identity=video_identity(source.name),
            before=before,
        )
        finds = found.face_finds
        summary.people_frames += int(_any_people(found).sum())
    result = protect_clip(
        frames,
        found,
        method=options.method,
        params=gate or params,
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
    return result, finds


def _any_people(found: Any) -> np.ndarray:
    """(T,) bool: frames with a person pixel or a face box in the arrays found."""
    arrays = found.arrays
    if "person_mask" in arrays:
        return arrays["person_mask"].any(axis=(1, 2))
    boxes = arrays["face_box"]
    return np.isfinite(boxes).all(axis=-1).any(axis=-1)


# the people finders anonymize.ensemble accepts, read from its type: one list for the stage and the command
DETECTORS = get_args(get_args(AnonymizeParams.model_fields["ensemble"].annotation)[0])


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


@dataclass(frozen=True)
class ReleasedFrame:
    """One frame as :class:`FrameProtector` releases it, with the gate's verdict on it."""

    image: np.ndarray  # (H, W, 3) uint8 RGB: protected, or black where the gate held it back
    timestamp: float  # as it was given
    passed: bool  # False: the gate held it back and it is black
    reason: str = ""  # why it was held back


class FrameProtector:
    """``privhar protect``'s core on frames a program hands it: :meth:`push` takes an RGB frame and its timestamp and
    returns the frames of a stretch once it is complete (``chunk_seconds`` of them: the gate judges a stretch whole),
    each protected and with the gate's verdict; :meth:`flush` releases the rest at the end. :meth:`protect` is one
    stretch at a time, as the command's file and live paths call it. Nothing leaves unchecked: a stretch the gate holds
    back comes out black (``on_fail`` blackout only; ``skip`` stops a video, which a stream of frames cannot undo)."""

    def __init__(
        self,
        fps: float,
        *,
        params: AnonymizeParams,
        options: ProtectOptions,
        name: str = "frames",
        summary: Summary | None = None,
    ) -> None:
        check_options(options)
        if not fps > 0:
            raise PrivharError(f"fps {fps}: expected frames a second above 0")
        self.fps, self.options, self.name = float(fps), options, name
        self.summary = summary or Summary(name, "")
        # set for the frame size at the first stretch
        self.params, self.scale, self.size, self.gate = params, 1.0, 0, params
        self._given = params
        self._waiting: list[tuple[np.ndarray, float]] = []
        # the faces found in the last frames of the stretch before, whose tracks go on into the next (issue 84: a
        # cyclist found at the end of one second was held still through the next, lagging his face by half its width)
        self._finds: tuple[list[Box], ...] = ()

    def start(self, height: int, width: int) -> int:
        """The params and the detection scale for frames ``height`` × ``width`` (once); the frames a stretch holds."""
        if not self.size:
            self.params, self.scale = stream_params(height, self.fps, self.options, self._given)
            self.size = stretch_frames(self.options.chunk_seconds, self.fps, height, width)
            self.gate = (
                self.params
            )  # the gate judges at the stream's own rate whatever the finder's
        return self.size

    @property
    def fastest(self) -> int:
        """The detection interval the stream starts at: a live run may lower the finder's rate, and raise it again to
        this; the gate's stays at it."""
        return self.gate.detect_every

    @property
    def slowest(self) -> int:
        """The longest detection interval a live run may lower the finder's to (``SLOWEST_DETECT_SECONDS``)."""
        return max(self.fastest, round(self.fps * SLOWEST_DETECT_SECONDS))

    @property
    def detect_every(self) -> int:
        """The finder's detection interval (a live run lowers its rate to keep up; the gate's stays at
        :attr:`fastest`: a face released while people are searched once a second is judged as often as before)."""
        return self.params.detect_every

    @detect_every.setter
    def detect_every(self, every: int) -> None:
        if every != self.params.detect_every:
            self.params = self.params.model_copy(update={"detect_every": every})

    def protect(self, frames: np.ndarray) -> Protected:
        """One stretch (T, H, W, 3) of uint8 RGB protected and gated, and counted in :attr:`summary`."""
        self.start(*frames.shape[1:3])
        summary = self.summary
        released, finds = protect_stretch(
            Path(self.name),
            frames,
            self.fps,
            self.scale,
            self.options,
            self.params,
            summary,
            self.gate,
            self._finds,
        )
        # the last two searches' frames at the slowest rate: the way a face was going
        self._finds = finds[-2 * self.slowest :]
        summary.coverage_min = float(
            np.fmin(summary.coverage_min, released.coverage)
        )  # NaN: not gated
        share = float(
            changed(frames, released.frames, 0).mean()
        )  # the running mean over the frames
        summary.covered_share = (summary.covered_share * summary.frames + share * len(frames)) / (
            summary.frames + len(frames)
        )
        summary.black_frames += int(black(released.frames).sum())
        summary.frames += len(frames)
        summary.stretches += 1
        return released

    def push(self, image: np.ndarray, timestamp: float) -> list[ReleasedFrame]:
        """``image`` (H, W, 3) uint8 RGB, taken at ``timestamp``: the stretch it completes, released (else [])."""
        shape = self._waiting[0][0].shape if self._waiting else None
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise PrivharError(
                f"frame {self.summary.frames + len(self._waiting)}: expected an (H, W, 3) uint8 RGB array, "
                f"got {image.dtype} {image.shape}"
            )
        if shape is not None and image.shape != shape:
            raise PrivharError(
                f"frame {self.summary.frames + len(self._waiting)}: {image.shape} differs from the stream's {shape}"
            )
        self._waiting.append((image, timestamp))
        if len(self._waiting) < self.start(*image.shape[:2]):
            return []
        return self.flush()

    def flush(self) -> list[ReleasedFrame]:
        """The frames waiting (a stretch shorter than ``chunk_seconds``), released: at the end of the frames."""
        if not self._waiting:
            return []
        waiting, self._waiting = self._waiting, []
        released = self.protect(np.stack([image for image, _ in waiting]))
        held = set(released.failed or range(len(waiting))) if released.reason else set()
        return [
            ReleasedFrame(frame, stamp, index not in held, released.reason if index in held else "")
            for index, (frame, (_, stamp)) in enumerate(zip(released.frames, waiting, strict=True))
        ]


WARM_UP_SHAPE = (4, 360, 640, 3)  # a few black frames: every finder's model loaded and called once


def warm_up(params: AnonymizeParams, options: ProtectOptions) -> None:
    """The finders' and the method's models loaded before the source is opened: their first call took a second or
    more, which the stream's first stretch waited for (its frames written 3 s after their time at 1280x720)."""
    started = time.perf_counter()
    FrameProtector(25.0, params=params, options=options, name="warm-up").protect(
        np.zeros(WARM_UP_SHAPE, np.uint8)
    )
    log.debug("models loaded in %.1f s", time.perf_counter() - started)
