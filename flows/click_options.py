"""The click options several commands share (``--params``, Video-DPRP's ``--k``, where and how often ``privhar
protect`` looks for people), an output path checked before any work, and a stage function's own options built from
its annotations (:mod:`tasks.core.stage_options`, as typer does)."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from tasks.core.stage_options import Option

PARAMS_DECLS = ["--params", "params_path"]
PARAMS_ATTRS: dict[str, Any] = {
    "type": click.Path(path_type=Path),
    "default": Path("params.yaml"),
    "show_default": True,
    "help": "The params file.",
}
PARAMS = click.option(*PARAMS_DECLS, **PARAMS_ATTRS)
# Video-DPRP's projection dimension, as `privhar dprp` and `privhar bench dprp` take it
PROJECTION_K = click.option(
    "--k",
    "k",
    default="32x32x3",
    show_default=True,
    help="Projection dimension: an integer or HxWxC.",
)
# where and how often `privhar protect` (and `privhar bench protect`) searches for people
DETECT_SCALE = click.option(
    "--detect-scale",
    type=click.FloatRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    help="People are found on frames scaled by this (deface's --scale); masks and boxes map back up. "
    "0: frames of at most 240 rows.",
)
DETECTORS = click.option(
    "--detectors",
    default="centerface,mediapipe,motion",
    show_default=True,
    help="People finders, united (anonymize.ensemble): centerface, mediapipe, hog, motion, faces. CenterFace finds "
    "the faces; the gate's judge is BlazeFace beside it (OpenCV's Haar cascade without mediapipe).",
)
DETECT_EVERY = click.option(
    "--detect-every",
    type=click.IntRange(0, 64),
    default=0,
    show_default=True,
    help="Detectors run on every k-th frame; tracks carry people through the frames between. 0: four times a second.",
)


# options of the command layer, not of a stage function: how its sections and its budget plan are read
BUDGET = click.Option(
    ["--budget"],
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="This stage's budget plan (the budget stage's data/budget/<stage>.json); default: planned here.",
)
NPROC = click.Option(
    ["--nproc"],
    type=click.IntRange(min=1),
    default=None,
    help="Processes per dp_sgd model (Opacus DPDDP), instead of private.nproc.",
)
EPOCHS = click.Option(["--epochs"], type=int, default=None, help="Override train.epochs.")
PUBLIC = click.Option(
    ["--public"],
    is_flag=True,
    help="Render the public pretraining set (params section public) instead.",
)


def writable(context: click.Context, parameter: click.Parameter, value: Path | None) -> Path | None:
    """An output folder or file is checked before the command does any work (read-only, /proc, below a file)."""
    from tasks.core.storage import check_writable

    if value is not None:
        check_writable(value, f"{parameter.opts[0] if parameter.opts else parameter.name} path")
    return value


def click_option(name: str, hint: Any, parameter: inspect.Parameter) -> click.Option | None:
    """The option of a stage function's parameter annotated with a :class:`tasks.core.stage_options.Option`; None for
    a section or anything else the reader gives."""
    spec = next(
        (item for item in getattr(hint, "__metadata__", ()) if isinstance(item, Option)), None
    )
    if spec is None:
        return None
    kind = typing.get_args(hint)[0]  # Annotated[kind, spec]
    multiple = typing.get_origin(kind) in (Sequence, list, tuple)
    if multiple or typing.get_origin(kind) in (types.UnionType, typing.Union):
        kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
    if spec.path is not None:
        kind = click.Path(
            path_type=Path,
            file_okay=spec.path == "file",
            dir_okay=spec.path == "folder",
            exists=spec.role == "input",
        )
    elif spec.choices:
        kind = click.Choice(spec.choices)
    elif spec.minimum is not None:
        kind = click.IntRange(min=spec.minimum)
    required = parameter.default is inspect.Parameter.empty
    # no default where required: click 8.5 takes a default of None as a value given
    default = {} if required else {"default": parameter.default}
    return click.Option(
        [spec.flag or f"--{name.replace('_', '-')}", name],
        type=kind,
        multiple=multiple,
        required=required,
        show_default=not required and parameter.default is not None,
        callback=writable if spec.role == "output" else None,
        help=spec.help,
        **default,
    )
