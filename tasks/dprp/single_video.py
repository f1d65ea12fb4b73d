"""``privhar dprp INPUT OUTPUT``: protect one video file and report the privacy it claims.

Input: any video PyAV decodes, or a ``.npy`` clip (T, H, W, 3) uint8. Output: ``.npy`` (exact)
or a video file (MPEG-4 Part 2 AVI at the input's frame rate, quantiser 2). The report is
the mechanism's full privacy record (σ1, σ2, ε, δ and their split, calibration mode,
neighbouring relation, failure probability) plus sizes and seconds.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from tasks.core.dp_randomness import DpRandomness
from tasks.core.errors import PrivharError
from tasks.core.storage import load_frames, write_failed
from tasks.dprp.mechanism import Projection, fits_comfortably, protect_video, rank_of
from tasks.privacy.dprp_calibration import Calibration, Neighbour, NoiseScales, noise_scales


def read_clip(path: Path) -> tuple[np.ndarray, float]:
    """(frames, fps) of a ``.npy`` clip or a video file; one-line errors."""
    from tasks.video_data.video_reading import Quarantined, read_video

    if path.suffix == ".npy":
        if path.is_dir():
            raise PrivharError(f"{path}: is a folder; expected a .npy clip or a video file")
        return load_frames(path), 25.0
    try:
        return read_video(path)
    except Quarantined as reason:
        raise PrivharError(f"{path}: {reason}") from None


def parse_k(k: str) -> int:
    """``3072`` or ``32x32x3`` (the paper writes k = 32×32×3)."""
    try:
        return int(np.prod([int(part) for part in k.lower().replace("×", "x").split("x")]))
    except ValueError:
        raise PrivharError(
            f"--k {k!r} is invalid: expected an integer or HxWxC such as 32x32x3"
        ) from None


def parse_rank(rank: str) -> int | float:
    """``--rank 512`` (an integer r) or ``--rank 0.5`` (a fraction of k)."""
    try:
        return float(rank) if "." in rank else int(rank)
    except ValueError:
        raise PrivharError(
            f"--rank {rank!r} is invalid: expected an integer or a fraction such as 0.5"
        ) from None


def write_clip(target: Path, frames: np.ndarray, fps: float) -> None:
    """``frames`` into ``target``: ``.npy`` exactly, any other suffix as a video file; never a half-written output."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.tmp{target.suffix}")
    try:
        if target.suffix == ".npy":
            np.save(staging, frames, allow_pickle=False)
        else:
            from tasks.synthetic.encode import write_video

            write_video(staging, frames, fps=fps, quantiser=2, channel_order="rgb")
        os.replace(staging, target)
    except OSError as error:
        raise write_failed(error, target) from None
    finally:
        staging.unlink(missing_ok=True)


def _protected(
    frames: np.ndarray,
    name: str,
    randomness: DpRandomness,
    scales: NoiseScales,
    k: int,
    rank: int,
) -> np.ndarray:
    """Algorithm 1 on one clip with its own R; R and the noise drawn from ``randomness`` under the file's name."""
    d = int(np.prod(frames.shape[1:]))
    projection = Projection(
        seed=randomness.seed("dprp", "R", name), d=d, k=k, keep=fits_comfortably(d, k)
    )
    return protect_video(
        frames,
        projection,
        sigma1=scales.sigma1,
        sigma2=scales.sigma2,
        rank=rank,
        noise_seed=randomness.seed("dprp", "noise", name),
    ).frames


def protect_file(
    source: Path,
    target: Path,
    *,
    epsilon: float,
    delta: float,
    k: str,
    budget_split: float,
    rank: str,
    seed: int | None,
    calibration: Calibration,
    neighbour: Neighbour,
) -> dict[str, Any]:
    """Protect ``source`` into ``target``; return the privacy report.

    ``seed`` None: R and the noise from OS entropy (secret, R then covered by the χ² bound); a seed makes
    both reproducible, R public, and the report says "not private".
    """
    if Path(target).resolve() == Path(source).resolve():
        raise PrivharError(
            f"{target}: is the input video too; write the protected copy to another file"
        )
    frames, fps = read_clip(source)
    d = int(np.prod(frames.shape[1:]))
    k_value = parse_k(k)
    randomness = DpRandomness("secure" if seed is None else "seeded", seed or 0)
    r = rank_of(parse_rank(rank), k_value)
    scales = noise_scales(
        epsilon=epsilon,
        delta=delta,
        budget_split=budget_split,
        k=k_value,
        d=d,
        calibration=calibration,
        neighbour=neighbour,
        secret_projection=randomness.private,
        full_rank=r == k_value,
    )
    started = time.perf_counter()
    protected = _protected(frames, source.name, randomness, scales, k_value, r)
    seconds = time.perf_counter() - started
    write_clip(target, protected, fps)
    return {
        "input": str(source),
        "output": str(target),
        "frames": int(frames.shape[0]),
        "frame_shape": list(frames.shape[1:]),
        "d": d,
        "k": k_value,
        "rank": r,
        "seed": seed,
        "randomness": randomness.label,
        "projection": "per_video",
        **scales.as_dict(),
        "seconds": round(seconds, 3),
    }
