"""The training seeds of one row: each seed a fresh model trained and saved, and how many seeds a row trains
(all of ``report.seeds``, or as many as Stein's rule asks of the pilot seeds' spread)."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tasks.core.errors import PrivharError
from tasks.core.guarantee import PrivacyGuarantee
from tasks.core.intervals import stein_seeds
from tasks.core.item_randomness import derive_seed
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.params import ReportParams, SeedRule, TrainParams
from tasks.core.seeds import seed_folder, seed_keys
from tasks.core.tracking import StageRun
from tasks.train.methods import TRAINING_METHODS, TrainingData, held_out_accuracy
from tasks.video_models.checkpoints import build_from_config, transfer_weights
from tasks.video_models.clips import labels_of, load_clips, normalise, split_rows
from tasks.video_models.head_features import STATISTICS_KEY, feature_statistics, pooled_features
from tasks.video_models.model_registry import checkpoint_digest
from tasks.video_models.models import has_batch_norm

LOG = logging.getLogger(__name__)


def train_seed(
    params: TrainParams,
    base_seed: int,
    seed: int,
    data: TrainingData,
    init: Path | None,
    config: dict[str, Any],
    key: str,
    frames: Path,
    run: StageRun,
    weights: str | None = None,
    as_loaded: bool = False,
) -> tuple[nn.Module, list[dict[str, float]], float]:
    """One training seed: a fresh model (fine-tuned from ``init``, else starting from ``weights``: model.weights),
    its history and seconds; ``as_loaded``: not trained at all (the checkpoint, a classifier of its seed).

    Seeded by method, not by key: on raw or protected clips the same initialisation and batch
    order, so two models of one seed differ only in the data they learnt from. A fine-tuning's keys add
    ``fine-tune``: without it, seed 0 drew the public model's own pretraining draws (its classifier's initial
    weights, its dropout), so seed 0 was not one more sample of the seeds; in the make run of 2026-11-27 it was
    the best seed of the raw, avatar and face-blur classifiers (5 seeds each) and of both Video-DPRP copies
    (30 seeds each, 18 and 22 points above their mean). Only seed 0 scores the test split after each epoch: its
    history is the learning curve the report plots; no one read the other seeds' curves, and they cost 0.75 s of
    a 7 s seed.
    """
    if seed:
        data = replace(data, held_out=None)
    keys = (*(("fine-tune",) if init is not None else ()), *seed_keys(seed))
    torch.manual_seed(derive_seed(base_seed, "train", params.method, "init", *keys))
    generator = torch.Generator().manual_seed(
        derive_seed(base_seed, "train", params.method, "batches", *keys)
    )
    model = build_from_config(config, weights if init is None else None)
    if init is not None:
        transfer_weights(model, config, init / "model.pt")
    if has_batch_norm(model):
        raise PrivharError("train: the model has BatchNorm layers; use GroupNorm or LayerNorm")
    model.to(data.device)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    LOG.info(
        "train: %s (%s) seed %d on %d videos of %s, %d trainable parameters",
        key,
        params.method,
        seed,
        len(data.labels),
        frames,
        trainable,
    )
    started = time.perf_counter()
    history = (
        [{"epoch": 0}]
        if as_loaded
        else TRAINING_METHODS[params.method](model, data, params, generator, run)
    )
    model.eval().cpu()  # saved and registered from the CPU: the checkpoint loads anywhere
    return model, history, time.perf_counter() - started


def rule_for(
    report: ReportParams, family: str, score_on: Path | None, most: int
) -> SeedRule | None:
    """``report.seed_rule`` where it applies to ``family`` (and there is room above its pilot), else None."""
    rule = report.seed_rule
    if family not in rule.families or most <= rule.pilot:
        return None
    if score_on is None:
        raise PrivharError(
            f"train: report.seed_rule names the family {family}: --score-on (the raw clips whose test split scores "
            "its pilot seeds) is required"
        )
    return rule


class SeedPlan:
    """How many seeds a row trains: all ``most``, or, by ``rule``, the pilot's and then what Stein's rule asks of
    their spread (:func:`tasks.core.intervals.stein_seeds`). The pilot seeds are scored as the evaluate stage scores the
    row (protocol 1: the raw test split of ``score_on``); every seed trained is kept and evaluated, so the row's mean is
    over all of them."""

    def __init__(
        self, most: int, rule: SeedRule | None, score_on: Path | None, params: TrainParams
    ) -> None:
        self.most, self.rule, self.scores = most, rule, []
        self.planned = most if rule is None else rule.pilot
        self.scoring = None
        if rule is not None and score_on is not None:
            rows = split_rows(read_manifest(score_on / MANIFEST_NAME), "test")
            if not rows:
                raise PrivharError(f"{score_on / MANIFEST_NAME}: no videos in the test split")
            self.scoring = (load_clips(rows, score_on, tuple(params.input_size)), labels_of(rows))

    def seen(self, model: nn.Module, data: TrainingData) -> None:
        """One more seed trained: a pilot seed is scored; the last one decides how many seeds the row needs."""
        if self.rule is None or len(self.scores) >= self.rule.pilot:
            return
        self.scores.append(held_out_accuracy(model, replace(data, held_out=self.scoring)))
        if len(self.scores) == self.rule.pilot:
            self.planned = stein_seeds(self.scores, self.rule.half_width, self.most)
            LOG.info(
                "train: Stein's rule: %d pilot seeds, Top-1 sd %.3f, %d seeds for a ±%.3f interval (at most %d)",
                len(self.scores),
                statistics.stdev(self.scores),
                self.planned,
                self.rule.half_width,
                self.most,
            )

    def record(self) -> dict[str, Any]:
        """What the training record says of its seeds."""
        if self.rule is None:
            return {"seeds": self.planned}
        return {
            "seeds": self.planned,
            "seed_rule": f"Stein: {self.rule.pilot} pilot seeds, ±{self.rule.half_width:g}, at most {self.most}",
            "pilot_top1_sd": round(statistics.stdev(self.scores), 6),
        }


def _public_statistics(
    model: nn.Module, data: TrainingData, batch_size: int = 64
) -> dict[str, torch.Tensor]:
    """The pooled features' mean and std over the (public) training clips, for standardising fine-tuned heads, and the
    public subspaces a private head may train in (principal and class-mean directions)."""
    model.to(data.device)
    features = torch.cat(
        [
            pooled_features(model, normalise(part).to(data.device)).cpu()
            for part in data.clips.split(batch_size)
        ]
    )
    model.cpu()
    return feature_statistics(features, data.labels)


@dataclass
class FirstSeed:
    """Seed 0, the model the pipeline registers: the model, its learning curve, its checkpoint's digest."""

    model: nn.Module
    history: list[dict[str, float]]
    digest: str


def train_seeds(
    train_one: Callable[..., tuple[nn.Module, list[dict[str, float]], float]],
    plan: SeedPlan,
    run: StageRun,
    staging: Path,
    config: dict[str, Any],
    data: TrainingData,
    privacy: PrivacyGuarantee,
) -> FirstSeed:
    """Every seed ``plan`` asks for trained (each under its MLflow run) and saved in ``staging``; seed 0 returned."""
    first = None
    seed = 0
    while seed < plan.planned:
        with run.seed_run(seed) as seed_run:
            model, history, seconds = train_one(seed=seed, run=seed_run)
        folder = seed_folder(staging, seed)
        folder.mkdir(exist_ok=True)
        checkpoint = {
            "state_dict": model.state_dict(),
            "config": {**config, "seed": seed},
        }
        # what fine-tuning heads are standardised by: statistics of public clips only
        if config["family"] == "public":
            checkpoint[STATISTICS_KEY] = _public_statistics(model, data)
        torch.save(checkpoint, folder / "model.pt")
        if seed == 0:
            first = FirstSeed(model, history, checkpoint_digest(folder / "model.pt"))
            run.log_metrics(
                {
                    "train_seconds": seconds,
                    "trainable_parameters": trainable_parameters(model),
                    "epsilon": privacy.epsilon,
                    "delta": privacy.delta,
                }
            )
        plan.seen(model, data)
        seed += 1
    return first


def trainable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
