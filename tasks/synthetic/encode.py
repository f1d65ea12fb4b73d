"""Write frames as a real encoded video file: MPEG-4 Part 2 in AVI, through PyAV / FFmpeg.

Why MPEG-4 Part 2 and not H.264: UCF101 itself ships XviD (MPEG-4 Part 2) AVIs, and on this
machine libx264 produced different bytes for the same frames when other processes loaded
the CPU (threads=1, no threaded lookahead, explicit pts: still), which would break the
byte-identical rerun guarantee. FFmpeg's own ``mpeg4`` encoder, single-threaded with a fixed
quantiser, gave identical bytes in every run.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

LAMBDA_PER_QUANTISER = 118  # FFmpeg's FF_QP2LAMBDA: global_quality = quantiser * 118


def write_video(
    path: Path, frames: np.ndarray, *, fps: float, quantiser: int = 4, channel_order: str = "bgr"
) -> None:
    """Encode (T, H, W, 3) uint8 frames (even H and W) at a fixed MPEG-4 quantiser (1 best .. 31)."""
    height, width = frames.shape[1:3]
    to_yuv = cv2.COLOR_BGR2YUV_I420 if channel_order == "bgr" else cv2.COLOR_RGB2YUV_I420
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {
            "flags": "qscale",
            "global_quality": str(quantiser * LAMBDA_PER_QUANTISER),
        }
        stream.codec_context.thread_count = 1
        for index, frame in enumerate(frames):
            picture = av.VideoFrame.from_ndarray(
                cv2.cvtColor(np.ascontiguousarray(frame), to_yuv), format="yuv420p"
            )
            picture.pts = index
            for packet in stream.encode(picture):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
