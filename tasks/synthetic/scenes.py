"""Textured backgrounds: indoor rooms and outdoor places, the private context of a video.

A scene is fixed by (seed, scene index): the same room every time it appears, so that a
scene is recognisable across videos (and leaks where a person lives, as real footage does).
Even indices are indoor, odd ones outdoor.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from tasks.core.item_randomness import rng_for

INDOOR = ("living_room", "kitchen", "office", "gym", "bedroom", "hall")
OUTDOOR = ("park", "street", "beach", "forest", "yard", "plaza")


@dataclass(frozen=True)
class Scene:
    index: int
    name: str
    kind: str  # "indoor" | "outdoor"
    image: np.ndarray  # (H, W, 3) uint8 BGR, larger than the frame by the jitter margin
    horizon: float  # fraction of the height where floor or ground begins


def _smooth_noise(rng: np.random.Generator, height: int, width: int, cells: int) -> np.ndarray:
    """Noise in [0, 1] with about ``cells`` blobs across: texture without a pattern."""
    small = rng.random((max(2, cells * height // width), max(2, cells)))
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC).clip(0, 1)


def _tint(
    shape: tuple[int, int], colour: np.ndarray, texture: np.ndarray, strength: float
) -> np.ndarray:
    return colour[None, None, :] * (1.0 - strength + 2 * strength * texture[..., None])


def _indoor(rng: np.random.Generator, height: int, width: int) -> tuple[np.ndarray, float]:
    horizon = rng.uniform(0.5, 0.62)
    floor_row = int(horizon * height)
    wall = rng.uniform(90, 230, 3)
    image = _tint((height, width), wall, _smooth_noise(rng, height, width, 6), 0.08)
    motif = rng.integers(3)
    if motif == 0:  # vertical wallpaper stripes
        period = int(rng.integers(8, 20))
        image[:, (np.arange(width) // period) % 2 == 0] *= 0.9
    elif motif == 1:  # dots
        for y in range(6, floor_row, 14):
            for x in range(6 + (y // 14 % 2) * 7, width, 14):
                cv2.circle(image, (x, y), 2, (wall * 0.75).tolist(), -1, cv2.LINE_AA)
    floor = rng.uniform(50, 170, 3)
    image[floor_row:] = _tint(
        (height - floor_row, width), floor, _smooth_noise(rng, height - floor_row, width, 12), 0.12
    )
    if rng.random() < 0.5:  # planks
        for x in range(0, width, int(rng.integers(18, 34))):
            cv2.line(
                image,
                (x, floor_row),
                (int(x + (x - width / 2) * 0.6), height),
                (floor * 0.7).tolist(),
                1,
                cv2.LINE_AA,
            )
    else:  # tiles
        for y in range(floor_row, height, 12):
            cv2.line(image, (0, y), (width, y), (floor * 0.75).tolist(), 1)
    for _ in range(int(rng.integers(2, 5))):  # window, door, picture, shelf, sofa
        w, h = int(rng.uniform(0.1, 0.25) * width), int(rng.uniform(0.15, 0.4) * height)
        x, y = int(rng.uniform(0, width - w)), int(rng.uniform(0.05, 0.9) * max(1, floor_row - h))
        colour = rng.uniform(30, 220, 3)
        cv2.rectangle(image, (x, y), (x + w, y + h), colour.tolist(), -1)
        cv2.rectangle(image, (x, y), (x + w, y + h), (colour * 0.5).tolist(), 2)
    sofa_w = int(rng.uniform(0.2, 0.35) * width)
    sofa_x = int(rng.uniform(0, width - sofa_w))
    cv2.rectangle(
        image,
        (sofa_x, floor_row - int(0.12 * height)),
        (sofa_x + sofa_w, floor_row + 6),
        rng.uniform(30, 200, 3).tolist(),
        -1,
    )
    return image, horizon


def _skyline_item(rng: np.random.Generator, image: np.ndarray, ground_row: int, width: int) -> None:
    """A building (a rectangle) or a tree (a trunk and a crown) standing on the skyline."""
    w, h = int(rng.uniform(0.05, 0.15) * width), int(rng.uniform(0.15, 0.5) * ground_row)
    x = int(rng.uniform(0, width - w))
    if rng.random() < 0.5:
        cv2.rectangle(
            image,
            (x, ground_row - h),
            (x + w, ground_row),
            rng.uniform(60, 200, 3).tolist(),
            -1,
        )
    else:
        cv2.rectangle(
            image,
            (x + w // 2 - 2, ground_row - h // 2),
            (x + w // 2 + 2, ground_row),
            (30, 60, 90),
            -1,
        )
        cv2.circle(
            image,
            (x + w // 2, ground_row - h // 2),
            w // 2 + 4,
            (40, rng.uniform(90, 160), 40),
            -1,
            cv2.LINE_AA,
        )


def _outdoor(rng: np.random.Generator, height: int, width: int) -> tuple[np.ndarray, float]:
    horizon = rng.uniform(0.45, 0.6)
    ground_row = int(horizon * height)
    rows = np.linspace(0, 1, ground_row)[:, None, None]
    top, bottom = np.array([200, 140, 90]) * rng.uniform(0.8, 1.2), np.array([245, 215, 190])
    image = np.zeros((height, width, 3))
    image[:ground_row] = top * (1 - rows) + bottom * rows
    for _ in range(int(rng.integers(2, 6))):  # clouds
        centre = (int(rng.uniform(0, width)), int(rng.uniform(0, 0.6) * ground_row))
        cv2.ellipse(
            image,
            centre,
            (int(rng.uniform(15, 40)), int(rng.uniform(5, 12))),
            0,
            0,
            360,
            (250, 250, 250),
            -1,
            cv2.LINE_AA,
        )
    for _ in range(int(rng.integers(3, 9))):  # buildings or trees on the skyline
        _skyline_item(rng, image, ground_row, width)
    ground = (
        np.array([60, rng.uniform(110, 170), 70]) if rng.random() < 0.6 else rng.uniform(90, 200, 3)
    )
    image[ground_row:] = _tint(
        (height - ground_row, width),
        ground,
        _smooth_noise(rng, height - ground_row, width, 30),
        0.2,
    )
    if rng.random() < 0.5:  # a path
        path = rng.uniform(100, 200, 3)
        top_y = ground_row + int(0.3 * (height - ground_row))
        cv2.rectangle(
            image, (0, top_y), (width, top_y + int(0.25 * (height - ground_row))), path.tolist(), -1
        )
    return image, horizon


def make_scene(seed: int, index: int, height: int, width: int) -> Scene:
    """Scene ``index`` rendered at (height, width)."""
    rng = rng_for(seed, "scene", index)
    indoor = index % 2 == 0
    names = INDOOR if indoor else OUTDOOR
    name = (
        f"{names[(index // 2) % len(names)]}_{index // (2 * len(names))}"
        if index >= 2 * len(names)
        else names[(index // 2) % len(names)]
    )
    image, horizon = (_indoor if indoor else _outdoor)(rng, height, width)
    return Scene(
        index=index,
        name=name,
        kind="indoor" if indoor else "outdoor",
        image=np.clip(image, 0, 255).astype(np.uint8),
        horizon=horizon,
    )
