"""The size of a DCAConv code and of paper 002's baseline codes: the local-DP budget plans each release's ε per video
from it before any filter is fitted, so it lives here, where tasks/privacy/budget.py can use it without importing the ldp
stage."""

from __future__ import annotations


def feature_count(first_filters: int, pool: int, shape: tuple[int, int]) -> int:
    """How many features an image of ``shape`` gives: L1 · ⌊h / s⌋ · ⌊w / s⌋ (known before any fitting: the budget plans with it)."""
    return first_filters * (shape[0] // pool) * (shape[1] // pool)


HOG_BLOCK, HOG_STRIDE = (
    4,
    2,
)  # tasks/ldp/baselines.py: 4 × 4-pixel HOG blocks of 2 × 2 cells, stride 2


def baseline_feature_counts(shape: tuple[int, int]) -> dict[str, int]:
    """Features per image of paper 002's baselines: every pixel (raw pixels), one visual word per HOG block."""
    height, width = shape
    blocks = ((height - HOG_BLOCK) // HOG_STRIDE + 1) * ((width - HOG_BLOCK) // HOG_STRIDE + 1)
    return {"raw_pixels": height * width, "hog_bovw": blocks}
