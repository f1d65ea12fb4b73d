"""Identities: fixed appearance per person (skin, build, hair, face geometry, two outfits).

An identity is drawn once from ``rng_for(seed, "identity", index)``; every video of that
person uses it, so the face and clothes are what a re-identification attacker can learn.
Colours are BGR (OpenCV order).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from tasks.core.item_randomness import rng_for
from tasks.synthetic.body import Build

SKIN_TONES = (  # (BGR, attribute value), light to dark
    ((196, 214, 244), "light"),
    ((170, 196, 232), "light"),
    ((128, 170, 214), "medium"),
    ((96, 140, 190), "medium"),
    ((62, 98, 146), "dark"),
    ((44, 68, 104), "dark"),
)
HAIR_COLOURS = ((20, 20, 24), (30, 50, 90), (80, 160, 215), (30, 60, 150), (160, 160, 165))
HAIR_STYLES = ("short", "long", "bald", "bun", "curly")
PATTERNS = ("solid", "stripes", "checks")
BOTTOMS = ("pants", "shorts", "skirt")


@dataclass(frozen=True)
class Face:
    """Face geometry, relative to the head radius: what identifies the person."""

    eye_spacing: float  # half distance between eyes
    eye_height: float  # above the head centre
    eye_width: float
    eye_openness: float  # height / width: round ... narrow
    brow_thickness: int
    brow_tilt: float  # degrees; positive raises the outer end
    mouth_width: float
    mouth_curve: float  # positive smiles, negative frowns
    nose_length: float
    glasses: bool
    beard: bool


@dataclass(frozen=True)
class Outfit:
    top: tuple[int, int, int]
    top_accent: tuple[int, int, int]
    pattern: str
    short_sleeves: bool
    bottom: tuple[int, int, int]
    bottom_kind: str
    shoes: tuple[int, int, int]

    @property
    def bare_skin(self) -> bool:
        return self.short_sleeves or self.bottom_kind in ("shorts", "skirt")


@dataclass(frozen=True)
class Identity:
    index: int
    skin: tuple[int, int, int]
    skin_tone: str
    gender: str  # presentation: "feminine" | "masculine"
    hair_style: str
    hair_colour: tuple[int, int, int]
    build: Build
    height: float  # relative stature
    limb_thickness: float  # body heights
    face: Face
    outfits: tuple[Outfit, Outfit]


def _colour(rng: np.random.Generator) -> tuple[int, int, int]:
    hue = rng.uniform(0, 180)
    hsv = np.uint8([[[hue, rng.uniform(60, 230), rng.uniform(60, 235)]]])
    return tuple(int(v) for v in cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0])


def _outfit(rng: np.random.Generator, gender: str) -> Outfit:
    bottoms = BOTTOMS if gender == "feminine" else BOTTOMS[:2]
    return Outfit(
        top=_colour(rng),
        top_accent=_colour(rng),
        pattern=str(rng.choice(PATTERNS)),
        short_sleeves=bool(rng.random() < 0.5),
        bottom=_colour(rng),
        bottom_kind=str(rng.choice(bottoms)),
        shoes=_colour(rng),
    )


def make_identity(seed: int, index: int) -> Identity:
    """The appearance of person ``index`` (deterministic in ``seed``)."""
    rng = rng_for(seed, "identity", index)
    skin, tone = (
        SKIN_TONES[index % len(SKIN_TONES)]
        if index < len(SKIN_TONES)
        else SKIN_TONES[rng.integers(len(SKIN_TONES))]
    )
    gender = "feminine" if index % 2 == 0 else "masculine"
    feminine = gender == "feminine"
    styles = ("long", "bun", "curly", "short") if feminine else ("short", "bald", "curly", "long")
    weights = (0.4, 0.25, 0.2, 0.15)
    build = Build(
        shoulder_half_width=rng.uniform(0.085, 0.105) if feminine else rng.uniform(0.105, 0.13),
        hip_half_width=rng.uniform(0.085, 0.1) if feminine else rng.uniform(0.07, 0.085),
        upper_arm=rng.uniform(0.15, 0.18),
        forearm=rng.uniform(0.14, 0.17),
        thigh=rng.uniform(0.23, 0.26),
        shin=rng.uniform(0.23, 0.26),
        torso=rng.uniform(0.28, 0.32),
        head_radius=rng.uniform(0.058, 0.07),
    )
    face = Face(
        eye_spacing=rng.uniform(0.26, 0.46),
        eye_height=rng.uniform(0.05, 0.22),
        eye_width=rng.uniform(0.14, 0.24),
        eye_openness=rng.uniform(0.35, 1.0),
        brow_thickness=int(rng.integers(1, 4)),
        brow_tilt=rng.uniform(-18, 18),
        mouth_width=rng.uniform(0.22, 0.55),
        mouth_curve=rng.uniform(-0.12, 0.16),
        nose_length=rng.uniform(0.1, 0.28),
        glasses=bool(rng.random() < 0.3),
        beard=bool(not feminine and rng.random() < 0.4),
    )
    return Identity(
        index=index,
        skin=skin,
        skin_tone=tone,
        gender=gender,
        hair_style=str(rng.choice(styles, p=weights)),
        hair_colour=HAIR_COLOURS[int(rng.integers(len(HAIR_COLOURS)))],
        build=build,
        height=rng.uniform(0.9, 1.08),
        limb_thickness=rng.uniform(0.065, 0.085) * (1.0 if feminine else 1.1),
        face=face,
        outfits=(_outfit(rng, gender), _outfit(rng, gender)),
    )
