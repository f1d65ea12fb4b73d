"""Stage ``evaluate``: action recognition on the test split, per trained method.

    data/train/<method>/model.pt ─┐
    data/decode (test split) ─────┴─▶ logits ─▶ Top-1, Top-5 ─▶ out/metrics.json  {method: {top1, top5, ...}}
                                                          ├─▶ out/predictions.csv (method, video_id, actual, predicted)
                                                          └─▶ out/confusion_<method>.png

``metrics.json`` is keyed by method, then metric, so ``dvc metrics show`` lists every
method side by side; later methods add their keys beside ``baseline``.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from tasks.core.clips import labels_of, load_clips, normalise, split_rows  # noqa: E402
from tasks.core.errors import PrivharError  # noqa: E402
from tasks.core.manifest import MANIFEST_NAME, read_manifest  # noqa: E402
from tasks.core.models import load_checkpoint  # noqa: E402
from tasks.core.params import EvaluateParams, load_section  # noqa: E402
from tasks.core.storage import atomic_write_bytes  # noqa: E402
from tasks.core.tracking import stage_run  # noqa: E402


def top_k_accuracy(logits: torch.Tensor, labels: torch.Tensor, k: int) -> float:
    """Share of samples whose label is among the k highest scores.

    >>> top_k_accuracy(torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.15, 0.05]]), torch.tensor([1, 1]), 1)
    0.5
    >>> top_k_accuracy(torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.15, 0.05]]), torch.tensor([1, 1]), 2)
    1.0
    """
    k = min(k, logits.shape[1])
    hits = (logits.topk(k, dim=1).indices == labels[:, None]).any(dim=1)
    return float(hits.float().mean())


def confusion_matrix(actual: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    matrix = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(matrix, (actual, predicted), 1)
    return matrix


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
            axes.text(column, row, str(count), ha="center", va="center", color="white" if shares[row, column] > 0.5 else "black", fontsize=7)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


@torch.no_grad()
def predict(model: torch.nn.Module, clips: torch.Tensor, batch_size: int) -> torch.Tensor:
    return torch.cat([model(normalise(batch)) for batch in clips.split(batch_size)])


def evaluate(*, params_path: Path, frames: Path, models: Path, out: Path) -> dict[str, dict[str, float]]:
    """Run the stage over every ``<models>/<method>/model.pt``; return the metrics written."""
    params = load_section(params_path, "evaluate", EvaluateParams)
    test_rows = split_rows(read_manifest(frames / MANIFEST_NAME), "test")
    if not test_rows:
        raise PrivharError(f"{frames / MANIFEST_NAME}: no videos in the test split")
    checkpoints = sorted(models.glob("*/model.pt"))
    if not checkpoints:
        raise PrivharError(f"{models}: no trained models (<method>/model.pt); run the train stage first")
    metrics: dict[str, dict[str, float]] = {}
    predictions: list[dict[str, Any]] = []
    labels = labels_of(test_rows)
    with stage_run("evaluate", {"evaluate": params}) as run:
        for checkpoint in checkpoints:
            method = checkpoint.parent.name
            model, config = load_checkpoint(str(checkpoint))
            logits = predict(model, load_clips(test_rows, frames, tuple(config["input_size"])), params.batch_size)
            predicted = logits.argmax(1)
            scores = {"top1": top_k_accuracy(logits, labels, 1), "top5": top_k_accuracy(logits, labels, 5),
                      "test_videos": len(test_rows)}
            metrics[method] = {key: round(value, 4) for key, value in scores.items()}
            matrix = confusion_matrix(labels.numpy(), predicted.numpy(), len(config["classes"]))
            png = plot_confusion(matrix, config["classes"], f"{method}: Top-1 {scores['top1']:.3f} on {len(test_rows)} test videos")
            atomic_write_bytes(out / f"confusion_{method}.png", png)
            predictions += [{"method": method, "video_id": row["video_id"], "actual": config["classes"][row["label"]],
                             "predicted": config["classes"][int(guess)]} for row, guess in zip(test_rows, predicted)]
            run.log_metrics({f"{method}.top1": scores["top1"], f"{method}.top5": scores["top5"]})
            run.log_artifact(out / f"confusion_{method}.png")
            print(f"evaluate: {method}: Top-1 {scores['top1']:.4f}  Top-5 {scores['top5']:.4f}  ({len(test_rows)} test videos)",
                  file=sys.stderr)
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=["method", "video_id", "actual", "predicted"])
        writer.writeheader()
        writer.writerows(predictions)
        atomic_write_bytes(out / "predictions.csv", buffer.getvalue().encode())
        atomic_write_bytes(out / "metrics.json", (json.dumps(metrics, indent=2, sort_keys=True) + "\n").encode())
    return metrics
