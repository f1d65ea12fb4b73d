"""``privhar bench private-recipe``: choose the private recipe on public videos alone (issue 85).

A search over the private training split would leak unless accounted for (Papernot & Steinke 2022), and one over the
test split would decide nothing. So the recipe of ``private`` (batch, steps, learning rate, clip, the public subspace)
is chosen on a proxy built from the public set only, as DP-SGD recipes are chosen at a small scale first (Sander et
al. 2023):

1. the public training videos are split by identity: one half of the people pretrain a *proxy public model*
   (``privhar stage train --family public``, the pretrain stage's command and epochs, its MLflow runs in a scratch store);
2. the other half's training videos play the private training split — people and videos the proxy model never saw,
   as the private ones are unseen by the real public model — grouped into ``private.public_size.person`` pseudo-persons
   (about 1.5 videos each, as the embedded private set), and their test videos are the validation split;
3. every cell of the grid trains person-level DP-SGD heads (the stage's loop, :func:`tasks.private.methods.train_grouped`)
   at each ε on the proxy model's standardised features, in its public subspace, from zero; Top-1 on the validation
   videos over ``seeds`` seeded runs (not private: nothing here is released);
4. the halves swap (:data:`FOLDS`): two proxies, and each cell's score is the mean of the two (one proxy's 100
   validation videos left ties of a point undecided).

What it costs: no ε (nothing private is read), and the time in the JSON.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from tasks.core.dp_params import PrivateParams
from tasks.core.dp_randomness import DpStream
from tasks.core.intervals import interval
from tasks.core.manifest import MANIFEST_NAME, QUARANTINE_NAME, read_manifest
from tasks.core.params import PublicParams
from tasks.core.params_files import load_section
from tasks.core.storage import atomic_write_bytes
from tasks.private.inputs import recipe_of
from tasks.private.methods import PrivateData, noise_for, train_grouped
from tasks.video_models.checkpoints import load_checkpoint
from tasks.video_models.clips import labels_of, load_clips, normalise
from tasks.video_models.head_features import (
    pooled_features,
    public_statistics,
    standardise,
    training_head,
    with_subspace,
)

LOG = logging.getLogger(__name__)
EPSILONS = (1.0, 2.0, 8.0, math.inf)
# which half of the public people (sorted) pretrains the proxy model; the other is its private set
FOLDS = (0, 1)
# (batch, epochs, learning rate, subspace): the private defaults before issue 85 first, then the grid around q = 1
GRID: tuple[tuple[int, int, float, int | str | None], ...] = (
    (150, 16, 0.05, None),
    *(
        (300, epochs, rate, subspace)
        for subspace in (8, 16, 32, None, "class_means")
        for epochs, rate in ((8, 0.8), (8, 0.4), (8, 0.2), (16, 0.2), (16, 0.1), (32, 0.1))
    ),
    *((150, epochs, rate, k) for k in (8, 16, 32) for epochs, rate in ((8, 0.4), (16, 0.2))),
)


def _split_folder(public: Path, folder: Path, half: int = 0) -> list[dict[str, Any]]:
    """A decode folder over ``public``'s clips whose training split is one ``half`` (0: the first) of the people's
    training videos; the rows of the other half (the proxy's private set)."""
    rows = read_manifest(public / MANIFEST_NAME)
    people = sorted({row["identity"] for row in rows})
    middle = len(people) // 2
    trained = set(people[:middle] if half == 0 else people[middle:])
    manifest = pl.read_parquet(public / MANIFEST_NAME).with_columns(
        pl.when(pl.col("identity").is_in(list(trained)) & (pl.col("split") == "train"))
        .then(pl.lit("train"))
        .otherwise(pl.lit("held_out"))
        .alias("split")
    )
    folder.mkdir(parents=True)
    manifest.write_parquet(folder / MANIFEST_NAME)
    pl.read_parquet(public / QUARANTINE_NAME).write_parquet(folder / QUARANTINE_NAME)
    for name in ("frames", "annotations"):
        (folder / name).symlink_to((public / name).resolve())
    return [row for row in rows if row["identity"] not in trained]


def _proxy_model(split: Path, scratch: Path, epochs: int) -> Path:
    """The proxy public model: ``privhar stage train`` on the split's training videos, as the pretrain stage runs it."""
    out = scratch / "model"
    environment = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{scratch / 'mlflow.db'}"}
    privhar = Path(sys.executable).with_name(
        "privhar"
    )  # the console command beside this interpreter
    command = [str(privhar), "stage", "train", "--frames", str(split), "--out", str(out)]
    command += ["--report", str(scratch / "report"), "--family", "public", "--epochs", str(epochs)]
    subprocess.run(command, check=True, env=environment, stdout=subprocess.DEVNULL)
    return out


def _features(model_folder: Path, public: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Pooled features of the proxy's private training and validation videos under the proxy model."""
    model, config = load_checkpoint(str(model_folder / "model.pt"))
    model.eval()
    size = tuple(config["input_size"])

    def of(split: str) -> tuple[torch.Tensor, torch.Tensor]:
        chosen = [row for row in rows if row["split"] == split]
        return pooled_features(model, normalise(load_clips(chosen, public, size))), labels_of(
            chosen
        )

    return {
        "train": of("train"),
        "validation": of("test"),
        "statistics": public_statistics(model_folder),
    }


def _owners(count: int, persons: int, seed: int) -> torch.Tensor:
    """``persons`` pseudo-persons over ``count`` videos: count − persons of them hold two videos, the others one."""
    pairs = count - persons
    if not 0 <= pairs <= persons:
        raise ValueError(f"{count} videos cannot make {persons} persons of one or two videos")
    owners = np.r_[np.repeat(np.arange(pairs), 2), np.arange(pairs, persons)]
    return torch.from_numpy(owners[np.random.default_rng(seed).permutation(count)])


def _cell(
    features: dict[str, Any],
    params: PrivateParams,
    cell: tuple[int, int, float, int | str | None],
    seeds: int,
) -> dict[str, Any]:
    """Top-1 (%) on the validation videos at each ε of one recipe, and σ."""
    batch, epochs, rate, subspace = cell
    statistics = with_subspace(features["statistics"], subspace, Path("proxy"))
    (train, labels), (validation, answers) = features["train"], features["validation"]
    persons = params.public_size["person"] or len(labels)
    data = PrivateData(
        standardise(train, statistics).unsqueeze(1), labels, owners=_owners(len(labels), persons, 0)
    )
    recipe = (
        dataclasses.replace(  # the stage's own recipe for dp_sgd_person, the cell's values in place
            recipe_of(params, "dp_sgd_person"),
            epochs=epochs,
            batch_size=batch,
            learning_rate=rate,
            public_size=persons,
        )
    )
    seen = standardise(validation, statistics)
    scores = {}
    for epsilon in EPSILONS:
        sigma = 0.0 if math.isinf(epsilon) else noise_for(epsilon, data, recipe)
        top1 = []
        for seed in range(seeds):
            torch.manual_seed(
                1000 + seed
            )  # a fresh classifier, as the stage draws one (zero in a subspace)
            head = training_head(torch.nn.Linear(train.shape[1], int(labels.max()) + 1), statistics)
            train_grouped(head, data, recipe, sigma, DpStream.seeded(7919 * seed + 1))
            with torch.no_grad():
                top1.append(100 * float((head(seen).argmax(1) == answers).float().mean()))
        summary = interval(top1)
        scores[repr(epsilon)] = {
            "top1": round(summary.mean, 2),
            "half_width": round(summary.half_width, 2),
            "sigma": sigma,
        }
    return {
        "batch_size": batch,
        "epochs": epochs,
        "learning_rate": rate,
        "public_subspace": subspace,
        "scores": scores,
    }


def _fold(
    params: PrivateParams, epochs: int, public: Path, half: int, seeds: int
) -> dict[str, Any]:
    """One proxy (``half`` of the people pretrain its public model for ``epochs``) and every cell of :data:`GRID`
    scored on it."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="privhar-recipe-") as scratch:
        rows = _split_folder(public, Path(scratch) / "split", half)
        features = _features(
            _proxy_model(Path(scratch) / "split", Path(scratch), epochs), public, rows
        )
    built = time.perf_counter() - started
    return {
        "proxy": {
            "public_half": half,
            "private_training_videos": len(features["train"][1]),
            "validation_videos": len(features["validation"][1]),
            "persons": params.public_size["person"],
            "seconds_to_build": round(built, 1),
        },
        "cells": [_cell(features, params, cell, seeds) for cell in GRID],
    }


def _mean_of_folds(folds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each cell's Top-1 at each ε averaged over the folds (the score the recipe is chosen by)."""
    cells = []
    for index, first in enumerate(folds[0]["cells"]):
        scores = {
            epsilon: round(
                float(np.mean([fold["cells"][index]["scores"][epsilon]["top1"] for fold in folds])),
                2,
            )
            for epsilon in first["scores"]
        }
        cells.append({**{key: first[key] for key in first if key != "scores"}, "top1": scores})
    return cells


def run_bench(params_path: Path, public: Path, seeds: int, out: Path) -> dict[str, Any]:
    """Build both proxies, score every cell of :data:`GRID` on each, write ``out`` (JSON) and return it."""
    params = load_section(params_path, "private", PrivateParams)
    epochs = load_section(params_path, "public", PublicParams).epochs
    started = time.perf_counter()
    folds = [_fold(params, epochs, public, half, seeds) for half in FOLDS]
    record = {
        "folds": folds,
        "cells": _mean_of_folds(folds),
        "seeds": seeds,
        "randomness": "seeded (not private): nothing private is read, nothing is released",
        "unit": "person (add/remove), pseudo-persons of the proxy",
        "seconds": round(time.perf_counter() - started, 1),
    }
    atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
    LOG.info(
        "bench private-recipe: %d cells on %d proxies in %.0f s, written to %s",
        len(GRID),
        len(folds),
        record["seconds"],
        out,
    )
    return record
