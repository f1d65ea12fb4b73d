"""Paper 002's baselines: features in the same domain [0, d − 1] as DCAConv's, made without DCA.

- raw pixels: each pixel MinMax-scaled to [0, d − 1] (bounds from the training split, clipped on test);
- HOG bag of visual words: OpenCV HOG descriptors of overlapping blocks, each replaced by the index of its
  nearest of d k-means words (learned on training blocks), so every block is one categorical feature.
"""

from __future__ import annotations

import cv2
import numpy as np
from sklearn.cluster import KMeans

from tasks.privacy.ldp_codes import HOG_BLOCK, HOG_STRIDE


def raw_pixel_codes(
    train: np.ndarray, test: np.ndarray, d: int, fit: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(N, h, w) images → (N, h·w) integers in [0, d − 1], scaled by the minimum and maximum of ``fit`` (default: the
    training split; the video stage passes the public set: under local DP no central step sees private data)."""
    fit = train if fit is None else fit
    low, high = float(fit.min()), float(fit.max())

    def scale(images: np.ndarray) -> np.ndarray:
        unit = (images.reshape(len(images), -1) - low) / max(high - low, 1e-12)
        return np.clip(np.floor(unit * d), 0, d - 1).astype(np.int64)

    return scale(train), scale(test)


def _blocks(images: np.ndarray) -> np.ndarray:
    """(N, h, w) → (N, blocks, 36): 4×4-pixel blocks of 2×2 cells, stride 2, 9 orientation bins."""
    height, width = images.shape[1:]
    hog = cv2.HOGDescriptor(
        (width, height), (HOG_BLOCK, HOG_BLOCK), (HOG_STRIDE, HOG_STRIDE), (2, 2), 9
    )
    scaled = [
        np.clip(image / max(float(images.max()), 1e-12) * 255, 0, 255).astype(np.uint8)
        for image in images
    ]
    return np.stack([hog.compute(image).reshape(-1, 36) for image in scaled])


def hog_bovw_codes(
    train: np.ndarray, test: np.ndarray, d: int, seed: int, fit: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each HOG block's visual word (one of d k-means centres fitted on the blocks of ``fit``, default the training split)."""
    train_blocks, test_blocks = _blocks(train), _blocks(test)
    fit_blocks = train_blocks if fit is None else _blocks(fit)
    words = KMeans(n_clusters=d, n_init=1, random_state=seed % 2**32).fit(
        fit_blocks.reshape(-1, 36)
    )
    return (
        words.predict(train_blocks.reshape(-1, 36)).reshape(len(train), -1),
        words.predict(test_blocks.reshape(-1, 36)).reshape(len(test), -1),
    )
