"""The dprp stage on tiny decoded clips: protected copies of both splits and a privacy ledger."""

import io

import numpy as np
import pyarrow.parquet as pq
import pytest

from flows.stage_commands import stage_call
from tasks.core.dp_randomness import NOT_PRIVATE, SECURE
from tasks.core.errors import PrivharError
from tasks.core.manifest import read_manifest
from tasks.privacy.dprp_calibration import noise_scales
from tasks.video_data.subjects import named_people
from tests.conftest import write_params

dprp = stage_call("dprp")

DPRP = {
    "epsilons": [2.0, 8.0],
    "delta": 1.0e-4,
    "k": [4, 4, 3],
    "budget_split": 0.8,
    "rank": 1.0,
    "calibration": "paper",
    "neighbour": "frame",
    "projection": "shared",
    "block_rows": 512,
}


@pytest.mark.parametrize("projection", ["shared", "per_video"])
@pytest.mark.parametrize("randomness", ["secure", "seeded"])
def test_stage_protects_every_clip_and_records_its_privacy(
    tiny_decoded, tmp_path, monkeypatch, projection, randomness
):
    monkeypatch.chdir(tiny_decoded)
    params = write_params(
        tmp_path,
        {"dprp": {**DPRP, "projection": projection}, "privacy": {"randomness": randomness}},
    )
    rows = dprp(
        params_path=params,
        frames=tiny_decoded / "data/decode",
        epsilon=8.0,
        out=tmp_path / "out",
        report=tmp_path / "report",
    )
    assert (tmp_path / "report/eps8.0.png").read_bytes()[:4] == b"\x89PNG"
    source = read_manifest(tiny_decoded / "data/decode/manifest.parquet")
    assert [row["video_id"] for row in rows] == [row["video_id"] for row in source]
    assert {row["split"] for row in rows} == {"train", "test"}
    secret = projection == "per_video" and randomness == "secure"
    expected = noise_scales(
        epsilon=8.0,
        delta=1e-4,
        budget_split=0.8,
        k=48,
        d=32 * 40 * 3,
        calibration="paper",
        neighbour="frame",
        secret_projection=secret,
    )
    ledger = pq.read_table(tmp_path / "out/ledger.parquet").to_pylist()
    assert len(ledger) == len(source) and all(
        entry["sigma1"] == expected.sigma1 for entry in ledger
    )
    assert {row["accountant"] for row in rows} == {
        expected.accountant
    }  # what a model trained on them claims
    assert {row["randomness"] for row in ledger} == {
        SECURE if randomness == "secure" else NOT_PRIVATE
    }
    assert all(
        entry["delta"] == pytest.approx(1e-4 + 0.8e-4 / 2) and "255/sqrt(k)" in entry["unit"]
        for entry in ledger
    )
    # the headline ε holds for that unit with the R used: far above the paper's 8 for a public R, below it for a secret one
    assert all(
        entry["epsilon"] == expected.epsilon and entry["paper_epsilon"] == 8.0 for entry in ledger
    )
    assert (expected.epsilon < 8.0) if secret else (expected.epsilon > 8.0)
    # issue 64: the copy's one-run audit beside its ε, in every ledger row (per-video R: a fresh one per audit video)
    assert {entry["audit_canaries"] for entry in ledger} == {1000}
    assert all(0 <= entry["epsilon_audited"] <= entry["epsilon"] for entry in ledger)
    # the people in each video travel with the ledger: the report's person ε groups a person's videos (issue 30)
    assert [entry["identities"] for entry in ledger] == [named_people(row) for row in source]
    from tasks.report.ledger import dprp_releases

    release = next(item for item in dprp_releases(tmp_path) if item.name == "dprp-out")
    assert set(release.persons) == {person for row in source for person in named_people(row)}
    clip = np.load(tmp_path / "out" / rows[0]["path"])
    original = np.load(tiny_decoded / "data/decode" / source[0]["path"])
    assert (
        clip.shape == original.shape
        and clip.dtype == np.uint8
        and not np.array_equal(clip, original)
    )
    again = dprp(
        params_path=params, frames=tiny_decoded / "data/decode", epsilon=8.0, out=tmp_path / "again"
    )
    # seeded: the same bytes (a reproduced table, not private); secure: fresh noise every run
    assert (np.load(tmp_path / "again" / again[0]["path"]).tobytes() == clip.tobytes()) == (
        randomness == "seeded"
    )


def test_secret_noise_cannot_be_regenerated_from_the_repository(
    tiny_decoded, tmp_path, monkeypatch
):
    """Issue 17: with the seed in params.yaml an attacker regenerates M (and a per-video R) in seeded mode, so P̃ − M = XR;
    in secure mode the seeds the mechanism used are fresh OS entropy, never derived from params, and differ per run."""
    import tasks.dprp.stage as stage
    from tasks.core.item_randomness import derive_seed

    monkeypatch.chdir(tiny_decoded)
    used: list[tuple[int, int]] = []
    original = stage.protect_video

    def spy(frames, projection, **kwargs):
        used.append((projection.seed, kwargs["noise_seed"]))
        return original(frames, projection, **kwargs)

    monkeypatch.setattr(stage, "protect_video", spy)
    video = read_manifest(tiny_decoded / "data/decode/manifest.parquet")[0]["video_id"]
    replayed = (derive_seed(2026, "dprp-R", video), derive_seed(2026, "dprp-noise", 8.0, video))
    for randomness in ("seeded", "secure"):
        (tmp_path / randomness).mkdir()
        params = write_params(
            tmp_path / randomness,
            {"dprp": {**DPRP, "projection": "per_video"}, "privacy": {"randomness": randomness}},
        )
        runs = []
        for attempt in range(2):
            used.clear()
            dprp(
                params_path=params,
                frames=tiny_decoded / "data/decode",
                epsilon=8.0,
                out=tmp_path / randomness / f"{attempt}",
            )
            runs.append(used[0])
        if randomness == "seeded":
            assert runs == [replayed, replayed]
        else:
            assert (
                runs[0] != runs[1]
                and replayed[0] not in {runs[0][0], runs[1][0]}
                and replayed[1] not in {runs[0][1], runs[1][1]}
            )


def test_an_epsilon_not_configured_is_one_line(tiny_decoded, tmp_path):
    params = write_params(tmp_path, {"dprp": DPRP})
    with pytest.raises(
        PrivharError, match=r"epsilon 5.0 is not one of dprp.epsilons = \[2.0, 8.0\]"
    ):
        dprp(
            params_path=params,
            frames=tiny_decoded / "data/decode",
            epsilon=5.0,
            out=tmp_path / "out",
        )


def test_preview_shows_raw_frames_only_for_the_synthetic_dataset(tiny_decoded, tmp_path):
    from PIL import Image

    from tasks.dprp.preview import preview_png

    folder = tiny_decoded / "data/decode"
    rows = read_manifest(folder / "manifest.parquet")
    sizes = [
        Image.open(io.BytesIO(preview_png(rows, folder, rows, folder, "t", show_raw=show))).size
        for show in (True, False)
    ]
    assert sizes[0][0] > 1.5 * sizes[1][0]  # two columns, then one


def test_a_copy_that_fails_after_its_work_leaves_no_side_report(
    tiny_decoded, tmp_path, monkeypatch
):
    """A failed dprp stage left its measured frames/s at the tracked reports/speed path (issue 82): the side reports
    are written once the copy is in place, never before."""
    import tasks.dprp.stage as stage

    def broken(*args, **kwargs):
        raise PrivharError("the audit broke")

    monkeypatch.chdir(tiny_decoded)
    monkeypatch.setattr(stage, "_audit", broken)
    with pytest.raises(PrivharError, match="the audit broke"):
        dprp(
            params_path=write_params(tmp_path, {"dprp": DPRP}),
            frames=tiny_decoded / "data/decode",
            epsilon=8.0,
            out=tmp_path / "out",
            report=tmp_path / "report",
            speed_path=tmp_path / "speed.json",
        )
    assert not (tmp_path / "speed.json").exists() and not (tmp_path / "out").exists()
    assert not list(tmp_path.glob("report/*"))
