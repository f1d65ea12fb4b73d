"""A stage function's own arguments (its folders, files and values; not its params sections) as ``privhar stage``
shows them.

Each is declared once, in its parameter's annotation (``frames: Annotated[Path, folder("The decoded clips.")]``), in the
manner of typer: the command layer (flows/stage_commands.py) builds the click option from it, the parameter's type
and its default. An argument is so written in two places, dvc.yaml's ``cmd`` and the stage's signature. This module
knows nothing of click: the stages stay free of the command line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

# a path option: "input" must exist; "output" is checked writable before the stage works; "either" may be missing
Role = Literal["input", "output", "either"]


@dataclass(frozen=True)
class Option:
    """How one parameter appears as an option: its help, and for a path what it names and how it is used."""

    help: str
    path: Literal["folder", "file"] | None = None  # None: a value (str, int, float, bool)
    role: Role = "input"
    flag: str | None = None  # the option's name where it is not --<parameter name>
    choices: tuple[str, ...] = ()
    minimum: int | None = None


def folder(help: str, role: Role = "input", flag: str | None = None) -> Option:
    """A folder the stage reads (``input``) or writes (``output``)."""
    return Option(help, "folder", role, flag)


def file(help: str, role: Role = "input", flag: str | None = None) -> Option:
    """A file the stage reads (``input``, or ``either``: missing is allowed) or writes (``output``)."""
    return Option(help, "file", role, flag)


def value(help: str, choices: tuple[str, ...] = (), minimum: int | None = None) -> Option:
    """A value: one of ``choices`` where given, at least ``minimum`` where given."""
    return Option(help, choices=choices, minimum=minimum)


# arguments more than one stage takes
Speed = Annotated[
    Path | None,
    file(
        "Where to write the measured frames/s (JSON; assess reads it for f_speed).",
        "output",
        "--speed",
    ),
]
RawFrames = Annotated[Path, folder("Folder of the decoded (raw) clips.")]
PublicModel = Annotated[
    Path, folder("Folder of the public model to fine-tune (the pretrain stage's output).")
]
Copies = Annotated[
    Sequence[Path],
    folder("A folder of protected copies (data/anonymize, data/dprp); repeatable."),
]
