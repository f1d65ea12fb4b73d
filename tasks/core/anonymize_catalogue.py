"""The anonymization methods (stages ``anonymize@<method>``), one catalogue entry each.

A method's facts — which people arrays it reads, whether its output holds synthetic (public) pixels that MaskDP
may read, whether it claims to remove people or faces and so must reach ``anonymize.min_coverage`` — live here,
once; params validates ``anonymize.methods`` against it, and the anonymize stage reads it next to the method's
function (``tasks.anonymize.methods.PROTECT``, keyed by the same names). Adding a method is one entry here and
one function there.

>>> method_of("low_res_32x24").name, method_of("blackout").public_pixels
('low_res', True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tasks.core.errors import PrivharError


@dataclass(frozen=True)
class AnonymizeMethod:
    """One anonymization method. ``spelling`` is how params name it (a pattern for a family of sizes)."""

    name: str
    spelling: str  # a regular expression over anonymize.methods values
    people: tuple[
        str, ...
    ]  # the people arrays it reads (tasks/anonymize/people.py): none for whole-frame methods
    public_pixels: (
        bool  # its output holds synthetic pixels, written as masks/ (MaskDP's public view)
    )
    gated: bool  # it claims to remove people (or faces): a clip below anonymize.min_coverage is not released
    help: str  # the command line's spelling of it
    paper: str


CATALOGUE: dict[str, AnonymizeMethod] = {
    method.name: method
    for method in (
        AnonymizeMethod(
            "avatar",
            "avatar",
            ("person_mask", "skeleton", "joint_depth", "identity"),
            public_pixels=True,
            gated=True,
            help="avatar",
            paper="001 §5.2: people inpainted away, virtual humans drawn in their poses",
        ),
        AnonymizeMethod(
            "face_blur",
            "face_blur",
            ("face_box",),
            public_pixels=False,
            gated=True,
            help="face_blur",
            paper="000 §4.2: Gaussian blur of each face box",
        ),
        AnonymizeMethod(
            "mosaic",
            "mosaic",
            ("face_box",),
            public_pixels=False,
            gated=True,
            help="mosaic",
            paper="deface's mosaic: each face box pixelated into anonymize.mosaic_cells blocks a side",
        ),
        AnonymizeMethod(
            "solid",
            "solid",
            ("face_box",),
            public_pixels=False,
            gated=True,
            help="solid",
            paper="deface's solid: each face box filled with anonymize.solid_colour",
        ),
        AnonymizeMethod(
            "blackout",
            "blackout",
            ("person_mask",),
            public_pixels=True,
            gated=True,
            help="blackout",
            paper="000 §4.2: every person's (dilated) pixels set to black",
        ),
        AnonymizeMethod(
            "none",
            "none",
            (),
            public_pixels=False,
            gated=False,
            help="none",
            paper="the raw clips, copied (a control)",
        ),
        AnonymizeMethod(
            "low_res",
            r"low_res_\d+x\d+",
            (),
            public_pixels=False,
            gated=False,
            help="low_res_<W>x<H>",
            paper="000 §4.2: the whole frame area-resized down to W × H and back",
        ),
    )
}
ANONYMIZE_METHODS = tuple(method.help for method in CATALOGUE.values())  # the command line's help
ANONYMIZE_PATTERN = "^(" + "|".join(method.spelling for method in CATALOGUE.values()) + ")$"


def method_of(value: str) -> AnonymizeMethod:
    """The catalogue entry an ``anonymize.methods`` value names (``low_res_32x24`` → ``low_res``)."""
    for method in CATALOGUE.values():
        if re.fullmatch(method.spelling, value):
            return method
    raise PrivharError(f"anonymize: method {value!r} is not one of {', '.join(ANONYMIZE_METHODS)}")
