"""Draw one person: shaded, anti-aliased capsules ordered by depth, a face, hair, clothes.

    joints (screen, depth) ─▶ parts sorted far-to-near ─▶ colour canvas  (what the camera sees)
                                                       └─▶ label canvas   (the person mask)

Coordinates are drawn with 4 bits of sub-pixel precision (``shift=4``), so slow motion
is smooth rather than jumping a pixel at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from tasks.synthetic.body import JOINT_INDEX, LIMBS
from tasks.synthetic.identities import Identity, Outfit

SHIFT = 4
ONE = 1 << SHIFT
FACE_VISIBLE_COS = 0.2  # |yaw| below ~78 degrees shows the face


def _fixed(point: np.ndarray) -> tuple[int, int]:
    return int(round(point[0] * ONE)), int(round(point[1] * ONE))


def _shade(colour: tuple[int, int, int], factor: float) -> tuple[int, int, int]:
    return tuple(min(255, max(0, int(c * factor))) for c in colour)


@dataclass(frozen=True)
class PersonView:
    """Where the person is on screen in one frame."""

    points: np.ndarray  # (J, 2) screen coordinates
    depth: np.ndarray  # (J,) toward the camera
    scale_px: float  # pixels per body height
    yaw: float  # degrees


def _capsule(
    canvas: np.ndarray,
    labels: np.ndarray,
    label: int,
    a: np.ndarray,
    b: np.ndarray,
    colour: tuple[int, int, int],
    thickness: float,
) -> None:
    """A limb: dark rim, body colour, a highlight toward the light (upper left)."""
    width = max(2, int(round(thickness)))
    cv2.line(canvas, _fixed(a), _fixed(b), _shade(colour, 0.6), width + 2, cv2.LINE_AA, SHIFT)
    cv2.line(canvas, _fixed(a), _fixed(b), colour, width, cv2.LINE_AA, SHIFT)
    offset = np.array([-0.22, -0.22]) * width
    cv2.line(
        canvas,
        _fixed(a + offset),
        _fixed(b + offset),
        _shade(colour, 1.25),
        max(1, width // 3),
        cv2.LINE_AA,
        SHIFT,
    )
    cv2.line(labels, _fixed(a), _fixed(b), label, width + 2, cv2.LINE_8, SHIFT)


def _torso(
    canvas: np.ndarray,
    labels: np.ndarray,
    label: int,
    view: PersonView,
    outfit: Outfit,
    thickness: float,
) -> None:
    p = view.points
    corners = np.array(
        [
            p[JOINT_INDEX["l_shoulder"]],
            p[JOINT_INDEX["r_shoulder"]],
            p[JOINT_INDEX["r_hip"]],
            p[JOINT_INDEX["l_hip"]],
        ]
    )
    neck, pelvis = p[JOINT_INDEX["neck"]], p[JOINT_INDEX["pelvis"]]
    region = np.zeros(canvas.shape[:2], np.uint8)
    cv2.fillConvexPoly(
        region, np.array([_fixed(c) for c in corners], np.int32), 1, cv2.LINE_8, SHIFT
    )
    cv2.line(
        region, _fixed(neck), _fixed(pelvis), 1, max(2, int(thickness * 2.4)), cv2.LINE_8, SHIFT
    )
    ys, xs = np.nonzero(region)
    if len(ys) == 0:
        return
    axis = pelvis - neck
    length = float(np.hypot(*axis)) or 1.0
    along = ((xs - neck[0]) * axis[0] + (ys - neck[1]) * axis[1]) / length
    across = ((xs - neck[0]) * -axis[1] + (ys - neck[1]) * axis[0]) / length
    colours = np.tile(np.array(outfit.top, np.float32), (len(ys), 1))
    period = max(2.0, length / 6)
    if outfit.pattern == "stripes":
        colours[(along // period) % 2 == 1] = outfit.top_accent
    elif outfit.pattern == "checks":
        colours[((along // period) + (across // period)) % 2 == 1] = outfit.top_accent
    light = 1.0 + 0.18 * np.clip(-across / (thickness * 2 + 1), -1, 1)  # lit from the left
    canvas[ys, xs] = np.clip(colours * light[:, None], 0, 255).astype(np.uint8)
    labels[ys, xs] = label
    if outfit.bottom_kind == "skirt":
        knees = (p[JOINT_INDEX["l_knee"]] + p[JOINT_INDEX["r_knee"]]) / 2
        hem = pelvis + 0.8 * (knees - pelvis)
        spread = np.array([thickness * 1.8, 0.0])
        skirt = np.array(
            [
                _fixed(p[JOINT_INDEX["l_hip"]]),
                _fixed(p[JOINT_INDEX["r_hip"]]),
                _fixed(hem - spread),
                _fixed(hem + spread),
            ],
            np.int32,
        )
        hull = cv2.convexHull(skirt)
        cv2.fillConvexPoly(canvas, hull, outfit.bottom, cv2.LINE_AA, SHIFT)
        cv2.fillConvexPoly(labels, hull, label, cv2.LINE_8, SHIFT)


def _hair_back(
    canvas: np.ndarray,
    labels: np.ndarray,
    label: int,
    identity: Identity,
    head: np.ndarray,
    radius: float,
) -> None:
    if identity.hair_style == "long":
        top_left = head + np.array([-radius * 1.05, -radius * 0.3])
        bottom_right = head + np.array([radius * 1.05, radius * 2.0])
        cv2.rectangle(
            canvas,
            _fixed(top_left),
            _fixed(bottom_right),
            identity.hair_colour,
            -1,
            cv2.LINE_AA,
            SHIFT,
        )
        cv2.rectangle(labels, _fixed(top_left), _fixed(bottom_right), label, -1, cv2.LINE_8, SHIFT)


def _head(
    canvas: np.ndarray,
    labels: np.ndarray,
    label: int,
    identity: Identity,
    head: np.ndarray,
    radius: float,
    yaw: float,
) -> bool:
    """Draw the head; return whether the face is visible (turned toward the camera)."""
    facing = float(np.cos(np.radians(yaw)))
    turn = float(np.sin(np.radians(yaw)))
    axes = (int(radius * 0.9 * ONE), int(radius * ONE))
    cv2.ellipse(
        canvas, _fixed(head), axes, 0, 0, 360, _shade(identity.skin, 0.7), -1, cv2.LINE_AA, SHIFT
    )
    cv2.ellipse(
        canvas,
        _fixed(head),
        (axes[0] - ONE, axes[1] - ONE),
        0,
        0,
        360,
        identity.skin,
        -1,
        cv2.LINE_AA,
        SHIFT,
    )
    cv2.ellipse(labels, _fixed(head), axes, 0, 0, 360, label, -1, cv2.LINE_8, SHIFT)
    hair = identity.hair_colour
    visible = facing > FACE_VISIBLE_COS
    if identity.hair_style != "bald":
        if not visible:  # seen from behind: hair covers the head
            cv2.ellipse(canvas, _fixed(head), axes, 0, 0, 360, hair, -1, cv2.LINE_AA, SHIFT)
        else:
            cv2.ellipse(
                canvas,
                _fixed(head),
                axes,
                0,
                180 + 25 * turn,
                360 + 25 * turn,
                hair,
                -1,
                cv2.LINE_AA,
                SHIFT,
            )
        if identity.hair_style == "bun":
            cv2.circle(
                canvas,
                _fixed(head + np.array([-turn * radius * 0.6, -radius * 1.05])),
                int(radius * 0.45 * ONE),
                hair,
                -1,
                cv2.LINE_AA,
                SHIFT,
            )
        elif identity.hair_style == "curly":
            for angle in np.linspace(200, 340, 6):
                centre = head + radius * np.array(
                    [np.cos(np.radians(angle)), np.sin(np.radians(angle))]
                )
                cv2.circle(
                    canvas, _fixed(centre), int(radius * 0.32 * ONE), hair, -1, cv2.LINE_AA, SHIFT
                )
    if visible:
        _face(canvas, identity, head, radius, facing, turn)
    return visible


DARK = (30, 30, 35)


def _eye(
    canvas: np.ndarray,
    identity: Identity,
    centre: np.ndarray,
    eye_y: float,
    radius: float,
    facing: float,
    side: float,
) -> None:
    """One eye (``side`` -1 left, 1 right): its white, pupil and brow, and a glasses rim."""
    face = identity.face
    eye = np.array([centre[0] + side * face.eye_spacing * radius * facing, eye_y])
    eye_axes = (
        max(ONE, int(face.eye_width * radius * facing * ONE)),
        max(ONE // 2, int(face.eye_width * face.eye_openness * radius * ONE)),
    )
    cv2.ellipse(canvas, _fixed(eye), eye_axes, 0, 0, 360, (245, 245, 245), -1, cv2.LINE_AA, SHIFT)
    cv2.circle(
        canvas, _fixed(eye), max(ONE // 2, int(eye_axes[1] * 0.8)), DARK, -1, cv2.LINE_AA, SHIFT
    )
    tilt = np.radians(face.brow_tilt) * side
    brow = eye + np.array([0.0, -radius * (0.16 + face.eye_width * face.eye_openness)])
    half = np.array([np.cos(tilt), -np.sin(tilt)]) * face.eye_width * radius * 1.2 * facing
    cv2.line(
        canvas,
        _fixed(brow - half),
        _fixed(brow + half),
        identity.hair_colour if identity.hair_style != "bald" else DARK,
        face.brow_thickness,
        cv2.LINE_AA,
        SHIFT,
    )
    if face.glasses:
        cv2.circle(
            canvas, _fixed(eye), int(radius * 0.24 * ONE), (20, 20, 20), 1, cv2.LINE_AA, SHIFT
        )


def _face(
    canvas: np.ndarray,
    identity: Identity,
    head: np.ndarray,
    radius: float,
    facing: float,
    turn: float,
) -> None:
    face = identity.face
    centre = head + np.array([turn * radius * 0.55, 0.0])
    eye_y = centre[1] - face.eye_height * radius
    for side in (-1.0, 1.0):
        _eye(canvas, identity, centre, eye_y, radius, facing, side)
    nose_top = np.array([centre[0] + turn * radius * 0.15, eye_y + radius * 0.08])
    cv2.line(
        canvas,
        _fixed(nose_top),
        _fixed(nose_top + np.array([turn * radius * 0.12, face.nose_length * radius])),
        _shade(identity.skin, 0.6),
        1,
        cv2.LINE_AA,
        SHIFT,
    )
    mouth = np.array([centre[0], centre[1] + radius * 0.5])
    mouth_axes = (
        max(ONE, int(face.mouth_width * radius * facing * ONE)),
        max(ONE // 2, int(abs(face.mouth_curve) * radius * ONE)),
    )
    start, end = (0, 180) if face.mouth_curve >= 0 else (180, 360)
    cv2.ellipse(
        canvas, _fixed(mouth), mouth_axes, 0, start, end, (40, 40, 140), 1, cv2.LINE_AA, SHIFT
    )
    if face.beard:
        cv2.ellipse(
            canvas,
            _fixed(centre + np.array([0.0, radius * 0.35])),
            (int(radius * 0.75 * ONE), int(radius * 0.6 * ONE)),
            0,
            10,
            170,
            identity.hair_colour,
            -1,
            cv2.LINE_AA,
            SHIFT,
        )


def _limb_colour(name: str, identity: Identity, outfit: Outfit) -> tuple[int, int, int]:
    if "upper_arm" in name:
        return identity.skin if outfit.short_sleeves else outfit.top
    if "forearm" in name:
        return identity.skin if outfit.short_sleeves else _shade(outfit.top, 0.92)
    if "thigh" in name:
        return identity.skin if outfit.bottom_kind == "skirt" else outfit.bottom
    return outfit.bottom if outfit.bottom_kind == "pants" else identity.skin


ENDPOINTS = {name: (JOINT_INDEX[a], JOINT_INDEX[b]) for name, a, b in LIMBS}


def _limb(
    canvas: np.ndarray,
    labels: np.ndarray,
    label: int,
    part: str,
    points: np.ndarray,
    identity: Identity,
    outfit: Outfit,
    thickness: float,
) -> None:
    """One limb as a capsule, with a hand at a forearm's end and a shoe at a shin's."""
    a, b = ENDPOINTS[part]
    limb_thickness = thickness * (1.25 if "thigh" in part else 1.0)
    _capsule(
        canvas,
        labels,
        label,
        points[a],
        points[b],
        _limb_colour(part, identity, outfit),
        limb_thickness,
    )
    if part.endswith("forearm"):
        cv2.circle(
            canvas,
            _fixed(points[b]),
            int(thickness * 0.6 * ONE),
            identity.skin,
            -1,
            cv2.LINE_AA,
            SHIFT,
        )
    elif part.endswith("shin"):
        axes = (int(thickness * 0.9 * ONE), int(thickness * 0.5 * ONE))
        cv2.ellipse(
            canvas, _fixed(points[b]), axes, 0, 0, 360, outfit.shoes, -1, cv2.LINE_AA, SHIFT
        )
        cv2.ellipse(labels, _fixed(points[b]), axes, 0, 0, 360, label, -1, cv2.LINE_8, SHIFT)


def draw_person(
    canvas: np.ndarray,
    labels: np.ndarray,
    label: int,
    identity: Identity,
    outfit: Outfit,
    view: PersonView,
) -> tuple[np.ndarray, bool]:
    """Draw a person in place; return the face box (x0, y0, x1, y1) and whether the face shows."""
    thickness = identity.limb_thickness * view.scale_px
    points, depth = view.points, view.depth
    head = points[JOINT_INDEX["head"]]
    radius = identity.build.head_radius * view.scale_px
    parts: list[tuple[float, str]] = [
        (float(depth[[JOINT_INDEX[a], JOINT_INDEX[b]]].mean()), name) for name, a, b in LIMBS
    ]
    parts.append((float(depth[JOINT_INDEX["pelvis"]]), "torso"))
    parts.append((float(depth[JOINT_INDEX["head"]]) + 1e-3, "head"))
    face_visible = False
    _hair_back(canvas, labels, label, identity, head, radius)
    for _, part in sorted(parts):
        if part == "torso":
            _torso(canvas, labels, label, view, outfit, thickness)
        elif part == "head":
            neck = points[JOINT_INDEX["neck"]]
            _capsule(canvas, labels, label, neck, head, identity.skin, thickness * 0.8)
            face_visible = _head(canvas, labels, label, identity, head, radius, view.yaw)
        else:
            _limb(canvas, labels, label, part, points, identity, outfit, thickness)
    face_box = np.array(
        [head[0] - radius, head[1] - radius * 1.1, head[0] + radius, head[1] + radius * 1.1]
    )
    return face_box, face_visible
