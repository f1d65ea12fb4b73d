"""DCAConv (paper 002 eq. 45-53): two layers of DCA filters learned from mean-removed patches, binarised,
mapped to one integer per pixel, max-pooled — a code whose every feature lies in [0, 2^L2 − 1].

Layer r learns L_r filters of k × k: every k × k patch (zero padding, stride 1, so h̃ = h and w̃ = w)
of the training images has its own mean removed and is labelled with its image's class; DCA on
those patches (eq. 45-50) gives the filters. Layer 2 learns from the patches of all L1 first-layer
maps (eq. 51). Each first-layer map then yields L2 bits per pixel, H(E^l1 ⋆ W2^l2) (eq. 52), read as
T^l1 = Σ_l2 2^(l2−1) H(·) (eq. 53); s × s max pooling follows. Responses are correlations (patch ·
filter), the operation the filters were fitted for. Eq. 45 divides the patch sum by the number of
images; the mean patch (divided by the number of patches) is what "mean-removed" needs.
Fitting uses at most ``fit_patches`` patches per layer, drawn with the seed (millions of video-frame
patches would not fit in memory); they are learned on the training split only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from tasks.core.errors import PrivharError
from tasks.ldp.dca import fit_dca
from tasks.privacy.ldp_codes import feature_count


@dataclass(frozen=True)
class DcaConv:
    first: np.ndarray  # (L1, k, k)
    second: np.ndarray  # (L2, k, k)
    pool: int

    @property
    def domain(self) -> int:
        """d = 2^L2: the number of values each feature can take."""
        return 2 ** len(self.second)

    def features(self, shape: tuple[int, int]) -> int:
        return feature_count(len(self.first), self.pool, shape)

    def encode(self, images: np.ndarray, batch: int = 512) -> np.ndarray:
        """(N, h, w) images → (N, L1 · h̃p · w̃p) integer codes in [0, 2^L2 − 1] (uint8 for L2 ≤ 8)."""
        dtype = np.uint8 if len(self.second) <= 8 else np.int64
        parts = [
            self._encode(
                torch.from_numpy(np.asarray(images[start : start + batch], dtype=np.float32))
            )
            for start in range(0, len(images), batch)
        ]
        return np.concatenate(parts).astype(dtype)

    def _encode(self, images: torch.Tensor) -> np.ndarray:
        maps = _correlate(images[:, None], self.first)  # (N, L1, h, w): eq. 51
        n, l1, h, w = maps.shape
        bits = _correlate(maps.reshape(n * l1, 1, h, w), self.second) > 0  # eq. 52: H(E^l1 ⋆ W2^l2)
        weights = (2 ** torch.arange(len(self.second), dtype=torch.float32))[None, :, None, None]
        codes = (bits.float() * weights).sum(dim=1).reshape(n, l1, h, w)  # eq. 53
        pooled = F.max_pool2d(codes, self.pool) if self.pool > 1 else codes
        return pooled.reshape(n, -1).round().numpy()


def _correlate(images: torch.Tensor, filters: np.ndarray) -> torch.Tensor:
    """(N, 1, h, w) ⋆ (L, k, k) → (N, L, h, w) with zero padding (h̃ = h: stride 1, z = (k − 1) / 2)."""
    kernel = torch.from_numpy(np.asarray(filters, dtype=np.float32))[:, None]
    return F.conv2d(images, kernel, padding=filters.shape[-1] // 2)


def mean_removed_patches(images: np.ndarray, size: int) -> np.ndarray:
    """Every size × size patch of each (zero-padded) image, vectorised, its own mean removed: (N, h·w, size²)."""
    pad = size // 2
    padded = np.pad(np.asarray(images, dtype=np.float32), ((0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (size, size), axis=(1, 2))
    patches = windows.reshape(len(images), -1, size * size)
    return patches - patches.mean(axis=2, keepdims=True)


def _fit_layer(
    images: np.ndarray,
    labels: np.ndarray,
    size: int,
    filters: int,
    limit: int,
    rng: np.random.Generator,
    ridge: float,
) -> np.ndarray:
    patches = mean_removed_patches(images, size)
    per_image = patches.shape[1]
    flat = patches.reshape(-1, size * size)
    patch_labels = np.repeat(labels, per_image)
    if len(flat) > limit:
        chosen = rng.choice(len(flat), size=limit, replace=False)
        flat, patch_labels = flat[chosen], patch_labels[chosen]
    dca = fit_dca(flat, patch_labels, filters, ridge=ridge)
    return dca.components.T.reshape(filters, size, size)


def fit_dcaconv(
    images: np.ndarray,
    labels: np.ndarray,
    *,
    first: int,
    second: int,
    size: int = 3,
    pool: int = 2,
    fit_patches: int = 200_000,
    seed: int = 0,
    ridge: float = 1e-3,
) -> DcaConv:
    """Learn both layers from training ``images`` (N, h, w) and their ``labels``."""
    if size % 2 == 0 or size < 1:
        raise PrivharError(f"DCAConv: patch size {size} must be odd (zero padding keeps h̃ = h)")
    if second < 1 or first < 1:
        raise PrivharError(
            f"DCAConv: L1 = {first} and L2 = {second} must be at least 1 (d = 2^L2 ≥ 2)"
        )
    rng = np.random.default_rng(seed)
    first_filters = _fit_layer(images, labels, size, first, fit_patches, rng, ridge)
    maps = _correlate(
        torch.from_numpy(np.asarray(images, dtype=np.float32))[:, None], first_filters
    ).numpy()
    n, l1, h, w = maps.shape
    second_filters = _fit_layer(
        maps.reshape(n * l1, h, w), np.repeat(labels, l1), size, second, fit_patches, rng, ridge
    )
    return DcaConv(first_filters, second_filters, pool)
