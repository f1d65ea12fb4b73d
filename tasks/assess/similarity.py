"""f_sim (paper 004 eq. 24): SSIM (Wang et al. 2004, Gaussian window σ = 1.5) and an MSE similarity.

SSIM is computed as scikit-image's ``structural_similarity(..., gaussian_weights=True, sigma=1.5,
use_sample_covariance=False, data_range=255)``: an 11×11 window (σ truncated at 3.5), reflected
borders, the mean over the interior pixels, channels averaged. OpenCV does the filtering, so a
frame costs well under a millisecond.
"""

from __future__ import annotations

import cv2
import numpy as np

WINDOW = 11  # 2 * int(3.5 * 1.5 + 0.5) + 1
SIGMA = 1.5
C1 = (0.01 * 255) ** 2
C2 = (0.03 * 255) ** 2


def _blur(image: np.ndarray) -> np.ndarray:
    return cv2.GaussianBlur(image, (WINDOW, WINDOW), SIGMA, borderType=cv2.BORDER_REFLECT)


def ssim(first: np.ndarray, second: np.ndarray) -> float:
    """Mean SSIM of two uint8 images (H×W or H×W×C) of the same shape."""
    if first.shape != second.shape:
        raise ValueError(f"ssim: shapes differ: {first.shape} and {second.shape}")
    x, y = first.astype(np.float64), second.astype(np.float64)
    mu_x, mu_y = _blur(x), _blur(y)
    var_x = _blur(x * x) - mu_x * mu_x
    var_y = _blur(y * y) - mu_y * mu_y
    cov = _blur(x * y) - mu_x * mu_y
    index = ((2 * mu_x * mu_y + C1) * (2 * cov + C2)) / (
        (mu_x**2 + mu_y**2 + C1) * (var_x + var_y + C2)
    )
    pad = (WINDOW - 1) // 2
    return float(index[pad:-pad, pad:-pad].mean())


def mse_similarity(first: np.ndarray, second: np.ndarray) -> float:
    """1 − MSE / 255²: 1 for identical frames, 0 for black against white."""
    difference = first.astype(np.float64) - second.astype(np.float64)
    return float(1.0 - np.mean(difference**2) / 255.0**2)
