"""The anonymization methods' functions, keyed by their catalogue names (tasks/core/anonymize_catalogue.py).

Each takes the clip, the people arrays its catalogue entry asks for, the stage's params, the stage seed and the
method's own spelling (``low_res_32x24`` carries its size), and returns (protected clip, public mask).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tasks.anonymize.avatars import FULL_COVERAGE, Avatar, avatar_for, render
from tasks.anonymize.inpaint import remove_people
from tasks.anonymize.obfuscate import (
    black_out,
    blur_faces,
    dilate,
    fill_faces,
    low_res_size,
    low_resolution,
    mosaic_faces,
    no_public_pixels,
)
from tasks.core.params import AnonymizeParams

People = dict[str, np.ndarray]
Protect = Callable[[np.ndarray, People, AnonymizeParams, int, str], tuple[np.ndarray, np.ndarray]]


def replace_with_avatars(
    frames: np.ndarray, truth: People, dilation: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Paper 001 §5.2: remove every person (dilated mask), render avatars in their poses.

    The public mask is the pixels the avatars cover fully (coverage 255 in
    :func:`tasks.anonymize.avatars.render`): an edge pixel of partial coverage blends the
    people-removed real background into the avatar's colour, so it is real content and stays
    private (issue 58: at ``coverage > 0``, 36 % of MaskDP's public input pixels moved with the
    real clip). A person whose skeleton is not finite in a frame is not drawn there.
    """
    clean = remove_people(frames, dilate(truth["person_mask"], dilation))
    out, public = np.empty_like(frames), np.empty(frames.shape[:3], np.uint8)
    for t in range(len(frames)):
        out[t], coverage = render(clean[t], avatars_at(truth, seed, t))
        public[t] = coverage == FULL_COVERAGE
    return out, public


def avatars_at(truth: People, seed: int, t: int) -> list[tuple[np.ndarray, np.ndarray, Avatar]]:
    """(points, depth, avatar) of every person drawn in frame ``t``: those with a finite skeleton there."""
    return [
        (truth["skeleton"][t, p], truth["joint_depth"][t, p], avatar_for(seed, identity))
        for p, identity in enumerate(truth["identity"])
        if np.isfinite(truth["skeleton"][t, p]).all()
        and np.isfinite(truth["joint_depth"][t, p]).all()
    ]


PROTECT: dict[str, Protect] = {
    "avatar": lambda frames, people, params, seed, _: replace_with_avatars(
        frames, people, params.mask_dilation, seed
    ),
    "face_blur": lambda frames, people, params, seed, _: (
        blur_faces(frames, people["face_box"], params.face_blur_kernel, params.face_blur_sigma),
        no_public_pixels(frames),
    ),
    "mosaic": lambda frames, people, params, seed, _: (
        mosaic_faces(frames, people["face_box"], params.mosaic_cells),
        no_public_pixels(frames),
    ),
    "solid": lambda frames, people, params, seed, _: (
        fill_faces(frames, people["face_box"], tuple(params.solid_colour)),
        no_public_pixels(frames),
    ),
    "blackout": lambda frames, people, params, seed, _: black_out(
        frames, people["person_mask"], params.mask_dilation
    ),
    "none": lambda frames, people, params, seed, _: (frames.copy(), no_public_pixels(frames)),
    "low_res": lambda frames, people, params, seed, value: (
        low_resolution(frames, low_res_size(value)),
        no_public_pixels(frames),
    ),
}
