"""The size of a DCAConv code (paper 002): the local-DP budget plans each release's ε per video from it before any
filter is fitted, so it lives here, where tasks/core/budget.py can use it without importing the ldp stage."""

from __future__ import annotations


def feature_count(first_filters: int, pool: int, shape: tuple[int, int]) -> int:
    """How many features an image of ``shape`` gives: L1 · ⌊h / s⌋ · ⌊w / s⌋ (known before any fitting: the budget plans with it)."""
    return first_filters * (shape[0] // pool) * (shape[1] // pool)
