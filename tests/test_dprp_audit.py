"""The one-run audit of a Video-DPRP copy (tasks/dprp/audit.py) on small frames: its canaries stay inside each unit, it
holds on the mechanism as built and catches σ1 / 32. Randomness seeded (tests only, not private)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from tasks.core.dp_randomness import DpRandomness
from tasks.dprp.audit import audit_copy, canary_frames, top_direction
from tasks.dprp.mechanism import Projection
from tasks.privacy.dprp_calibration import noise_scales

SHAPE, K = (8, 8, 3), 24
D = math.prod(SHAPE)


def copy_audit(calibration: str, neighbour: str, epsilon: float, divisor: float = 1.0):
    """(ε̂, the ε claimed) of a copy with one public R; ``divisor`` plants σ1 / divisor in the mechanism."""
    scales = noise_scales(
        epsilon=epsilon,
        delta=1e-4,
        budget_split=0.8,
        k=K,
        d=D,
        calibration=calibration,
        neighbour=neighbour,
        secret_projection=False,
    )
    projection = Projection(seed=11, d=D, k=K)
    planted = dataclasses.replace(scales, sigma1=scales.sigma1 / divisor)
    found = audit_copy(
        lambda index: projection,
        False,
        False,
        (calibration, neighbour),
        planted,
        1.0,
        SHAPE,
        DpRandomness("seeded", 0),
        epsilon,
        1000,
        0.95,
    )
    return found.epsilon_audited, scales.epsilon


@pytest.mark.parametrize(
    ("calibration", "neighbour"), [("paper", "frame"), ("gaussian", "frame"), ("gaussian", "pixel")]
)
def test_the_canary_is_a_change_the_unit_allows(calibration, neighbour):
    projection = Projection(seed=11, d=D, k=K)
    direction = top_direction(projection, False, np.random.default_rng(0))
    without, with_canary = canary_frames(projection, (calibration, neighbour), SHAPE, direction)
    change = with_canary.astype(np.int64) - without.astype(np.int64)
    assert change.any() and with_canary.dtype == np.uint8
    if calibration == "paper":
        assert np.linalg.norm(change) <= 255 / math.sqrt(K)
    elif neighbour == "pixel":
        assert np.count_nonzero(change) == 1 and abs(change).max() == 255
    # the direction is R's top left-singular vector: nothing moves P more per unit of change
    top = torch.linalg.svd(projection.dense().double(), full_matrices=False)[0][:, 0]
    assert abs(float(direction @ top)) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize(
    ("calibration", "neighbour"), [("paper", "frame"), ("gaussian", "frame"), ("gaussian", "pixel")]
)
def test_it_holds_on_the_copy_as_built(calibration, neighbour):
    found, claimed = copy_audit(calibration, neighbour, 2.0)
    assert found <= claimed


def test_a_thirty_second_of_the_noise_is_caught():
    """One run's power on this copy: σ1 / 8 gives ε̂ 0.45 and σ1 / 16 1.1 against ε = 1 (the calibration's sensitivity
    bound is conservative for any one frame change; tests/test_audit.py's many runs catch σ1 / 8); σ1 / 32 gives 2.3."""
    found, claimed = copy_audit("gaussian", "frame", 1.0)
    broken, _ = copy_audit("gaussian", "frame", 1.0, divisor=32.0)
    assert found <= claimed < broken / 1.5, (found, claimed, broken)
