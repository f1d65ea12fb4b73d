"""The one-run audit of a Video-DPRP copy: canary frames through Algorithm 1 with the copy's R and noise scales.

m canary frames, in videos of :data:`FRAMES_PER_VIDEO`, each changed with probability ½ (secretly) by the largest
change the copy's unit allows, in the direction that moves P most. Each frame's row of P̃ = XR + σ1·M is a Gaussian
mechanism of its own (M's rows are independent), so the m frames are m independent neighbouring changes of the unit,
and Steinke, Nasr & Jagielski's one-run bound applies (:mod:`tasks.privacy.one_run_audit`). The auditor knows R (the
public one; a secret per-video R after the release: white box) and scores each frame by its row of P̃ along the
canary's ΔP, in units of σ1: N(‖ΔP‖/σ1, 1) when changed, N(0, 1) when not. It reads P̃, which X̃ is computed from, so
it sees at least what the copy shows. The audit's videos are never part of the copy.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from tasks.core.dp_randomness import DpRandomness
from tasks.dprp.mechanism import Projection, back_project, project, protect_video
from tasks.privacy.dprp_calibration import NoiseScales
from tasks.privacy.one_run_audit import Audit, audit, draw_included

FRAMES_PER_VIDEO = (
    100  # one call of Algorithm 1 (one video's noise draw) per this many canary frames
)
GREY = 128  # the canary frames' base: mid-grey, so a change of ±127 levels stays in range


def top_direction(
    projection: Projection, secret: bool, generator: np.random.Generator
) -> torch.Tensor:
    """(d,) unit vector: R's top left-singular vector for a public R (through RᵀR's top eigenvector); a random
    direction drawn before R for a secret one, which the canary cannot be aimed at."""
    if secret:
        direction = torch.from_numpy(generator.standard_normal(projection.d))
        return direction / direction.norm()
    _, vectors = torch.linalg.eigh(projection.gram())
    direction = back_project(vectors[:, -1:].T.to(projection.device), projection)[0].cpu()
    return direction / direction.norm()


def canary_frames(
    projection: Projection,
    unit: tuple[str, str],
    shape: tuple[int, int, int],
    direction: torch.Tensor,
) -> tuple[np.ndarray, np.ndarray]:
    """(frame without, frame with the canary), uint8 (H, W, 3): the largest change the unit allows along
    ``direction`` — the paper's ℓ2 ≤ 255/√k in whole grey levels (spread over 36 864 values, a scaled direction
    rounds to nothing: ±1 where it is largest), a whole frame (±127 levels by the direction's
    signs), or one pixel value 0 → 255 (the pixel whose row of R is longest). ``unit``: (dprp.calibration,
    dprp.neighbour)."""
    base = np.full(shape, GREY, np.uint8).reshape(-1)
    changed = base.astype(np.int64)
    calibration, neighbour = unit
    # whole grey levels: ±1 on the ⌊(255/√k)²⌋ pixels where the direction is largest
    if calibration == "paper":
        count = min(int((255 / math.sqrt(projection.k)) ** 2), direction.numel())
        largest = torch.topk(direction.abs(), count).indices
        changed[largest.numpy()] += np.sign(direction[largest].numpy()).astype(np.int64)
    elif neighbour == "pixel":
        rows = torch.cat([block.norm(dim=1).cpu() for _, _, block in projection.blocks()])
        pixel = int(rows.argmax())
        base[pixel], changed[pixel] = 0, 255
    else:
        changed = changed + 127 * np.sign(direction.numpy()).astype(np.int64)
    return base.reshape(shape), changed.clip(0, 255).astype(np.uint8).reshape(shape)


def audit_copy(
    projection_of: Callable[[int], Projection],
    per_video: bool,
    secret: bool,
    unit: tuple[str, str],
    scales: NoiseScales,
    rank: int | float,
    shape: tuple[int, int, int],
    randomness: DpRandomness,
    epsilon: float,
    frames: int,
    confidence: float,
) -> Audit:
    """ε̂ of the copy at ``epsilon``: ``frames`` canary frames through :func:`protect_video` with the copy's scales,
    in videos whose R comes from ``projection_of(i)``: the shared R, or (``per_video``) a fresh one per video,
    ``secret`` when drawn from OS entropy, so the canary cannot be aimed at it."""
    stream = randomness.stream("dprp-audit", epsilon)
    included = draw_included(stream, frames)
    generator = randomness.numpy("dprp-audit", epsilon, "direction")
    scores, canary = [], None
    for first in range(0, frames, FRAMES_PER_VIDEO):
        projection = projection_of(first // FRAMES_PER_VIDEO)
        if canary is None or per_video:  # a shared R: one canary, aimed once
            canary = _aimed(projection, unit, shape, top_direction(projection, secret, generator))
        without, with_canary, clean, along = canary
        chosen = included[first : first + FRAMES_PER_VIDEO].numpy()
        video = np.where(chosen[:, None, None, None], with_canary, without)
        out = protect_video(
            video,
            projection,
            sigma1=scales.sigma1,
            sigma2=scales.sigma2,
            rank=rank,
            noise_seed=randomness.seed("dprp-noise", epsilon, "audit", first),
        )
        scores.append((((out.projected - clean) * along).sum(dim=1) / scales.sigma1).numpy())
        if per_video:
            projection.release()
    return audit(np.concatenate(scores), included.numpy(), scales.delta, confidence)


def _aimed(
    projection: Projection,
    unit: tuple[str, str],
    shape: tuple[int, int, int],
    direction: torch.Tensor,
) -> tuple[np.ndarray, np.ndarray, torch.Tensor, torch.Tensor]:
    """(frame without, frame with the canary, P of the frame without, the unit direction of the canary's ΔP)."""
    without, with_canary = canary_frames(projection, unit, shape, direction)
    clean, changed = (
        project(torch.from_numpy(frame.reshape(1, -1).astype(np.float64)), projection).cpu()
        for frame in (without, with_canary)
    )
    moved = changed - clean
    return without, with_canary, clean, moved / moved.norm()
