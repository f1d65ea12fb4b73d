"""``privhar bench epochs``: how many epochs the fine-tunings need, chosen on videos the test split never sees (issue 62).

Each training folder's train split is dealt into ``folds`` folds (every class in every fold). For each candidate
epoch count E, a classifier is fine-tuned from the public model with the train stage's recipe and ``train.epochs = E``
on all folds but one, and scored on the one left out: the score of E is the mean validation Top-1 over the folds and
its standard error. Every E is a training of its own, not an epoch of a longer one: the learning rate warms up and
decays to 0 over the E epochs, so a prefix of a longer schedule would score E too low.

The rule is the one-standard-error rule (Hastie, Tibshirani & Friedman, *The Elements of Statistical Learning*,
§7.10): the fewest epochs whose score is within one standard error of the best; ``train.epochs_per_family`` takes
each family's (the raw clips: ``baseline``; a Video-DPRP copy: ``dprp``; an anonymized copy: ``anonymize``). A copy's
folds are of the copy itself, as its classifier learns it (its raw clips are the private data the copy protects).
The test split is never read. Seeded (fold i trains with seed i + 1): a measurement, not a release.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from tasks.core.intervals import interval
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.params import BaseParams, ModelParams, TrainParams
from tasks.core.storage import atomic_write_bytes
from tasks.core.tracking import stage_run
from tasks.train.methods import TrainingData, held_out_accuracy
from tasks.train.seeds import train_seed
from tasks.train.stage import classifier_config
from tasks.video_models.clips import labels_of, load_clips, split_rows
from tasks.video_models.device import resolve_device

LOG = logging.getLogger(__name__)


def fold_of(rows: list[dict[str, Any]], folds: int) -> list[int]:
    """Each row's fold: a class's videos (in manifest order) dealt round-robin, so every fold holds every class.

    >>> fold_of([{"label": 0}, {"label": 1}, {"label": 0}, {"label": 0}, {"label": 1}], 2)
    [0, 0, 1, 0, 1]
    """
    dealt: dict[int, int] = {}
    found = []
    for row in rows:
        label = int(row["label"])
        found.append(dealt.get(label, 0) % folds)
        dealt[label] = dealt.get(label, 0) + 1
    return found


def one_standard_error(scores: dict[int, dict[str, float]]) -> int:
    """The fewest epochs whose mean score is within one standard error of the best mean.

    >>> one_standard_error({2: {"mean": 0.80, "se": 0.02}, 4: {"mean": 0.88, "se": 0.01}, 6: {"mean": 0.885, "se": 0.02}})
    4
    """
    best = max(scores, key=lambda epochs: scores[epochs]["mean"])
    floor = scores[best]["mean"] - scores[best]["se"]
    return min(epochs for epochs, score in scores.items() if score["mean"] >= floor)


def _folder_scores(
    folder: Path,
    candidates: list[int],
    folds: int,
    sections: dict[str, Any],
    init: Path,
    run: Any,
) -> dict[int, dict[str, float]]:
    """Validation Top-1 of each candidate epoch count on ``folder``'s train split, over the folds."""
    base, model_params, params = sections["base"], sections["model"], sections["train"]
    rows = read_manifest(folder / MANIFEST_NAME)
    train_rows = split_rows(rows, "train")
    clips, labels = load_clips(train_rows, folder, tuple(params.input_size)), labels_of(train_rows)
    assigned = torch.tensor(fold_of(train_rows, folds))
    config = classifier_config(
        model_params, params, rows, f"epochs-{folder.name}", "bench", folder, init
    )
    device = resolve_device(base.device)
    scores: dict[int, dict[str, float]] = {}
    for epochs in candidates:
        recipe = params.model_copy(update={"epochs": epochs})
        accuracies = []
        for fold in range(folds):
            kept, left = assigned != fold, assigned == fold
            data = TrainingData(clips[kept], labels[kept], config["classes"], device)
            model, _, _ = train_seed(
                recipe, base.seed, fold + 1, data, init, config, config["model"], folder, run
            )
            scored = replace(data, held_out=(clips[left], labels[left]))
            accuracies.append(held_out_accuracy(model, scored))
        spread = interval(accuracies)
        scores[epochs] = {"mean": spread.mean, "se": spread.standard_error}
        LOG.info(
            "bench epochs: %s, %d epochs: validation Top-1 %.3f ± %.3f (standard error, %d folds)",
            folder,
            epochs,
            spread.mean,
            spread.standard_error,
            folds,
        )
    return scores


def run_bench(
    *,
    sections: dict[str, Any],
    frames: list[Path],
    init: Path,
    candidates: list[int],
    folds: int,
    out: Path,
) -> dict[str, Any]:
    """Score every candidate on every folder, pick each folder's epochs and the pipeline's; write ``out`` (JSON)."""
    base: BaseParams = sections["base"]
    model_params: ModelParams = sections["model"]
    params: TrainParams = sections["train"]
    started = time.perf_counter()
    folders: dict[str, Any] = {}
    with stage_run("bench epochs", {"base": base, "train": params, "model": model_params}) as run:
        for folder in frames:
            scores = _folder_scores(folder, candidates, folds, sections, init, run)
            folders[str(folder)] = {
                "scores": {str(epochs): score for epochs, score in scores.items()},
                "chosen": one_standard_error(scores),
            }
    record = {
        "rule": "one-standard-error (ESL 7.10) on the train split's folds; the test split is never read",
        "folds": folds,
        "candidates": candidates,
        "folders": folders,
        "params_train_epochs": params.epochs,
        "seconds": round(time.perf_counter() - started, 1),
    }
    atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
    return record
