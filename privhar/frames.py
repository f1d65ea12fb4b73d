"""``privhar.protector``: ``privhar protect``'s core for a program that has its own frames (issue 84's Python entry
point). It gives a :class:`tasks.anonymize.frame_protector.FrameProtector`: push RGB frames with their timestamps,
get protected frames back a stretch at a time, each with the gate's verdict.

    >>> protect = privhar.protector(25, method="face_blur")      # doctest: +SKIP
    >>> for image, stamp in camera:                                # doctest: +SKIP
    ...     for frame in protect.push(image, stamp):               # protected, or black where the gate failed
    ...         show(frame.image, frame.timestamp, frame.passed)
    >>> for frame in protect.flush(): ...                          # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PROJECT_PARAMS = Path(__file__).resolve().parent.parent / "params.yaml"


def protector(
    fps: float,
    *,
    method: str = "face_blur",
    detectors: str = "centerface,mediapipe,motion",
    params: Path | None = None,
    chunk_seconds: float = 1.0,
    **options: Any,
) -> Any:
    """A :class:`~tasks.anonymize.frame_protector.FrameProtector` for frames at ``fps``: ``method`` and ``detectors``
    as ``privhar protect``'s options, the rest of the anonymize section from ``params`` (default: this project's
    params.yaml), ``chunk_seconds`` of frames gated at once (a frame comes back at most that much later), and the
    command's other options (``detect_every``, ``detect_scale``, ``seed``) by name."""
    from flows.stage_readers import section
    from tasks.anonymize.frame_protector import FrameProtector, ProtectOptions
    from tasks.core.errors import PrivharError

    params_path = Path(params) if params is not None else PROJECT_PARAMS
    if not params_path.is_file():
        raise PrivharError(
            f"{params_path}: no such params file (pass params=, a privhar params.yaml)"
        )
    chosen = ProtectOptions.of(
        {"method": method, "detectors": detectors, "chunk_seconds": chunk_seconds, **options}
    )
    return FrameProtector(fps, params=section(params_path, "anonymize"), options=chosen)
