"""Decode: fixed-rate, fixed-size lossless clips; bad files quarantined with their reason."""

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flows.stage_commands import stage_call
from tasks.core.errors import PrivharError
from tasks.core.manifest import read_manifest, write_manifest
from tasks.video_data.video_reading import Geometry, resample_indices
from tests.conftest import write_params

decode = stage_call("decode")


def test_clips_have_the_configured_shape(tiny_decoded):
    folder = tiny_decoded / "data/decode"
    rows = read_manifest(folder / "manifest.parquet")
    assert len(rows) == 12
    for row in rows:
        clip = np.load(folder / row["path"])
        assert clip.shape == (4, 32, 40, 3) and clip.dtype == np.uint8
        assert (row["n_frames"], row["height"], row["width"], row["fps"]) == (4, 32, 40, 6.0)
        assert row["source_frames"] == 12
    assert pq.read_table(folder / "quarantine.parquet").num_rows == 0


def test_annotations_follow_the_pixels(tiny_decoded):
    folder = tiny_decoded / "data/decode"
    for row in read_manifest(folder / "manifest.parquet"):
        with np.load(folder / row["annotations"]) as truth:
            mask, boxes = truth["person_mask"], truth["body_box"]
            assert mask.shape == (4, 32, 40)
            assert (mask == 1).any(axis=(1, 2)).all()
            visible = ~np.isnan(boxes[:, 0, 0])
            assert (boxes[visible, 0, 2] <= 40).all() and (boxes[visible, 0, 3] <= 32).all()
            ys, xs = np.nonzero(mask[0] == 1)
            box = boxes[0, 0]
            assert abs(xs.min() - box[0]) <= 2 and abs(xs.max() + 1 - box[2]) <= 2


def test_rerun_is_byte_identical(tmp_path, tiny_decoded):
    decode(
        params_path=tiny_decoded / "params.yaml",
        source=tiny_decoded / "data/synthesize",
        out=tmp_path / "again",
    )
    for name in [
        "manifest.parquet",
        *(f"frames/{p.name}" for p in (tmp_path / "again/frames").iterdir()),
    ]:
        first = hashlib.sha256((tiny_decoded / "data/decode" / name).read_bytes()).hexdigest()
        assert hashlib.sha256((tmp_path / "again" / name).read_bytes()).hexdigest() == first, name


def _broken_source(tmp_path: Path, tiny: Path) -> Path:
    """A copy of the tiny source with four bad files: empty, truncated, not a video, missing."""
    source = tmp_path / "source"
    shutil.copytree(tiny / "data/synthesize", source)
    rows = read_manifest(source / "manifest.parquet")
    videos = [source / row["path"] for row in rows]
    videos[0].write_bytes(b"")
    videos[1].write_bytes(videos[1].read_bytes()[: videos[1].stat().st_size // 2])
    videos[2].write_text("this is a text file, not a video\n")
    videos[3].unlink()
    write_manifest(rows, source / "manifest.parquet")
    return source


def test_bad_files_are_quarantined_with_their_reason(tmp_path, tiny_synthetic):
    source = _broken_source(tmp_path, tiny_synthetic)
    params = write_params(tmp_path, {"decode": {"max_failed_fraction": 0.5}})
    decoded = decode(params_path=params, source=source, out=tmp_path / "out")
    assert len(decoded) == 8
    reasons = {
        row["video_id"]: row["reason"]
        for row in pq.read_table(tmp_path / "out/quarantine.parquet").to_pylist()
    }
    rows = read_manifest(source / "manifest.parquet")
    assert reasons[rows[0]["video_id"]] == "empty file (0 bytes)"
    assert reasons[rows[1]["video_id"]].startswith(
        ("truncated", "not a readable video", "no decodable")
    )
    assert reasons[rows[2]["video_id"]].startswith("not a readable video")
    assert reasons[rows[3]["video_id"]] == "file not found"


def test_too_many_failures_stop_the_stage_and_write_nothing(tmp_path, tiny_synthetic):
    source = _broken_source(tmp_path, tiny_synthetic)
    params = write_params(tmp_path, {"decode": {"max_failed_fraction": 0.2}})
    with pytest.raises(
        PrivharError, match=r"4 of 12 videos failed \(33% > decode.max_failed_fraction = 0.2\)"
    ):
        decode(params_path=params, source=source, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")], (
        "no staging folder is left behind"
    )


def test_missing_manifest_is_one_line(tmp_path):
    params = write_params(tmp_path)
    with pytest.raises(PrivharError, match="manifest not found"):
        decode(params_path=params, source=tmp_path / "nowhere", out=tmp_path / "out")


@given(
    n_source=st.integers(1, 200),
    source_fps=st.sampled_from([10.0, 24.0, 25.0, 29.97, 30.0, 60.0]),
    target_fps=st.sampled_from([4.0, 8.0, 12.5, 25.0]),
    frames=st.integers(1, 40),
    mode=st.sampled_from(["loop", "pad"]),
)
def test_resampling_stays_in_range_and_in_time(n_source, source_fps, target_fps, frames, mode):
    indices = resample_indices(n_source, source_fps, target_fps, frames, mode)
    assert len(indices) == frames
    assert indices.min() >= 0 and indices.max() < n_source
    span = min(frames, max(1, int(n_source * target_fps / source_fps + 1e-9)))
    head = indices[:span]
    assert (np.diff(head) >= 0).all()
    expected = np.minimum(np.floor(np.arange(span) / target_fps * source_fps + 1e-6), n_source - 1)
    assert (head == expected).all()


def test_geometry_covers_then_crops():
    geometry = Geometry.fit((240, 320), (96, 96))
    assert geometry.size == (96, 128) and (geometry.crop_x, geometry.crop_y) == (16, 0)
    assert geometry.points(np.array([[160.0, 120.0]])).tolist() == [[48.0, 48.0]]


def test_frames_masks_boxes_and_keypoints_move_together():
    """One transforms.v2 pipeline: a bright person-shaped block, its mask, its box and its corner points agree after it."""
    geometry = Geometry.fit((240, 320), (72, 96))
    frames = np.zeros((2, 240, 320, 3), np.uint8)
    masks = np.zeros((2, 240, 320), np.uint8)
    frames[:, 60:180, 100:150] = 255
    masks[:, 60:180, 100:150] = 1
    box = np.array([[[100.0, 60.0, 150.0, 180.0]]] * 2, np.float32)
    corners = box.reshape(2, 1, 2, 2)
    moved_masks, moved_boxes, moved_points = geometry.annotations(masks, {"body_box": box}, corners)
    moved_frames = geometry.frames(frames)
    rows, columns = np.nonzero(moved_masks[0])
    x0, y0, x1, y1 = moved_boxes["body_box"][0, 0]
    assert abs(columns.min() - x0) <= 1 and abs(columns.max() + 1 - x1) <= 1
    assert abs(rows.min() - y0) <= 1 and abs(rows.max() + 1 - y1) <= 1
    assert np.allclose(moved_points.reshape(2, 1, 4), moved_boxes["body_box"])
    bright = moved_frames[0, ..., 0] > 127
    assert (
        bright == moved_masks[0].astype(bool)
    ).mean() > 0.98  # the pixels went where the mask went
