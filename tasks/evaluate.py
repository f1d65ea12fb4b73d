"""Stage ``evaluate``: action recognition on the test split, per trained model.

    <models>/…/<key>/model.pt ─┐   (data/train, data/private; seeds: <key>/seed<i>/model.pt)
    data/decode (test split) ──┼─▶ protocol 1 ─▶ Top-1, Top-5 ─▶ out/metrics.json  {key: {top1, top5, ...}}
    <its training folder> ─────┴─▶ protocol 2 ─▶ top1_protocol2 ├─▶ out/predictions.csv (every model, both protocols)
                                                                ├─▶ out/predictions/<key>.csv (DVC confusion plots)
                                                                └─▶ out/confusion/<key>.png

The protocols are paper 000's (§4.3): protocol 1 tests on the raw test videos whatever the
model learnt from (``top1``: the same test set for every model, so the registry's champion
compares like with like); protocol 2 tests on the test split of the protected copy the model
was trained on (``top1_protocol2``), for models trained on protected clips only.
``metrics.json`` is keyed by model, then metric, so ``dvc metrics show`` lists them side by side;
each training seed is a model of its own (``baseline-seed1``), and each registered model also carries
the mean and 95 % interval of its Top-1 over its seeds (``top1_mean``, ``top1_ci95``, ``seeds``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import polars as pl
import torch
from sklearn import metrics

from tasks.core import stage_options as arg
from tasks.core.errors import PrivharError
from tasks.core.figures import plt, png_bytes
from tasks.core.intervals import interval
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.params import BaseParams, EvaluateParams
from tasks.core.seeds import base_key, checkpoint_key, seed_scores
from tasks.core.storage import atomic_directory, atomic_write_bytes
from tasks.core.tables import csv_bytes, frame_of
from tasks.core.tracking import StageRun, stage_run, stage_work
from tasks.video_models.checkpoints import load_checkpoint
from tasks.video_models.clips import labels_of, load_clips, normalise, predict
from tasks.video_models.device import resolve_device
from tasks.video_models.head_features import clip_features, frozen_digest, head_of, splits_at_head
from tasks.video_models.model_registry import checkpoint_digest

LOG = logging.getLogger(__name__)

SCORED_PATH = Path(
    "reports/evaluate/scored.json"
)  # {model key: checkpoint SHA-256}, read by the registry scoring


def top_k_accuracy(logits: torch.Tensor, labels: torch.Tensor, k: int) -> float:
    """Share of samples whose label is among the k highest scores (scikit-learn's ``top_k_accuracy_score``).

    >>> top_k_accuracy(torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.15, 0.05]]), torch.tensor([1, 1]), 1)
    0.5
    >>> top_k_accuracy(torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.15, 0.05]]), torch.tensor([1, 1]), 2)
    1.0
    """
    classes = logits.shape[1]
    scores = logits.numpy()
    # scikit-learn takes a binary problem's scores as one column: the second class's margin
    if classes == 2:
        scores = scores[:, 1] - scores[:, 0]
    return float(
        metrics.top_k_accuracy_score(
            labels.numpy(), scores, k=min(k, classes), labels=list(range(classes))
        )
    )


def confusion_matrix(actual: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """Counts of (actual, predicted) class pairs, every class a row even if absent (scikit-learn's)."""
    return metrics.confusion_matrix(actual, predicted, labels=list(range(classes)))


def plot_confusion(matrix: np.ndarray, names: list[str], title: str) -> bytes:
    """A row-normalised confusion matrix with counts, as PNG bytes."""
    shares = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    figure, axes = plt.subplots(figsize=(1.0 + 0.55 * len(names), 0.8 + 0.5 * len(names)))
    axes.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    axes.set_xticks(range(len(names)), names, rotation=45, ha="right")
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel("predicted")
    axes.set_ylabel("actual")
    axes.set_title(title)
    for (row, column), count in np.ndenumerate(matrix):
        if count:
            axes.text(
                column,
                row,
                str(count),
                ha="center",
                va="center",
                color="white" if shares[row, column] > 0.5 else "black",
                fontsize=7,
            )
    figure.tight_layout()
    return png_bytes(figure, dpi=110)


class Logits:
    """Each model's logits on a test set; models whose only difference is the classifier (a private method's head-only
    seeds and ε: hundreds of models on one frozen public backbone) share one pass of the rest (measured on the embedded
    data: 0.11 s a model on 100 test clips against ~1 ms for the classifier alone), which is what makes many seeds cheap."""

    def __init__(self, batch_size: int, device: torch.device) -> None:
        self.batch_size, self.device = batch_size, device
        self._features: dict[tuple[str, Path, tuple[int, int]], torch.Tensor] = {}

    @torch.no_grad()
    def __call__(
        self, model: torch.nn.Module, clips: torch.Tensor, folder: Path, size: tuple[int, int]
    ) -> torch.Tensor:
        if not splits_at_head(model):
            return predict(model, clips, self.batch_size, self.device)
        key = (frozen_digest(model), folder, size)
        if key not in self._features:
            self._features[key] = clip_features(model, clips, self.batch_size, self.device)
        head = head_of(model).cpu()
        return head(self._features[key])


class TestSets:
    """Test splits loaded once per (folder, input size): several models share them."""

    def __init__(self) -> None:
        self._rows: dict[Path, list[dict[str, Any]]] = {}
        self._clips: dict[tuple[Path, tuple[int, int]], torch.Tensor] = {}

    def rows(self, folder: Path) -> list[dict[str, Any]]:
        if folder not in self._rows:
            rows = read_manifest(folder / MANIFEST_NAME, split="test")
            if not rows:
                raise PrivharError(f"{folder / MANIFEST_NAME}: no videos in the test split")
            self._rows[folder] = rows
        return self._rows[folder]

    def clips(self, folder: Path, size: tuple[int, int]) -> torch.Tensor:
        """The test clips, normalised once: every model scored on them would otherwise normalise them again (13 s of
        the embedded run's evaluate)."""
        if (folder, size) not in self._clips:
            self._clips[(folder, size)] = normalise(load_clips(self.rows(folder), folder, size))
        return self._clips[(folder, size)]


def protected_folder(config: dict[str, Any], raw: Path) -> Path | None:
    """The protected copy a model learnt from (its protocol-2 test set), or None if it learnt from raw clips."""
    trained_on = Path(config.get("frames", raw))
    if trained_on.resolve() == raw.resolve():
        return None
    if not (trained_on / MANIFEST_NAME).is_file():
        raise PrivharError(
            f"{trained_on / MANIFEST_NAME}: not found; the model {config.get('model')} was trained on it "
            f"(protocol 2 tests on its test split)"
        )
    return trained_on


def find_checkpoints(folders: Sequence[Path]) -> list[Path]:
    """Every ``<key>/model.pt`` under ``folders`` (``data/train/baseline``, ``data/private/dp_sgd/dp_sgd-eps2.0``), keys
    unique; a training seed's ``<key>/seed<i>/model.pt`` is the key ``<key>-seed<i>`` (:mod:`tasks.core.seeds`)."""
    checkpoints: dict[str, Path] = {}
    for folder in folders:
        found = sorted(folder.rglob("model.pt"))
        if not found:
            raise PrivharError(
                f"{folder}: no trained models (<key>/model.pt); run the stage that trains them first"
            )
        for checkpoint in found:
            key = checkpoint_key(checkpoint)
            if key in checkpoints:
                raise PrivharError(
                    f"{checkpoint}: model key {key!r} is also {checkpoints[key]}; keys must be unique"
                )
            checkpoints[key] = checkpoint
    return [checkpoints[key] for key in sorted(checkpoints)]


def add_seed_summaries(metrics: dict[str, dict[str, float]]) -> None:
    """Beside each registered model's own scores: ``seeds``, and ``<score>_mean`` / ``<score>_ci95`` (the half-width of
    the 95 % Student-t interval) over its training seeds, for Top-1 under both protocols."""
    for key in [key for key in metrics if base_key(key)[1] == 0]:
        for score in ("top1", "top1_protocol2"):
            values = seed_scores(metrics, key, score)
            if not values:
                continue
            spread = interval(values)
            metrics[key]["seeds"] = spread.seeds
            # six digits: a mean kept to four (0.4925 of 0.492533) was printed 49.2 % in Table 1 and 49.3 % in the
            # tables that compute it from the seeds' scores
            metrics[key][f"{score}_mean"] = round(spread.mean, 6)
            if spread.seeds > 1:
                metrics[key][f"{score}_ci95"] = round(spread.half_width, 6)


def log_model_runs(
    run: StageRun, metrics: dict[str, dict[str, float]], checkpoints: list[Path]
) -> None:
    """One run nested under the stage's per registered model (MLflow's compare view lines them up): its scores and
    their mean and interval over its seeds; each other seed's scores, under the same names, in a run nested under it."""
    rows: dict[str, dict[int, dict[str, float]]] = {}
    for key, scores in metrics.items():
        model, seed = base_key(key)
        rows.setdefault(model, {})[seed] = {
            name: value for name, value in scores.items() if name != "test_videos"
        }
    paths = {checkpoint_key(checkpoint): checkpoint for checkpoint in checkpoints}
    for model, by_seed in rows.items():
        with run.model_run(
            model,
            "test",
            {
                "privhar.checkpoint": str(paths.get(model, "")),
                "privhar.seeds": metrics.get(model, {}).get("seeds", len(by_seed)),
            },
        ) as model_run:
            for seed, values in sorted(by_seed.items()):
                with model_run.seed_run(seed) as seed_run:
                    seed_run.log_history([(None, values)])


def write_confusion_data(predictions: pl.DataFrame, folder: Path) -> None:
    """``folder/<key>.csv`` (video_id, actual, predicted) of each registered model (seed 0) under protocol 1: the data
    of the confusion matrices that ``dvc plots diff`` draws with its ``confusion`` template (dvc.yaml ``plots:``)."""
    keys = [
        key for key in predictions["model"].unique(maintain_order=True) if base_key(key)[1] == 0
    ]
    registered = predictions.filter((pl.col("protocol") == 1) & pl.col("model").is_in(keys))
    with atomic_directory(folder) as staging:
        for (key,), frame in registered.partition_by(
            "model", as_dict=True, maintain_order=True
        ).items():
            atomic_write_bytes(
                staging / f"{key}.csv", csv_bytes(frame.select("video_id", "actual", "predicted"))
            )


def _score(
    model: torch.nn.Module,
    config: dict[str, Any],
    folder: Path,
    protocol: int,
    tests: TestSets,
    logits_of: Logits,
    scores: dict[str, float],
) -> tuple[torch.Tensor, list[dict[str, Any]]]:
    """Top-1 and Top-5 of ``model`` on the test clips of ``folder`` into ``scores`` (protocol 2's with a suffix); its
    guesses and the test rows they are of."""
    size = tuple(config["input_size"])
    rows = tests.rows(folder)
    logits, labels = logits_of(model, tests.clips(folder, size), folder, size), labels_of(rows)
    suffix = "" if protocol == 1 else "_protocol2"
    scores[f"top1{suffix}"] = top_k_accuracy(logits, labels, 1)
    scores[f"top5{suffix}"] = top_k_accuracy(logits, labels, 5)
    return logits.argmax(1), rows


def _predictions(
    key: str, protocol: int, classes: list[str], rows: list[dict[str, Any]], guesses: torch.Tensor
) -> list[dict[str, Any]]:
    return [
        {
            "model": key,
            "protocol": protocol,
            "video_id": row["video_id"],
            "actual": classes[row["label"]],
            "predicted": classes[int(guess)],
        }
        for row, guess in zip(rows, guesses)
    ]


def _confusion(
    run: StageRun,
    out: Path,
    key: str,
    classes: list[str],
    labels: torch.Tensor,
    guesses: torch.Tensor,
    scores: dict[str, float],
) -> None:
    """The registered model's confusion matrix on the raw test videos, as out/confusion/<key>.png."""
    matrix = confusion_matrix(labels.numpy(), guesses.numpy(), len(classes))
    png = plot_confusion(
        matrix, classes, f"{key}: Top-1 {scores['top1']:.3f} on {len(labels)} raw test videos"
    )
    atomic_write_bytes(out / "confusion" / f"{key}.png", png)
    run.log_artifact(out / "confusion" / f"{key}.png")


@stage_work
def evaluate(
    *,
    base: BaseParams,
    params: EvaluateParams,
    frames: Annotated[Path, arg.folder("Folder of the decoded clips.")],
    models: Annotated[
        Sequence[Path],
        arg.folder("A folder of trained models (<key>/model.pt at any depth); repeat for several."),
    ],
    out: Annotated[Path, arg.folder("Where to write metrics, predictions and plots.", "output")],
) -> dict[str, dict[str, float]]:
    """Run the stage over every ``<key>/model.pt`` in ``models``; return the metrics written."""
    device = resolve_device(base.device)
    tests = TestSets()
    logits_of = Logits(params.batch_size, device)
    test_rows = tests.rows(frames)
    checkpoints = find_checkpoints(models)
    metrics: dict[str, dict[str, float]] = {}
    # model key -> SHA-256 of the checkpoint scored: the registry scores only these files
    scored: dict[str, str] = {}
    predictions: list[dict[str, Any]] = []
    with stage_run("evaluate", {"evaluate": params}) as run:
        run.log_dataset(frames, "test", "testing")
        run.set_tags({"privhar.device": str(device)})
        for checkpoint in checkpoints:
            key = checkpoint_key(checkpoint)
            model, config = load_checkpoint(str(checkpoint))
            protected = protected_folder(config, frames)
            protocols = {1: frames} if protected is None else {1: frames, 2: protected}
            scores: dict[str, float] = {"test_videos": len(test_rows)}
            guesses: dict[int, torch.Tensor] = {}
            for protocol, folder in protocols.items():
                guesses[protocol], rows = _score(
                    model, config, folder, protocol, tests, logits_of, scores
                )
                predictions += _predictions(
                    key, protocol, config["classes"], rows, guesses[protocol]
                )
            metrics[key] = {name: round(value, 4) for name, value in scores.items()}
            scored[key] = checkpoint_digest(checkpoint)
            # a confusion matrix for the registered model, not for every training seed
            if base_key(key)[1] == 0:
                _confusion(
                    run, out, key, config["classes"], labels_of(test_rows), guesses[1], scores
                )
            second = (
                f"  protocol 2 Top-1 {scores['top1_protocol2']:.4f}"
                if protected is not None
                else ""
            )
            LOG.info(
                f"evaluate: {key}: Top-1 {scores['top1']:.4f}  Top-5 {scores['top5']:.4f}{second}  "
                f"({len(test_rows)} test videos)"
            )
        add_seed_summaries(metrics)
        log_model_runs(run, metrics, checkpoints)
        table = frame_of(predictions, ["model", "protocol", "video_id", "actual", "predicted"])
        atomic_write_bytes(out / "predictions.csv", csv_bytes(table))
        write_confusion_data(table, out / "predictions")
        atomic_write_bytes(
            out / "metrics.json", (json.dumps(metrics, indent=2, sort_keys=True) + "\n").encode()
        )
        atomic_write_bytes(
            out / SCORED_PATH.name, (json.dumps(scored, indent=2, sort_keys=True) + "\n").encode()
        )
    return metrics
