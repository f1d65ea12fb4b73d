"""Real clips that the synthetic set never has (issue 32): metadata that is not UTF-8, mixed frame sizes."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from tasks.synthesize import preview
from tasks.video_data.datasets import probe
from tasks.video_data.video_reading import read_video


def latin1_titled_clip(path: Path, height: int, width: int, frames: int = 6) -> Path:
    """An MPEG-4 AVI whose title is Latin-1 bytes, as in HMDB51: written as UTF-8 "café", then its two bytes é
    replaced by Latin-1's one and a space (same length, invalid UTF-8)."""
    with av.open(str(path), "w") as container:
        container.metadata["title"] = "café"
        stream = container.add_stream("mpeg4", rate=8)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for index in range(frames):
            picture = np.full((height, width, 3), 40 * index, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    content = path.read_bytes()
    assert content.count("café".encode()) == 1
    path.write_bytes(content.replace("café".encode(), b"caf\xe9 "))
    return path


def test_a_clip_with_latin1_metadata_is_probed_decoded_and_previewed_beside_another_size(tmp_path):
    wide = latin1_titled_clip(tmp_path / "wide.avi", 32, 48)
    latin1_titled_clip(tmp_path / "tall.avi", 48, 32)
    with pytest.raises(
        UnicodeDecodeError
    ):  # PyAV's default, which crashed the index stage's preview
        av.open(str(wide))
    assert probe(wide) == {"n_frames": 6, "fps": 8.0, "height": 32, "width": 48}
    frames, fps = read_video(wide)  # EncodedVideo refuses the file; PyAV directly, metadata dropped
    assert frames.shape == (6, 32, 48, 3) and fps == 8.0
    assert abs(int(frames[5].mean()) - 200) <= 3  # the last frame's grey, through MPEG-4
    rows = [
        {"label": 0, "action": "wave", "path": "wide.avi"},
        {"label": 1, "action": "squat", "path": "tall.avi"},
    ]
    image = preview(rows, tmp_path, frames=2, height=24)
    # one strip per action, 24 rows each, the narrower padded white to the wider: label 110 + 2 × 36 columns
    assert image.shape == (48, 110 + 2 * 36, 3)
    assert (image[24:, 110 + 2 * 16 :] == 255).all() and image[24:, 110 : 110 + 16].max() < 255
