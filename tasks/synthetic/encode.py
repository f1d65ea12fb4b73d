"""Write frames as a real encoded video file (H.264 in MP4, through PyAV / FFmpeg)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np


def write_video(path: Path, frames: np.ndarray, *, fps: float, crf: int = 20, channel_order: str = "bgr") -> None:
    """Encode (T, H, W, 3) uint8 frames; single-threaded x264 so the bytes are reproducible."""
    height, width = frames.shape[1:3]
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": str(crf), "preset": "veryfast", "threads": "1"}
        stream.codec_context.thread_count = 1
        pixel_format = "bgr24" if channel_order == "bgr" else "rgb24"
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format=pixel_format)):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
