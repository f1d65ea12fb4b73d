"""Removing people from moving-camera clips and across shot cuts (issue 32): the background comes from the same
shot, registered to the frame, not from one median of the whole clip."""

from __future__ import annotations

import cv2
import numpy as np

from tasks.anonymize.camera import camera_motion, shots
from tasks.anonymize.inpaint import background_plate, remove_people


def texture(seed: int, height: int = 220, width: int = 360) -> np.ndarray:
    """A scene with corners to track: contrasted, smoothed noise under solid shapes (uint8 RGB)."""
    rng = np.random.default_rng(seed)
    noise = cv2.GaussianBlur(rng.random((height, width, 3), dtype=np.float32), (0, 0), 1.5)
    image = cv2.normalize(noise, None, 0, 255, cv2.NORM_MINMAX).astype(np.uint8)
    for _ in range(120):
        x, y = int(rng.integers(0, width - 20)), int(rng.integers(0, height - 20))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        size = rng.integers(4, 20, 2)
        cv2.rectangle(image, (x, y), (x + int(size[0]), y + int(size[1])), colour, -1)
    return image


def moving_box(frames: int, height: int, width: int, speed: int = 5) -> np.ndarray:
    """A 'person' to remove: a 40 × 30 box walking right (T, H, W) bool."""
    masks = np.zeros((frames, height, width), bool)
    for t in range(frames):
        masks[t, 30:70, 20 + speed * t : 50 + speed * t] = True
    return masks


def removed_error(clip: np.ndarray, masks: np.ndarray, out: np.ndarray) -> float:
    """Mean absolute grey-level error at the removed pixels: the box hides nothing, so the truth is the clip itself."""
    return float(np.abs(out.astype(int) - clip)[masks].mean())


def test_a_panning_camera_gets_each_frames_own_background():
    scene = texture(1)
    clip = np.stack(
        [scene[2 * t : 2 * t + 96, 9 * t : 9 * t + 128] for t in range(10)]
    )  # 9 px right, 2 down a frame
    masks = moving_box(10, 96, 128)
    maps = camera_motion(clip, masks)
    assert np.allclose(
        maps[-1][:2, 2], [-81, -18], atol=1.0
    )  # frame 0's pixel (x, y) is at (x − 9t, y − 2t)
    single = np.where(masks[..., None], background_plate(clip, masks)[0][None], clip)
    assert (
        removed_error(clip, masks, single) > 20
    )  # one median of the whole pan: the defect the issue found
    assert removed_error(clip, masks, remove_people(clip, masks)) < 6


def test_a_shot_cut_starts_a_new_background():
    first = texture(2)[:96, :128]
    second = texture(3)[:96, :128] // 2 + np.array(
        [110, 20, 20], np.uint8
    )  # another scene, in reds
    clip = np.stack([first] * 5 + [second] * 5)
    masks = moving_box(10, 96, 128, speed=10)
    assert shots(clip) == [slice(0, 5), slice(5, 10)]
    out = remove_people(clip, masks)
    assert np.array_equal(
        out, clip
    )  # each shot's box was uncovered in another of its frames: exact background
    single = np.where(masks[..., None], background_plate(clip, masks)[0][None], clip)
    assert removed_error(clip, masks, single) > 20


def test_a_static_shot_keeps_one_plate_for_every_frame():
    scene = texture(4)[:96, :128]
    rng = np.random.default_rng(0)
    clip = np.stack(
        [np.clip(scene + rng.normal(0, 2, scene.shape), 0, 255).astype(np.uint8) for _ in range(8)]
    )
    masks = moving_box(8, 96, 128)
    plate, _ = background_plate(clip, masks)
    assert shots(clip) == [slice(0, 8)]
    assert np.array_equal(remove_people(clip, masks), np.where(masks[..., None], plate[None], clip))
