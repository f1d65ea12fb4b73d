"""Fused frames (paper 004 §5, "fused frames"): images grouped by SSIM ≥ 0.7, fused pairwise by a
2-level stationary wavelet transform.

Fusion rule (the paper names only the transform): the approximation bands are averaged, each
detail coefficient is taken from the image where it is larger in magnitude — the usual SWT
fusion rule, which keeps the sharper edge of either image.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pywt

from tasks.assess.similarity import ssim

LEVELS = 2
WAVELET = "haar"


def swt_fuse(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Fuse two grey images (H, W divisible by 4) into one uint8 image."""
    bands_a = pywt.swt2(first.astype(np.float64), WAVELET, level=LEVELS)
    bands_b = pywt.swt2(second.astype(np.float64), WAVELET, level=LEVELS)
    fused = []
    for (approx_a, details_a), (approx_b, details_b) in zip(bands_a, bands_b):
        details = tuple(
            np.where(np.abs(a) >= np.abs(b), a, b) for a, b in zip(details_a, details_b)
        )
        fused.append(((approx_a + approx_b) / 2.0, details))
    return np.clip(np.rint(pywt.iswt2(fused, WAVELET)), 0, 255).astype(np.uint8)


def ssim_groups(images: list[np.ndarray], threshold: float = 0.7) -> list[list[int]]:
    """Greedy grouping: an image joins the first group whose every member it matches with SSIM ≥ threshold.

    "Face images got placed in one group which were at least 70% similar to each other": every pair
    in a group is similar. Order is the input order, so the grouping is deterministic.
    """
    groups: list[list[int]] = []
    for index, image in enumerate(images):
        for group in groups:
            if all(ssim(image, images[member]) >= threshold for member in group):
                group.append(index)
                break
        else:
            groups.append([index])
    return groups


def fused_pairs(
    images: list[np.ndarray], groups: list[list[int]], limit: int
) -> Iterator[np.ndarray]:
    """Every pair inside each group, fused; at most ``limit`` in all, spread evenly over the pairs."""
    pairs = [(a, b) for group in groups for i, a in enumerate(group) for b in group[i + 1 :]]
    if len(pairs) > limit:
        pairs = [pairs[int(index)] for index in np.linspace(0, len(pairs) - 1, limit)]
    for a, b in pairs:
        yield swt_fuse(images[a], images[b])
