"""Train the baseline on tiny data, register it, evaluate it: real files, real MLflow."""

import csv
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from flows.stage_commands import stage_call
from tasks.core.errors import PrivharError
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.seeds import seed_folder
from tasks.evaluate import confusion_matrix, evaluate, top_k_accuracy
from tasks.video_models.checkpoints import load_checkpoint
from tasks.video_models.clips import labels_of, load_clips, predict, split_rows
from tasks.video_models.model_registry import checkpoint_digest, newest_version, record_scores
from tests.conftest import sections, write_params

train = stage_call("train")


@pytest.fixture(scope="module")
def trained(tiny_decoded):
    folder = tiny_decoded
    final = train(
        params_path=folder / "params.yaml",
        frames=folder / "data/decode",
        out=folder / "data/train/baseline",
        report=folder / "reports/train",
    )
    return folder, final


def test_training_writes_model_report_and_history(trained):
    folder, final = trained
    model, config = load_checkpoint(str(folder / "data/train/baseline/model.pt"))
    assert config["classes"] == ["walk", "wave", "squat"]
    assert model(torch.zeros(1, 3, 4, 32, 40)).shape == (1, 3)
    report = json.loads((folder / "reports/train/baseline.json").read_text())
    assert report["train_videos"] == 9 and report["trainable_parameters"] > 0
    history = list(csv.DictReader((folder / "reports/train/baseline_history.csv").open()))
    assert [int(row["epoch"]) for row in history] == [1, 2]
    assert all(
        0.0 <= float(row["test_accuracy"]) <= 1.0 for row in history
    )  # the learning curve's held-out line


def test_training_is_deterministic(trained, tmp_path):
    folder, final = trained
    again = train(
        params_path=folder / "params.yaml",
        frames=folder / "data/decode",
        out=tmp_path / "model",
        report=tmp_path / "report",
    )
    assert again["loss"] == final["loss"]
    first = torch.load(folder / "data/train/baseline/model.pt", weights_only=True)["state_dict"]
    second = torch.load(tmp_path / "model/model.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(first[name], second[name]) for name in first)


def test_model_is_registered_with_its_privacy_claim(trained):
    version = newest_version("baseline")
    assert version.tags["method"] == "baseline"
    assert (version.tags["epsilon"], version.tags["delta"]) == ("inf", "0.0")
    assert version.tags["accountant"].startswith("none")
    assert version.tags["dataset"].startswith(str(trained[0] / "data/decode") + "@")
    from mlflow import MlflowClient

    inputs = (
        MlflowClient().get_run(version.run_id).inputs.dataset_inputs
    )  # mlflow.log_input: what the model saw
    seen = {
        (entry.dataset.name, tag.value)
        for entry in inputs
        for tag in entry.tags
        if tag.key == "mlflow.data.context"
    }
    assert ("decode/train", "training") in seen
    assert version.tags["dataset"].endswith(
        "@" + next(e.dataset.digest for e in inputs if e.dataset.name == "decode/train")
    )


def test_champion_loads_in_a_fresh_interpreter(trained):
    """models:/privhar-baseline@champion classifies a clip without importing privhar by hand first."""
    record_scores(
        "baseline",
        {"top1": 0.5, "top5": 1.0, "test_videos": 3},
        {"git_commit": "test"},
        math.inf,
        checkpoint_digest(trained[0] / "data/train/baseline/model.pt"),
    )
    code = (
        "import mlflow, torch; model = mlflow.pytorch.load_model('models:/privhar-baseline@champion'); "
        "print(tuple(model(torch.zeros(1, 3, 4, 32, 40)).shape))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "(1, 3)"


def test_registered_model_has_a_signature_and_carries_its_code(trained):
    """Issue 20: the registry shows the clip schema; pip need not find privhar (its code travels in the model)."""
    import mlflow

    info = mlflow.models.get_model_info(
        f"models:/privhar-baseline/{newest_version('baseline').version}"
    )
    (clips,) = info.signature.inputs.inputs
    assert (clips.shape, str(clips.type)) == ((-1, 3, -1, -1, -1), "float32")
    assert info.signature.outputs.inputs[0].shape == (-1, 3)
    folder = Path(mlflow.artifacts.download_artifacts(info.model_uri))
    assert (folder / "code/tasks/video_models/models.py").is_file()
    requirements = (folder / "requirements.txt").read_text().split()
    assert not any(line.startswith("privhar") for line in requirements) and any(
        line.startswith("torch==") for line in requirements
    )
    prediction = mlflow.pyfunc.load_model(info.model_uri).predict(
        np.zeros((2, 3, 6, 48, 64), dtype=np.float32)
    )  # schema-checked
    assert np.asarray(prediction).shape == (2, 3)


def test_evaluate_writes_metrics_keyed_by_method(trained):
    folder, _ = trained
    metrics = evaluate(
        **sections(folder / "params.yaml", base="base", params="evaluate"),
        frames=folder / "data/decode",
        models=[folder / "data/train"],
        out=folder / "reports/evaluate",
    )
    written = json.loads((folder / "reports/evaluate/metrics.json").read_text())
    assert written == metrics
    assert set(written["baseline"]) == {
        "top1",
        "top5",
        "test_videos",
        "seeds",
        "top1_mean",
    }  # one seed: no interval
    assert (
        written["baseline"]["seeds"] == 1
        and written["baseline"]["top1_mean"] == written["baseline"]["top1"]
    )
    assert (
        0.0 <= written["baseline"]["top1"] <= 1.0 and written["baseline"]["top5"] == 1.0
    )  # 3 classes
    assert (folder / "reports/evaluate/confusion/baseline.png").read_bytes()[:4] == b"\x89PNG"
    rows = list(csv.DictReader((folder / "reports/evaluate/predictions.csv").open()))
    assert len(rows) == 3


def test_evaluate_without_models_is_one_line(tiny_decoded, tmp_path):
    with pytest.raises(PrivharError, match="no trained models"):
        evaluate(
            **sections(tiny_decoded / "params.yaml", base="base", params="evaluate"),
            frames=tiny_decoded / "data/decode",
            models=[tmp_path],
            out=tmp_path / "out",
        )


def test_top_k_and_confusion():
    """scikit-learn's scores against the oracle by hand: the label among the k highest, counts per pair."""
    logits = torch.tensor([[3.0, 2.0, 1.0], [1.0, 3.0, 2.0], [1.0, 2.0, 3.0], [3.0, 1.0, 2.0]])
    labels = torch.tensor([0, 2, 2, 1])
    for k in (1, 2, 3, 5):
        oracle = (
            (logits.topk(min(k, 3), dim=1).indices == labels[:, None])
            .any(dim=1)
            .float()
            .mean()
            .item()
        )
        assert top_k_accuracy(logits, labels, k) == oracle
    assert top_k_accuracy(logits, labels, 1) == 0.5 and top_k_accuracy(logits, labels, 2) == 0.75
    binary = torch.tensor(
        [[0.2, 0.8], [0.9, 0.1], [0.3, 0.7]]
    )  # two actions: scikit-learn's binary form
    assert top_k_accuracy(binary, torch.tensor([1, 1, 0]), 1) == pytest.approx(1 / 3)
    matrix = confusion_matrix(
        labels.numpy(), logits.argmax(1).numpy(), 4
    )  # a class no sample has: a row of zeros
    assert matrix.tolist() == [[1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0]]


def test_fine_tuning_takes_the_public_backbone_and_a_fresh_classifier(trained, tmp_path):
    from tasks.video_models.checkpoints import build_from_config, transfer_weights
    from tasks.video_models.models import CLASSIFIER
    from tests.conftest import write_params

    folder, _ = trained
    checkpoint = folder / "data/train/baseline/model.pt"
    public = torch.load(checkpoint, weights_only=True)
    model = build_from_config(public["config"])
    fresh = {name: value.clone() for name, value in model.state_dict().items()}
    transfer_weights(model, public["config"], checkpoint)
    for name, value in model.state_dict().items():
        expected = fresh[name] if name.startswith(CLASSIFIER + ".") else public["state_dict"][name]
        assert torch.equal(value, expected), name
    # --epochs replaces train.epochs before it is checked (pretrain does not depend on train.epochs)
    params = write_params(tmp_path, {"train": {"epochs": 0}})
    train(
        params_path=params,
        frames=folder / "data/decode",
        out=tmp_path / "tuned",
        report=tmp_path / "report",
        epochs=1,
        init=folder / "data/train/baseline",
    )
    assert torch.load(tmp_path / "tuned/model.pt", weights_only=True)["config"]["init"] == str(
        folder / "data/train/baseline"
    )
    (tmp_path / "wide").mkdir()
    with pytest.raises(PrivharError, match=r"model.pt: its width 4 differs from this model's 8"):
        train(
            params_path=write_params(tmp_path / "wide", {"train": {"width": 8}}),
            frames=folder / "data/decode",
            out=tmp_path / "wide/out",
            report=tmp_path / "wide/report",
            init=folder / "data/train/baseline",
        )


def test_a_fine_tunings_seed_0_does_not_start_from_its_public_models_own_draws(trained):
    """Seed 0 of a fine-tuning once drew the classifier its public model started from (both seeded by method and
    seed alone); the make run of 2026-11-27 had it above every other seed of both Video-DPRP copies."""
    from tasks.core.params_files import load_train
    from tasks.train.methods import TrainingData
    from tasks.train.seeds import train_seed
    from tasks.video_models.models import CLASSIFIER

    folder, _ = trained
    public = folder / "data/train/baseline"
    config = torch.load(public / "model.pt", weights_only=True)["config"]
    params = load_train(folder / "params.yaml")
    data = TrainingData(torch.zeros(1, 3, 4, 32, 40, dtype=torch.uint8), torch.zeros(1), [])

    def starting_classifier(init: Path | None) -> torch.Tensor:
        model, _, _ = train_seed(
            params, 2026, 0, data, init, config, "k", folder, None, as_loaded=True
        )
        return model.state_dict()[CLASSIFIER + ".weight"]

    pretraining, fine_tuning = starting_classifier(None), starting_classifier(public)
    assert not torch.equal(pretraining, fine_tuning)
    assert torch.equal(fine_tuning, starting_classifier(public))  # copies of one seed: one draw


def test_seeds_train_fresh_models_and_evaluate_reports_their_interval(trained, tmp_path):
    """Issue 19: every trained row over report.seeds seeds; seed 0 is the model one seed gives, the others differ."""
    folder, final = trained
    models = tmp_path / "models"
    again = train(
        params_path=folder / "params.yaml",
        frames=folder / "data/decode",
        out=models / "baseline",
        report=tmp_path / "report",
        seeds=3,
    )
    assert again["loss"] == final["loss"] and again["seeds"] == 3
    weights = [
        torch.load(path, weights_only=True)["state_dict"]
        for path in (
            models / "baseline/model.pt",
            models / "baseline/seed1/model.pt",
            models / "baseline/seed2/model.pt",
        )
    ]
    single = torch.load(folder / "data/train/baseline/model.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(single[name], weights[0][name]) for name in single)
    assert not all(torch.equal(weights[0][name], weights[1][name]) for name in single)
    metrics = evaluate(
        **sections(folder / "params.yaml", base="base", params="evaluate"),
        frames=folder / "data/decode",
        models=[models],
        out=tmp_path / "evaluate",
    )
    assert set(metrics) == {"baseline", "baseline-seed1", "baseline-seed2"}
    values = [metrics[key]["top1"] for key in ("baseline", "baseline-seed1", "baseline-seed2")]
    assert metrics["baseline"]["seeds"] == 3
    assert metrics["baseline"]["top1_mean"] == pytest.approx(statistics.fmean(values), abs=1e-4)
    if statistics.stdev(values) > 0:  # the half-width of scipy's t interval around the mean
        low, high = stats.t.interval(
            0.95, 2, loc=statistics.fmean(values), scale=statistics.stdev(values) / math.sqrt(3)
        )
        assert metrics["baseline"]["top1_ci95"] == pytest.approx((high - low) / 2, abs=1e-4)
    with pytest.raises(PrivharError, match="--seeds = 0"):
        train(
            params_path=folder / "params.yaml",
            frames=folder / "data/decode",
            out=tmp_path / "none",
            report=tmp_path / "r",
            seeds=0,
        )
    # report.seeds_per_family: a family's seeds instead of the report.seeds the pipeline passes (the Video-DPRP copies)
    (tmp_path / "family").mkdir()
    params = write_params(tmp_path / "family", {"report": {"seeds_per_family": {"dprp": 2}}})
    assert (
        train(
            params_path=params,
            frames=folder / "data/decode",
            out=models / "dprp-copy",
            report=tmp_path / "r",
            family="dprp",
            seeds=1,
        )["seeds"]
        == 2
    )
    assert (models / "dprp-copy/seed1/model.pt").is_file()
    assert (
        train(
            params_path=params,
            frames=folder / "data/decode",
            out=models / "other",
            report=tmp_path / "r",
            family="anonymize",
            seeds=1,
        )["seeds"]
        == 1
    )


def test_a_family_by_the_seed_rule_trains_what_its_pilot_spread_asks_and_its_own_epochs(
    trained, tmp_path
):
    """report.seed_rule (Stein): a pilot of 2 seeds scored on the raw test split, then stein_seeds of their Top-1, at
    most the family's seeds; train.epochs_per_family sets the family's epochs. Checked against the saved pilot models
    scored here and the rule's formula written out."""
    folder, _ = trained
    rule = {"families": ["dprp"], "pilot": 2, "half_width": 0.02}
    params = write_params(
        tmp_path,
        {
            "report": {"seeds_per_family": {"dprp": 5}, "seed_rule": rule},
            "train": {"epochs_per_family": {"dprp": 1}},
        },
    )
    out = tmp_path / "dprp-copy"
    arguments = {"frames": folder / "data/decode", "report": tmp_path / "r", "family": "dprp"}
    with pytest.raises(PrivharError, match="--score-on"):
        train(params_path=params, out=out, **arguments)
    final = train(params_path=params, out=out, score_on=folder / "data/decode", **arguments)
    test_rows = split_rows(read_manifest(folder / "data/decode" / MANIFEST_NAME), "test")
    clips = load_clips(test_rows, folder / "data/decode", (32, 40))
    pilot = [
        float(
            (
                predict(load_checkpoint(seed_folder(out, seed) / "model.pt")[0], clips, 8).argmax(1)
                == labels_of(test_rows)
            )
            .float()
            .mean()
        )
        for seed in (0, 1)
    ]
    spread = statistics.stdev(pilot)
    needed = math.ceil((stats.t.ppf(0.975, 1) * spread / 0.02) ** 2)
    assert final["seeds"] == min(5, max(2, needed)) and final["epoch"] == 1
    assert final["pilot_top1_sd"] == pytest.approx(spread, abs=1e-6)
    assert [seed_folder(out, seed).is_dir() for seed in range(6)] == [
        seed < final["seeds"] for seed in range(6)
    ]


def test_models_differing_only_in_the_classifier_share_one_backbone_pass_with_the_same_logits(
    trained,
):
    """evaluate runs the frozen part once for every head-only seed: the logits are the whole model's, and a model whose
    backbone differs by one weight gets its own pass."""
    import copy

    from tasks.core.manifest import read_manifest
    from tasks.evaluate import Logits
    from tasks.video_models.clips import load_clips, predict
    from tasks.video_models.head_features import head_of

    folder, _ = trained
    model, config = load_checkpoint(str(folder / "data/train/baseline/model.pt"))
    size = tuple(config["input_size"])
    frames = folder / "data/decode"
    clips = load_clips(read_manifest(frames / "manifest.parquet", split="test"), frames, size)
    other_head, other_backbone = copy.deepcopy(model), copy.deepcopy(model)
    with torch.no_grad():
        head_of(other_head).weight.mul_(-2.0)
        next(other_backbone.blocks[0].parameters()).add_(0.5)
    logits = Logits(2, torch.device("cpu"))
    for candidate in (model, other_head, other_backbone):
        torch.testing.assert_close(
            logits(candidate, clips, frames, size),
            predict(candidate.eval(), clips, 2),
            rtol=1e-4,
            atol=1e-4,
        )
    assert len(logits._features) == 2
