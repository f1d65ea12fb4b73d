"""The anonymize stage's obfuscation baselines on tiny decoded clips with ground truth."""

import cv2
import numpy as np
import pytest

from tasks.anonymize.obfuscate import dilate, low_res_size
from tasks.anonymize.stage import anonymize
from tasks.core.errors import PrivharError
from tasks.core.manifest import read_manifest, resolve_path
from tests.conftest import write_params

METHODS = ["face_blur", "low_res_16x12", "blackout", "none"]


@pytest.fixture(scope="module")
def outputs(tiny_decoded, tmp_path_factory):
    folder = tmp_path_factory.mktemp("anonymize")
    params = write_params(folder, {"anonymize": {"methods": METHODS}})
    results = {method: anonymize(params_path=params, frames=tiny_decoded / "data/decode", method=method,
                                 out=folder / method) for method in METHODS}
    return folder, params, results


def pairs(outputs, tiny_decoded, method):
    """(source row, protected row, raw clip, protected clip, annotations) per video."""
    folder, _, results = outputs
    decoded = tiny_decoded / "data/decode"
    source = {row["video_id"]: row for row in read_manifest(decoded / "manifest.parquet")}
    for row in results[method]:
        raw = np.load(resolve_path(source[row["video_id"]]["path"], decoded))
        protected = np.load(folder / method / row["path"])
        with np.load(resolve_path(row["annotations"], folder / method)) as annotations:  # rebased, still found
            yield source[row["video_id"]], row, raw, protected, dict(annotations)


def test_every_method_keeps_layout_and_manifest(outputs, tiny_decoded):
    for method in METHODS:
        rows = read_manifest(outputs[0] / method / "manifest.parquet")
        assert len(rows) == 12 and {row["anonymize_method"] for row in rows} == {method}
        for _, _, raw, protected, _ in pairs(outputs, tiny_decoded, method):
            assert protected.shape == raw.shape and protected.dtype == np.uint8


def test_blackout_fills_the_dilated_person_mask_and_nothing_else(outputs, tiny_decoded):
    folder = outputs[0]
    for _, row, raw, protected, annotations in pairs(outputs, tiny_decoded, "blackout"):
        covered = dilate(annotations["person_mask"], 2).astype(bool)
        with np.load(folder / "blackout" / row["mask"]) as stored:
            public = stored["public"]
        assert np.array_equal(public.astype(bool), covered) and row["public_fraction"] == round(float(covered.mean()), 6)
        assert (protected[covered] == 0).all() and np.array_equal(protected[~covered], raw[~covered])
        assert not (raw[annotations["person_mask"] > 0] == protected[annotations["person_mask"] > 0]).all()


def test_face_blur_changes_faces_only(outputs, tiny_decoded):
    changed_faces = 0
    for _, row, raw, protected, annotations in pairs(outputs, tiny_decoded, "face_blur"):
        inside = np.zeros(raw.shape[:3], bool)
        for t, boxes in enumerate(annotations["face_box"]):
            for x0, y0, x1, y1 in boxes:
                inside[t, max(0, int(np.floor(y0))):int(np.ceil(y1)), max(0, int(np.floor(x0))):int(np.ceil(x1))] = True
        assert np.array_equal(protected[~inside], raw[~inside]) and row["mask"] == "" and row["public_fraction"] == 0
        changed_faces += int((protected[inside] != raw[inside]).any())
    assert changed_faces >= 10  # of 12 videos: a face in view is blurred


def test_low_res_keeps_no_detail_beyond_its_size(outputs, tiny_decoded):
    assert low_res_size("low_res_16x12") == (16, 12)
    for _, _, raw, protected, _ in pairs(outputs, tiny_decoded, "low_res_16x12"):
        def detail(clip):  # energy of the Laplacian: fine detail
            return np.mean([cv2.Laplacian(cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), cv2.CV_64F).var() for frame in clip])
        assert detail(protected) < 0.2 * detail(raw)


def test_none_passes_clips_through(outputs, tiny_decoded):
    assert all(np.array_equal(raw, protected) for _, _, raw, protected, _ in pairs(outputs, tiny_decoded, "none"))


def test_same_input_same_bytes(outputs, tiny_decoded, tmp_path):
    folder, params, results = outputs
    again = anonymize(params_path=params, frames=tiny_decoded / "data/decode", method="blackout", out=tmp_path / "again")
    assert again == results["blackout"]
    assert (tmp_path / "again/manifest.parquet").read_bytes() == (folder / "blackout/manifest.parquet").read_bytes()
    first = sorted((folder / "blackout/masks").iterdir())[0]
    assert (tmp_path / "again/masks" / first.name).read_bytes() == first.read_bytes()


def test_bad_input_is_one_line(outputs, tiny_decoded, tmp_path):
    _, params, _ = outputs
    with pytest.raises(PrivharError, match=r"method 'low_res_32x24' is not one of anonymize.methods"):
        anonymize(params_path=params, frames=tiny_decoded / "data/decode", method="low_res_32x24", out=tmp_path / "x")
    # ground truth missing: a decoded copy whose manifest points nowhere
    import shutil

    from tasks.core.manifest import write_manifest

    copy = tmp_path / "decode"
    shutil.copytree(tiny_decoded / "data/decode", copy)
    rows = read_manifest(copy / "manifest.parquet")
    rows[3]["annotations"] = "annotations/gone.npz"
    write_manifest(rows, copy / "manifest.parquet")
    with pytest.raises(PrivharError, match=rf"video {rows[3]['video_id']} has no ground-truth annotations"):
        anonymize(params_path=params, frames=copy, method="face_blur", out=tmp_path / "y")
    assert not (tmp_path / "y").exists()
    bad = write_params(tmp_path, {"anonymize": {"face_blur_kernel": 20}})
    with pytest.raises(PrivharError, match="face_blur_kernel"):
        anonymize(params_path=bad, frames=tiny_decoded / "data/decode", method="face_blur", out=tmp_path / "z")
