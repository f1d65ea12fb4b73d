"""Virtual humans for paper 001 §5.2: a catalogue of avatars and their anti-aliased rendering.

An avatar is drawn along a 2-D skeleton (joint order :data:`tasks.synthetic.body.JOINTS`):
a patterned torso, capsule limbs, neck and head, each part coloured from the avatar's own
palette — nothing is taken from the real person's appearance. Parts of every person in the
frame are sorted by depth (larger is nearer) and composited far to near, so a near arm
covers the torso behind it. Coverage is anti-aliased (OpenCV ``LINE_AA`` at 1/16 pixel) and
quantised to 0..255 before compositing: a pixel of coverage 255 (:data:`FULL_COVERAGE`) is
the avatars' colour alone, one of partial coverage mixes in the background, and every pixel of
coverage 0 is the background byte for byte. Only fully covered pixels carry nothing of the
recorded video: they are the public mask (:func:`tasks.anonymize.methods.replace_with_avatars`).
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass

import cv2
import numpy as np

from tasks.core.item_randomness import derive_seed
from tasks.synthetic.body import JOINT_INDEX, LIMBS

SHIFT = 4
ONE = 1 << SHIFT
PATTERNS = ("solid", "stripes", "checks", "dots")
BUILDS = (
    (0.16, 0.34, 1.0),
    (0.22, 0.38, 1.25),
    (0.12, 0.30, 0.85),
)  # limb width, head radius, shoulder scale
HEAD_COLOURS = (
    (200, 200, 205),
    (90, 90, 100),
    (235, 200, 60),
    (60, 160, 210),
    (210, 90, 160),
    (120, 200, 120),
)
AVATAR_COUNT = 48
FULL_COVERAGE = 255  # coverage of a pixel the avatars alone colour: no background weight in it


@dataclass(frozen=True)
class Avatar:
    """Proportions (relative to the torso's length on screen) and a palette."""

    index: int
    torso: tuple[int, int, int]
    accent: tuple[int, int, int]
    limbs: tuple[int, int, int]
    head: tuple[int, int, int]
    pattern: str
    limb_width: float
    head_radius: float
    shoulder_scale: float


def _hsv(hue: float, saturation: float, value: float) -> tuple[int, int, int]:
    return tuple(
        int(round(255 * channel)) for channel in colorsys.hsv_to_rgb(hue % 1.0, saturation, value)
    )


def catalogue(count: int = AVATAR_COUNT) -> tuple[Avatar, ...]:
    """``count`` distinct avatars: patterns × builds × hues spaced by the golden ratio."""
    avatars = []
    for index in range(count):
        hue = index * 0.6180339887
        limb_width, head_radius, shoulders = BUILDS[(index // len(PATTERNS)) % len(BUILDS)]
        avatars.append(
            Avatar(
                index,
                torso=_hsv(hue, 0.75, 0.85),
                accent=_hsv(hue + 0.5, 0.6, 0.95),
                limbs=_hsv(hue + 0.15, 0.55, 0.55),
                head=HEAD_COLOURS[index % len(HEAD_COLOURS)],
                pattern=PATTERNS[index % len(PATTERNS)],
                limb_width=limb_width,
                head_radius=head_radius,
                shoulder_scale=shoulders,
            )
        )
    return tuple(avatars)


CATALOGUE = catalogue()


def avatar_for(seed: int, identity: int) -> Avatar:
    """The avatar of a real identity: fixed by (seed, identity), the same in every video."""
    return CATALOGUE[derive_seed(seed, "avatar", int(identity)) % len(CATALOGUE)]


def _fixed(point: np.ndarray) -> tuple[int, int]:
    return int(round(float(point[0]) * ONE)), int(round(float(point[1]) * ONE))


def _pattern_colours(avatar: Avatar, ys: np.ndarray, xs: np.ndarray, period: float) -> np.ndarray:
    colours = np.tile(np.array(avatar.torso, np.float32), (len(ys), 1))
    if avatar.pattern == "stripes":
        colours[(ys // period) % 2 == 1] = avatar.accent
    elif avatar.pattern == "checks":
        colours[((ys // period) + (xs // period)) % 2 == 1] = avatar.accent
    elif avatar.pattern == "dots":
        colours[
            ((ys % period) - period / 2) ** 2 + ((xs % period) - period / 2) ** 2
            < (period / 3) ** 2
        ] = avatar.accent
    return colours


def _parts(points: np.ndarray, depth: np.ndarray, avatar: Avatar) -> list[tuple[float, str, tuple]]:
    """(depth, kind, geometry) of one person's parts."""
    j = JOINT_INDEX
    torso_length = float(np.hypot(*(points[j["neck"]] - points[j["pelvis"]]))) or 1.0
    width = max(1.5, avatar.limb_width * torso_length)
    parts = [
        (float(depth[[j[a], j[b]]].mean()), "limb", (points[j[a]], points[j[b]], width))
        for _, a, b in LIMBS
    ]
    centre = (
        points[j["l_shoulder"]] + points[j["r_shoulder"]] + points[j["l_hip"]] + points[j["r_hip"]]
    ) / 4
    corners = [
        centre + avatar.shoulder_scale * (points[j[name]] - centre)
        for name in ("l_shoulder", "r_shoulder", "r_hip", "l_hip")
    ]
    parts.append((float(depth[j["pelvis"]]), "torso", (np.array(corners), width, torso_length)))
    parts.append(
        (float(depth[j["neck"]]), "limb", (points[j["neck"]], points[j["head"]], width * 0.8))
    )
    parts.append(
        (
            float(depth[j["head"]]) + 1e-3,
            "head",
            (points[j["head"]], avatar.head_radius * torso_length),
        )
    )
    return parts


def _points(kind: str, geometry: tuple) -> tuple[np.ndarray, float]:
    """The points a part is drawn through and how far its strokes reach beyond them (pixels)."""
    if kind == "limb":
        a, b, width = geometry
        return np.array([a, b], np.float64), max(1.0, width) / 2 + 2
    if kind == "torso":
        corners, width, _ = geometry
        return np.asarray(corners, np.float64), max(1.0, width) / 2 + 2
    centre, radius = geometry
    return np.array([centre], np.float64), max(1.0, radius) + 2


def _window(shape: tuple[int, int], kind: str, geometry: tuple) -> tuple[int, int, int, int] | None:
    """(left, top, right, bottom) of the frame a part can touch, or None when it lies outside the frame."""
    points, reach = _points(kind, geometry)
    if not np.isfinite(points).all():
        return None
    left = max(0, int(np.floor(points[:, 0].min() - reach)))
    top = max(0, int(np.floor(points[:, 1].min() - reach)))
    right = min(shape[1], int(np.ceil(points[:, 0].max() + reach)) + 1)
    bottom = min(shape[0], int(np.ceil(points[:, 1].max() + reach)) + 1)
    return (left, top, right, bottom) if right > left and bottom > top else None


def _shifted(kind: str, geometry: tuple, left: int, top: int) -> tuple:
    """The part's geometry in a window's pixels (integer offsets: the fixed-point drawing is unchanged)."""
    origin = np.array([left, top], np.float64)
    if kind == "limb":
        a, b, width = geometry
        return (np.asarray(a, np.float64) - origin, np.asarray(b, np.float64) - origin, width)
    if kind == "torso":
        corners, width, length = geometry
        return (np.asarray(corners, np.float64) - origin, width, length)
    centre, radius = geometry
    return (np.asarray(centre, np.float64) - origin, radius)


def _coverage(shape: tuple[int, int], kind: str, geometry: tuple) -> np.ndarray:
    """uint8 0..255 anti-aliased coverage of one part."""
    layer = np.zeros(shape, np.uint8)
    if kind == "limb":
        a, b, width = geometry
        thickness = max(1, int(round(width)))
        cv2.line(layer, _fixed(a), _fixed(b), 255, thickness, cv2.LINE_AA, SHIFT)
        for end in (a, b):  # round caps
            cv2.circle(layer, _fixed(end), int(round(width / 2 * ONE)), 255, -1, cv2.LINE_AA, SHIFT)
    elif kind == "torso":
        corners, width, _ = geometry
        cv2.fillConvexPoly(
            layer, np.array([_fixed(c) for c in corners], np.int32), 255, cv2.LINE_AA, SHIFT
        )
        cv2.polylines(
            layer,
            [np.array([_fixed(c) for c in corners], np.int32)],
            True,
            255,
            max(1, int(round(width / 2))),
            cv2.LINE_AA,
            SHIFT,
        )
    else:
        centre, radius = geometry
        cv2.circle(
            layer, _fixed(centre), max(ONE, int(round(radius * ONE))), 255, -1, cv2.LINE_AA, SHIFT
        )
    return layer


def render(
    background: np.ndarray, people: list[tuple[np.ndarray, np.ndarray, Avatar]]
) -> tuple[np.ndarray, np.ndarray]:
    """(frame, coverage): ``people`` = (points (J, 2), depth (J,), avatar) drawn over ``background``.

    Coverage is uint8 0..255; the frame equals ``background`` exactly where it is 0.
    """
    height, width = background.shape[:2]
    colour = np.zeros((height, width, 3), np.float32)  # composited avatar colour
    alpha = np.zeros((height, width), np.float32)  # composited coverage, 0..1
    parts = sorted(
        (
            (depth_, kind, geometry, avatar)
            for points, depth, avatar in people
            for depth_, kind, geometry in _parts(points, depth, avatar)
        ),
        key=lambda part: part[0],
    )
    for _, kind, geometry, avatar in parts:
        window = _window((height, width), kind, geometry)
        if window is None:
            continue
        left, top, right, bottom = (
            window  # each part drawn in the box it can reach, not on a whole-frame layer
        )
        cover = _coverage((bottom - top, right - left), kind, _shifted(kind, geometry, left, top))
        ys, xs = np.nonzero(cover)
        if len(ys) == 0:
            continue
        a = cover[ys, xs].astype(np.float32)[:, None] / 255.0
        ys, xs = ys + top, xs + left
        if kind == "torso":
            part_colour = _pattern_colours(avatar, ys, xs, max(2.0, geometry[2] / 5))
        else:
            part_colour = np.tile(
                np.array(avatar.head if kind == "head" else avatar.limbs, np.float32), (len(ys), 1)
            )
        colour[ys, xs] = a * part_colour + (1 - a) * colour[ys, xs]
        alpha[ys, xs] = a[:, 0] + (1 - a[:, 0]) * alpha[ys, xs]
    frame, coverage = background.copy(), np.zeros((height, width), np.uint8)
    drawn = np.nonzero(alpha.any(axis=1))[0], np.nonzero(alpha.any(axis=0))[0]
    if not len(drawn[0]):
        return frame, coverage
    box = (
        slice(drawn[0][0], drawn[0][-1] + 1),
        slice(drawn[1][0], drawn[1][-1] + 1),
    )  # blended where drawn
    alpha, colour, under = alpha[box], colour[box], background[box]
    cover = np.round(alpha * 255).astype(np.uint16)
    straight = np.divide(
        colour, alpha[..., None], out=np.zeros_like(colour), where=alpha[..., None] > 0
    )
    mixed = (
        under.astype(np.uint32) * (255 - cover[..., None])
        + np.round(straight).astype(np.uint32) * cover[..., None]
        + 127
    ) // 255
    frame[box] = np.where(cover[..., None] > 0, mixed, under).astype(np.uint8)
    coverage[box] = cover.astype(np.uint8)
    return frame, coverage
