"""The dprp stage on tiny decoded clips: protected copies of both splits and a privacy ledger."""

import io

import numpy as np
import pyarrow.parquet as pq
import pytest

from tasks.core.errors import PrivharError
from tasks.core.manifest import read_manifest
from tasks.dprp.calibration import noise_scales
from tasks.dprp.stage import dprp
from tests.conftest import write_params

DPRP = {"epsilons": [2.0, 8.0], "delta": 1.0e-4, "k": [4, 4, 3], "budget_split": 0.8, "rank": 1.0,
        "calibration": "paper", "neighbour": "frame", "projection": "shared", "block_rows": 512}


@pytest.mark.parametrize("projection", ["shared", "per_video"])
def test_stage_protects_every_clip_and_records_its_privacy(tiny_decoded, tmp_path, monkeypatch, projection):
    monkeypatch.chdir(tiny_decoded)
    params = write_params(tmp_path, {"dprp": {**DPRP, "projection": projection}})
    rows = dprp(params_path=params, frames=tiny_decoded / "data/decode", epsilon=8.0, out=tmp_path / "out",
                report=tmp_path / "report")
    assert (tmp_path / "report/eps8.0.png").read_bytes()[:4] == b"\x89PNG"
    source = read_manifest(tiny_decoded / "data/decode/manifest.parquet")
    assert [row["video_id"] for row in rows] == [row["video_id"] for row in source]
    assert {row["split"] for row in rows} == {"train", "test"}
    expected = noise_scales(epsilon=8.0, delta=1e-4, budget_split=0.8, k=48, d=32 * 40 * 3, calibration="paper",
                            neighbour="frame")
    ledger = pq.read_table(tmp_path / "out/ledger.parquet").to_pylist()
    assert len(ledger) == len(source) and all(entry["sigma1"] == expected.sigma1 for entry in ledger)
    assert {row["accountant"] for row in rows} == {expected.accountant}  # what a model trained on them claims
    clip = np.load(tmp_path / "out" / rows[0]["path"])
    original = np.load(tiny_decoded / "data/decode" / source[0]["path"])
    assert clip.shape == original.shape and clip.dtype == np.uint8 and not np.array_equal(clip, original)
    again = dprp(params_path=params, frames=tiny_decoded / "data/decode", epsilon=8.0, out=tmp_path / "again")
    assert np.load(tmp_path / "again" / again[0]["path"]).tobytes() == clip.tobytes()


def test_an_epsilon_not_configured_is_one_line(tiny_decoded, tmp_path):
    params = write_params(tmp_path, {"dprp": DPRP})
    with pytest.raises(PrivharError, match=r"epsilon 5.0 is not one of dprp.epsilons = \[2.0, 8.0\]"):
        dprp(params_path=params, frames=tiny_decoded / "data/decode", epsilon=5.0, out=tmp_path / "out")


def test_preview_shows_raw_frames_only_for_the_synthetic_dataset(tiny_decoded, tmp_path):
    from PIL import Image

    from tasks.dprp.preview import preview_png

    folder = tiny_decoded / "data/decode"
    rows = read_manifest(folder / "manifest.parquet")
    sizes = [Image.open(io.BytesIO(preview_png(rows, folder, rows, folder, "t", show_raw=show))).size
             for show in (True, False)]
    assert sizes[0][0] > 1.5 * sizes[1][0]  # two columns, then one
