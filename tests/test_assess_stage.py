"""The assess stage end to end on the tiny dataset: every score in [0, 1], the raw reference, bad input in one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tasks.core.errors import PrivharError
from tests.conftest import sections, write_params


@pytest.fixture(scope="module")
def blackout(tiny_decoded: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from flows.stage_commands import stage_call

    anonymize = stage_call("anonymize")

    folder = tmp_path_factory.mktemp("assess")
    params = write_params(folder, {"anonymize": {"methods": ["blackout"]}})
    anonymize(
        params_path=params,
        frames=tiny_decoded / "data" / "decode",
        method="blackout",
        out=folder / "anonymize" / "blackout",
        speed_path=folder / "speed" / "anonymize-blackout.json",
    )
    return folder


def test_assess_scores_the_raw_reference_and_a_copy(tiny_decoded: Path, blackout: Path) -> None:
    from tasks.assess.copy_scores import ATTRIBUTE_SCORES
    from tasks.assess.stage import assess
    from tasks.core.scores import LEFT_COLUMNS as LEFT
    from tasks.core.scores import SIGNATURE_COLUMNS as SIGNATURE

    assess(
        **sections(blackout / "params.yaml", base="base", params="assess"),
        frames=tiny_decoded / "data" / "decode",
        copies=[blackout / "anonymize"],
        speeds=blackout / "speed",
        out=blackout / "out",
    )
    signature = json.loads((blackout / "out" / "signature.json").read_text())
    assert set(signature) == {"raw", "anonymize-blackout"}
    for scores in signature.values():
        assert set(scores) == set(ATTRIBUTE_SCORES + SIGNATURE + LEFT)
        assert all(
            0.0 <= scores[key] <= 1.0 for key in (*ATTRIBUTE_SCORES, *SIGNATURE, "residual_pixels")
        ), scores
        assert (
            scores["residual_people"] >= 0
            and scores["residual_faces"] >= 0
            and scores["quarantined"] == 0
        )
    raw, black = signature["raw"], signature["anonymize-blackout"]
    assert (
        raw["coverage"] is None and 0.95 <= black["coverage"] <= 1.0
    )  # the anonymize check, from the copy's manifest
    assert (
        raw["residual_pixels"] == 1.0 and black["residual_pixels"] < 0.5
    )  # the ensemble re-run finds the people gone
    assert raw["e_sim_ssim"] == 1.0 and raw["e_sim_mse"] == 1.0 and raw["e_speed"] == 1.0
    assert black["e_sim_ssim"] < 1.0 and black["e_sim_mse"] < 1.0
    assert (
        raw["cmap_adaptive"] == raw["cmap_raw_attacker"]
    )  # the raw copy's adaptive attacker is the raw one
    speed = json.loads((blackout / "speed" / "anonymize-blackout.json").read_text())[
        "frames_per_second"
    ]
    with (blackout / "out" / "signature.csv").open() as handle:
        rows = {row["copy"]: row for row in csv.DictReader(handle)}
    assert float(rows["anonymize-blackout"]["frames_per_second"]) == pytest.approx(speed, rel=1e-3)


def test_a_missing_speed_file_is_one_line_naming_it(
    tiny_decoded: Path, blackout: Path, tmp_path: Path
) -> None:
    from tasks.assess.stage import assess

    (tmp_path / "speed").mkdir()
    with pytest.raises(
        PrivharError, match=r"anonymize-blackout\.json: not found; the stage that made this copy"
    ):
        assess(
            **sections(blackout / "params.yaml", base="base", params="assess"),
            frames=tiny_decoded / "data" / "decode",
            copies=[blackout / "anonymize"],
            speeds=tmp_path / "speed",
            out=tmp_path / "out",
        )
    assert not (tmp_path / "out").exists()


def test_footage_without_annotations_gets_what_is_left_and_quarantine_counts(
    tiny_decoded: Path, blackout: Path, tmp_path: Path
) -> None:
    """Real footage: no attributes, no face / body boxes — the residual detections are measured, the rest is null."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tasks.assess.copy_scores import ATTRIBUTE_SCORES, TRUTH_SCORES
    from tasks.assess.stage import assess
    from tasks.core.manifest import read_manifest, write_manifest

    frames = tmp_path / "decode"
    shutil.copytree(tiny_decoded / "data" / "decode", frames)
    rows = read_manifest(frames / "manifest.parquet")
    write_manifest(
        [
            {
                key: value
                for key, value in row.items()
                if not key.startswith("attr_") and key != "annotations"
            }
            for row in rows
        ],
        frames / "manifest.parquet",
    )
    copy = tmp_path / "copies" / "anonymize" / "blackout"
    shutil.copytree(blackout / "anonymize" / "blackout", copy)
    released = read_manifest(copy / "manifest.parquet")
    held = next(row for row in released if row["split"] == "test")
    write_manifest([row for row in released if row is not held], copy / "manifest.parquet")
    schema = pa.schema([("video_id", pa.string())])
    pq.write_table(
        pa.table({"video_id": [held["video_id"]]}, schema=schema), copy / "quarantine.parquet"
    )
    assess(
        **sections(blackout / "params.yaml", base="base", params="assess"),
        frames=frames,
        copies=[copy.parent],
        speeds=blackout / "speed",
        out=tmp_path / "out",
    )
    signature = json.loads((tmp_path / "out" / "signature.json").read_text())
    for scores in signature.values():
        assert all(scores[key] is None for key in (*ATTRIBUTE_SCORES, *TRUTH_SCORES))
        assert 0.0 <= scores["e_sim_ssim"] <= 1.0 and scores["residual_people"] >= 0
    assert signature["anonymize-blackout"]["quarantined"] == 1
    pq.write_table(pa.table({"video_id": []}, schema=schema), copy / "quarantine.parquet")
    with pytest.raises(
        PrivharError, match=r"1 videos of the raw manifest are missing and not quarantined"
    ):
        assess(
            **sections(blackout / "params.yaml", base="base", params="assess"),
            frames=frames,
            copies=[copy.parent],
            speeds=blackout / "speed",
            out=tmp_path / "again",
        )
