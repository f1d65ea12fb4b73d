"""``privhar protect``: people (or faces) removed from videos at their own size and rate, beside the stages (its
core is the anonymize stage's: tasks/anonymize/protect_video.py). Its options set the anonymize section's keys they
name; the rest comes from ``--params``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from flows.click_options import DETECT_EVERY, DETECT_SCALE, DETECTORS, writable
from tasks.core.errors import PrivharError

PROTECT_METHODS = ["avatar", "face_blur", "mosaic", "solid", "blackout", "low_res_32x24"]


# the anonymize keys protect's options set, and the options (click's parameter names)
OVERRIDDEN_BY = {
    "detector_confidence": "threshold",
    "face_blur_kernel": "blur_kernel",
    "face_blur_sigma": "blur_sigma",
    "mosaic_cells": "mosaic_cells",
    "solid_colour": "colour",
    "min_coverage": "min_coverage",
    "face_scale": "mask_scale",
}


def _as_option(error: PrivharError, overrides: dict[str, Any]) -> PrivharError:
    """The params check's one line about a value an option gave, naming the option and its value."""
    for key, value in overrides.items():
        if f"anonymize.{key}" in str(error) and " is invalid: " in str(error):
            shown = " ".join(map(str, value)) if isinstance(value, list) else value
            option = "--" + OVERRIDDEN_BY[key].replace("_", "-")
            return PrivharError(
                f"{option} {shown} is invalid: {str(error).split(' is invalid: ', 1)[1]}"
            )
    return error


@click.command("protect")
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--out",
    "target",
    required=True,
    type=click.Path(path_type=Path),
    callback=writable,
    help="A video file (one input), or a folder: each input keeps its name (and its path under an input folder).",
)
@click.option(
    "--method",
    default="face_blur",
    show_default=True,
    help=f"One of {', '.join(PROTECT_METHODS)} (low_res_<W>x<H> at any size).",
)
@DETECTORS
@click.option(
    "--threshold",
    type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
    help="mediapipe's minimum detection score [params.yaml: anonymize.detector_confidence].",
)
@click.option(
    "--mask-scale",
    type=click.FloatRange(1.0, 4.0),
    default=1.3,
    show_default=True,
    help="Face boxes scaled about their centre (deface's --mask-scale).",
)
@click.option(
    "--blur-kernel",
    type=int,
    help="face_blur's Gaussian kernel, odd [anonymize.face_blur_kernel, scaled from 240 rows to the frame's height].",
)
@click.option(
    "--blur-sigma", type=float, help="face_blur's σ [anonymize.face_blur_sigma, scaled alike]."
)
@click.option(
    "--mosaic-cells", type=int, help="mosaic: blocks a side of a face [anonymize.mosaic_cells]."
)
@click.option(
    "--colour",
    type=(int, int, int),
    help="solid: the R G B a face is filled with [anonymize.solid_colour].",
)
@DETECT_SCALE
@DETECT_EVERY
@click.option(
    "--min-coverage",
    type=click.FloatRange(0.0, 1.0),
    help="Share of the moving (face: head) pixels a stretch must change [anonymize.min_coverage].",
)
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
    default=4.0,
    show_default=True,
    help="Stretch of video protected (and gated) at once: tracks and the background plate span one stretch.",
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
    "--params",
    "params_path",
    type=click.Path(path_type=Path),
    default=Path("params.yaml"),
    show_default=True,
    help="The params file whose anonymize section sets the rest.",
)
def protect_command(
    sources: tuple[Path, ...], target: Path, params_path: Path, workers: int, **options: Any
) -> None:
    """Remove the people (or their faces) from videos at their own resolution and frame rate: SOURCES are video files
    or folders of them. One line per video; a video that cannot be read or written gets one line and nothing is
    written for it."""
    from flows.stage_readers import section
    from tasks.anonymize.protect_video import protect_videos, total_line

    options["blur_to_size"] = options["blur_kernel"] is None and options["blur_sigma"] is None
    given = {key: options.pop(option) for key, option in OVERRIDDEN_BY.items()}
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
        params = section(params_path, "anonymize", **overrides)
    except (
        PrivharError
    ) as error:  # an option's value: named as the option, not as params.yaml's key (issue 82)
        raise _as_option(error, overrides) from None
    results = protect_videos(sources, target, params=params, workers=workers, **options)
    for result in results:
        click.echo(
            f"privhar: error: {result}" if isinstance(result, str) else result.line(), err=True
        )
    click.echo(total_line(results, options["method"]), err=True)
    if any(isinstance(result, str) for result in results):
        raise SystemExit(1)
