"""The classifier trained on a Video-DPRP copy: its privacy claim, its registry family, protocols 1 and 2."""

import json
import math

import pytest

from flows.stage_commands import stage_call
from tasks.core.errors import PrivharError
from tasks.evaluate import evaluate
from tasks.privacy.dprp_calibration import noise_scales
from tasks.video_models.model_registry import newest_version
from tests.conftest import sections, write_params
from tests.test_dprp_stage import DPRP

dprp = stage_call("dprp")
train = stage_call("train")


@pytest.fixture(scope="module")
def dprp_trained(tiny_decoded, tmp_path_factory):
    folder = tmp_path_factory.mktemp("dprp-training")
    params = write_params(folder, {"dprp": DPRP})
    protected = folder / "data/dprp/eps2.0"
    dprp(params_path=params, frames=tiny_decoded / "data/decode", epsilon=2.0, out=protected)
    train(
        params_path=params,
        frames=tiny_decoded / "data/decode",
        out=folder / "data/train/baseline",
        report=folder / "reports/train",
    )
    final = train(
        params_path=params,
        frames=protected,
        out=folder / "data/train/dprp-eps2.0",
        report=folder / "reports/train",
        family="dprp",
        epochs=3,
    )
    return folder, params, final


def test_model_claims_the_data_guarantee(dprp_trained):
    version = newest_version("dprp-eps2.0")
    assert version.name == "privhar-dprp" and version.tags["method"] == "baseline"
    expected = noise_scales(
        epsilon=2.0,
        delta=1e-4,
        budget_split=0.8,
        k=48,
        d=32 * 40 * 3,
        calibration="paper",
        neighbour="frame",
    )
    # δ includes Theorem 3's χ² failure probability δ1/2; the unit is what the paper calibration covers, not a video
    # ε is what the paper's σ gives for its unit under the copy's public R (issue 30), not the paper's printed 2
    assert (
        float(version.tags["epsilon"]) == pytest.approx(expected.epsilon) and expected.epsilon > 2.0
    )
    assert float(version.tags["delta"]) == pytest.approx(1e-4 + 0.4e-4)
    assert (
        version.tags["accountant"] == expected.accountant
        and "Theorems 3-4 as printed" in expected.accountant
    )
    assert "255/sqrt(k)" in version.tags["unit"] and version.tags["relation"] == "replace-one"
    assert version.tags["randomness"].startswith("secret")
    # issue 82: the Video-DPRP versions carried no ε̂, though their stage audited the copy
    assert (
        0.0 <= float(version.tags["epsilon_audited"])
        and int(version.tags["audit_canaries"]) == 1000
    )


def test_epochs_override_and_report_are_keyed_by_model(dprp_trained):
    folder, _, final = dprp_trained
    assert final["epoch"] == 3
    assert json.loads((folder / "reports/train/dprp-eps2.0.json").read_text())["epoch"] == 3
    assert (folder / "reports/train/baseline.json").is_file()


def test_protocol_two_only_for_models_trained_on_protected_clips(dprp_trained, tiny_decoded):
    folder, params, _ = dprp_trained
    metrics = evaluate(
        **sections(params, base="base", params="evaluate"),
        frames=tiny_decoded / "data/decode",
        models=[folder / "data/train"],
        out=folder / "reports/evaluate",
    )
    seeds = {"seeds", "top1_mean"}  # one training seed: its mean, no interval
    assert set(metrics["baseline"]) == {"top1", "top5", "test_videos"} | seeds
    assert (
        set(metrics["dprp-eps2.0"])
        == {
            "top1",
            "top5",
            "top1_protocol2",
            "top5_protocol2",
            "test_videos",
            "top1_protocol2_mean",
        }
        | seeds
    )
    assert all(
        0.0 <= value <= 1.0
        for value in metrics["dprp-eps2.0"].values()
        if value != metrics["dprp-eps2.0"]["test_videos"]
    )
    predictions = (folder / "reports/evaluate/predictions.csv").read_text().splitlines()
    assert predictions[0] == "model,protocol,video_id,actual,predicted"
    assert (
        sum(line.startswith("dprp-eps2.0,2,") for line in predictions)
        == metrics["dprp-eps2.0"]["test_videos"]
    )
    assert (folder / "reports/evaluate/confusion/dprp-eps2.0.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_epochs_and_family_are_one_line(dprp_trained, tiny_decoded, tmp_path):
    _, params, _ = dprp_trained
    with pytest.raises(PrivharError, match=r"--epochs = -1 is invalid: expected an integer >= 0"):
        train(
            params_path=params,
            frames=tiny_decoded / "data/decode",
            out=tmp_path / "m",
            report=tmp_path,
            epochs=-1,
        )
    # 0 epochs keeps a model.weights checkpoint as it is (public.epochs: 0): without one it is refused
    with pytest.raises(PrivharError, match=r"--epochs = 0 keeps .*; model.weights is not set"):
        train(
            params_path=params,
            frames=tiny_decoded / "data/decode",
            out=tmp_path / "m",
            report=tmp_path,
            epochs=0,
        )
    with pytest.raises(PrivharError, match=r"--family = 'a b' is invalid"):
        train(
            params_path=params,
            frames=tiny_decoded / "data/decode",
            out=tmp_path / "m",
            report=tmp_path,
            family="a b",
        )


def test_tighter_guarantee_wins():
    from tasks.core.guarantee import NON_PRIVATE, PrivacyGuarantee, data_guarantee, strongest

    rows = [
        {"epsilon": 2.0, "delta": 1e-4, "accountant": "A"},
        {"epsilon": 5.0, "delta": 1e-5, "accountant": "A"},
    ]
    assert data_guarantee(rows) == PrivacyGuarantee(5.0, 1e-4, "A")
    assert data_guarantee([{"video_id": "x"}]) == NON_PRIVATE
    assert strongest(NON_PRIVATE, PrivacyGuarantee(5.0, 1e-4, "A")).epsilon == 5.0
    assert (
        strongest(PrivacyGuarantee(1.0, 1e-5, "B"), PrivacyGuarantee(5.0, 1e-4, "A")).accountant
        == "B"
    )
    assert math.isinf(strongest(NON_PRIVATE).epsilon)
