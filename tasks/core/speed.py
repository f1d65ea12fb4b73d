"""Measured filter speed, written by each protecting stage and read by assess for f_speed (paper 004 eq. 25)."""

from __future__ import annotations

import json
from pathlib import Path

from tasks.core.errors import PrivharError
from tasks.core.storage import atomic_write_bytes


def write_speed(path: Path, *, frames: int, seconds: float, measured: str) -> float:
    """Write ``{"frames_per_second", "frames", "seconds", "measured"}``; return the frames/s."""
    speed = frames / max(seconds, 1e-9)
    payload = {
        "frames_per_second": round(speed, 3),
        "frames": frames,
        "seconds": round(seconds, 4),
        "measured": measured,
    }
    atomic_write_bytes(path, (json.dumps(payload, indent=2) + "\n").encode())
    return speed


def read_speed(path: Path) -> float:
    """The frames/s in ``path``; one line naming the file if it is missing or malformed."""
    if not path.is_file():
        raise PrivharError(
            f"{path}: not found; the stage that made this copy writes its measured frames/s there"
        )
    try:
        value = float(json.loads(path.read_text())["frames_per_second"])
    except (ValueError, KeyError, TypeError) as error:
        raise PrivharError(
            f"{path}: expected JSON with a number frames_per_second ({error})"
        ) from None
    if not value > 0:
        raise PrivharError(f"{path}: frames_per_second must be positive, got {value}")
    return value
