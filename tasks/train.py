"""Stage ``train``: fit the shared video classifier with the method ``train.method`` names.

Methods live in :data:`TRAINING_METHODS`, keyed by the params value; the spine brings the
non-private ``baseline`` (AdamW, cross-entropy, cosine learning-rate decay). Every method
trains the model of :func:`tasks.video_models.models.create_video_classifier`, from scratch or (``--init``,
what the pipeline does) from the public model of the pretrain stage.

The same stage trains on raw clips (``data/decode``) or on a protected copy (``data/dprp/eps8.0``,
``data/anonymize/avatar``: protocols 1 and 2 of paper 000, §4.3). A model's key is its folder's
name under ``data/train`` (``baseline``, ``dprp-eps8.0``, ``anonymize-avatar``); the evaluate stage keys its metrics by it, and the registry
files it under ``privhar-<family>``. Its privacy claim is the tighter of the method's and the
training data's (:func:`tasks.core.guarantee.strongest`).

    <frames> (train split) ─▶ clips at train.input_size ─▶ method ─▶ out/model.pt
                                                               └─▶ report/<key>.json, <key>_history.csv
                                                                   (loss, train and test Top-1 per epoch: a DVC plot)
"""

from __future__ import annotations

import json
import logging
import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import torch
import torch.nn.functional as F
from torch import nn

from tasks.core import stage_options as arg
from tasks.core.catalogue import Catalogue
from tasks.core.errors import PrivharError
from tasks.core.guarantee import NON_PRIVATE, data_audit, data_guarantee, strongest
from tasks.core.intervals import stein_seeds
from tasks.core.item_randomness import derive_seed
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.model_registry import CHECKPOINT_TAG, checkpoint_digest, register_model
from tasks.core.params import (
    BaseParams,
    ModelParams,
    PrivacyParams,
    ReportParams,
    SeedRule,
    TrainParams,
    family_seeds,
)
from tasks.core.progress import progress
from tasks.core.seeds import seed_folder, seed_keys
from tasks.core.storage import atomic_directory, atomic_write_bytes
from tasks.core.tables import csv_bytes
from tasks.core.tracking import StageRun, stage_run, stage_work
from tasks.privacy.budget import check_unprotected
from tasks.video_models.checkpoints import architecture_config, build_from_config, transfer_weights
from tasks.video_models.clips import (
    augment,
    class_names,
    labels_of,
    load_clips,
    normalise,
    predict,
    split_rows,
)
from tasks.video_models.device import mixed_precision, resolve_device, to_device
from tasks.video_models.head_features import STATISTICS_KEY, feature_statistics, pooled_features
from tasks.video_models.models import has_batch_norm


@dataclass
class TrainingData:
    clips: torch.Tensor  # uint8 (N, 3, T, h, w), on the CPU
    labels: torch.Tensor  # (N,)
    classes: list[str]
    device: torch.device = torch.device(
        "cpu"
    )  # where the model trains (base.device): batches move there
    held_out: tuple[torch.Tensor, torch.Tensor] | None = (
        None  # the test split (clips, labels): the learning curve only
    )


def held_out_accuracy(model: nn.Module, data: TrainingData, batch_size: int = 64) -> float | None:
    """Top-1 on the held-out clips: after an epoch, the learning curve's second line; of a pilot seed, what Stein's rule
    counts seeds by (:class:`SeedPlan`). Never used to pick a model or to stop a training."""
    if data.held_out is None:
        return None
    clips, labels = data.held_out
    return int(
        (predict(model.eval(), clips, batch_size, data.device).argmax(1) == labels).sum()
    ) / len(labels)


LOG = logging.getLogger(__name__)
Method = Callable[
    [nn.Module, TrainingData, TrainParams, torch.Generator, StageRun], list[dict[str, float]]
]
TRAINING_METHODS: Catalogue[Method] = Catalogue("training method")


def batches(count: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """A shuffled partition of range(count) into batches (the last may be smaller)."""
    return list(torch.randperm(count, generator=generator).split(batch_size))


def warmup_cosine(
    optimiser: torch.optim.Optimizer, params: TrainParams, samples: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Learning-rate factor: linear from 0 over ``warmup_epochs``, then cosine down to 0 at the last step."""
    steps_per_epoch = math.ceil(samples / params.batch_size)
    total, warmup = (
        params.epochs * steps_per_epoch,
        min(params.warmup_epochs * steps_per_epoch, params.epochs * steps_per_epoch - 1),
    )

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))

    return torch.optim.lr_scheduler.LambdaLR(optimiser, factor)


# What each method claims; a DP method will compute its ε with an accountant after training.
METHOD_PRIVACY = {"baseline": NON_PRIVATE}


@TRAINING_METHODS.entry("baseline")
def train_baseline(
    model: nn.Module,
    data: TrainingData,
    params: TrainParams,
    generator: torch.Generator,
    run: StageRun,
) -> list[dict[str, float]]:
    """Non-private training: AdamW on the mean cross-entropy, linear warm-up then cosine decay."""
    optimiser = torch.optim.AdamW(
        model.parameters(), lr=params.learning_rate, weight_decay=params.weight_decay
    )
    schedule = warmup_cosine(optimiser, params, len(data.labels))
    history = []
    for epoch in range(1, params.epochs + 1):
        model.train()
        total_loss, correct = 0.0, 0
        order = batches(len(data.labels), params.batch_size, generator)
        bar = progress(len(order), f"train epoch {epoch}/{params.epochs}", "batch")
        for index in order:
            inputs = normalise(to_device(augment(data.clips[index], generator), data.device))
            labels = to_device(data.labels[index], data.device)
            with mixed_precision(data.device):
                logits = model(inputs)
                loss = F.cross_entropy(logits, labels)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            schedule.step()
            total_loss += loss.item() * len(index)
            correct += int((logits.argmax(1) == labels).sum())
            bar.set_postfix(loss=f"{loss.item():.3f}")
            bar.update(1)
        bar.close()
        record = {
            "epoch": epoch,
            "loss": total_loss / len(data.labels),
            "train_accuracy": correct / len(data.labels),
        }
        held_out = held_out_accuracy(model, data)
        if held_out is not None:
            record["test_accuracy"] = held_out
        run.log_metrics(
            {name: value for name, value in record.items() if name != "epoch"}, step=epoch
        )
        history.append(record)
    return history


def _history_csv(history: list[dict[str, float]]) -> bytes:
    return csv_bytes(
        [
            {
                key: (f"{value:.6f}" if isinstance(value, float) else value)
                for key, value in record.items()
            }
            for record in history
        ]
    )


def _train_seed(
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


def _rule_for(
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
    """The pooled features' mean and std over the (public) training clips, for standardising fine-tuned heads."""
    model.to(data.device)
    features = torch.cat(
        [
            pooled_features(model, normalise(part).to(data.device)).cpu()
            for part in data.clips.split(batch_size)
        ]
    )
    model.cpu()
    return feature_statistics(features)


def classifier_config(
    model_params: ModelParams,
    params: TrainParams,
    rows: list[dict[str, Any]],
    key: str,
    family: str,
    frames: Path,
    init: Path | None,
) -> dict[str, Any]:
    """What a trained model's checkpoint records of it: its network, its classes (from the manifest ``rows``) and
    where it learnt."""
    classes = class_names(rows)
    return {
        "num_classes": len(classes),
        **architecture_config(model_params, params),
        "clip_frames": int(split_rows(rows, "train")[0]["n_frames"]),
        "classes": classes,
        "method": params.method,
        "model": key,
        "family": family,
        "frames": str(frames),
        "init": str(init) if init else None,
    }


def paper_number(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The ε a paper prints for the data's noise where it is not the one that holds (Video-DPRP's paper calibration)."""
    printed = rows[0].get("paper_epsilon")
    return {} if printed is None else {"paper_epsilon": float(printed)}


@stage_work
def train(
    *,
    base: BaseParams,
    model_params: ModelParams,
    params: TrainParams,
    seeds_from: ReportParams,
    privacy: PrivacyParams,
    frames: Annotated[
        Path, arg.folder("Folder of the clips to learn from: decoded (raw) or protected.")
    ],
    out: Annotated[
        Path,
        arg.folder(
            "Where to write the trained model; its folder name is the model's key (data/train/<key>).",
            "output",
        ),
    ],
    report: Annotated[
        Path,
        arg.folder(
            "Where to write the training metrics and history (<key>.json, <key>_history.csv).",
            "output",
        ),
    ],
    family: Annotated[
        str | None, arg.value("Registered model privhar-<family> [default: train.method].")
    ] = None,
    as_loaded: bool = False,
    init: Annotated[
        Path | None,
        arg.folder(
            "Folder of a model to fine-tune (the pretrain stage's data/pretrain/public) [default: from scratch].",
            "input",
        ),
    ] = None,
    seeds: Annotated[
        int,
        arg.value(
            "Training seeds (the pipeline passes report.seeds): seed i >= 1 is saved in <out>/seed<i>.",
            minimum=1,
        ),
    ] = 1,
    score_on: Annotated[
        Path | None,
        arg.folder(
            "Raw clips whose test split scores the pilot seeds (protocol 1) when report.seed_rule names the family.",
            "input",
        ),
    ] = None,
) -> dict[str, Any]:
    """Run the stage; return the final training record (of seed 0, the registered model).

    ``params``: the train section as :func:`tasks.core.params.load_train` gives it, with ``--epochs`` in place (the
    pretrain stage passes ``public.epochs``); ``as_loaded`` (``--epochs 0``): the model.weights checkpoint kept as it
    is. ``family`` names the registered model (default: the method); ``init`` is a model folder to
    fine-tune from (the public model: how HAR models are trained, from pretrained weights);
    ``seeds`` training seeds (``report.seeds``; ``report.seeds_per_family[family]`` replaces it): seed i ≥ 1 in
    ``out/seed<i>`` (:mod:`tasks.core.seeds`); by ``report.seed_rule`` (``score_on`` given), as many of them as the
    pilot's spread needs (:class:`SeedPlan`).
    """
    if seeds < 1:
        raise PrivharError(f"train: --seeds = {seeds} is invalid: expected an integer >= 1")
    if as_loaded and (model_params.weights is None or init is not None):
        raise PrivharError(
            "train: --epochs = 0 keeps the model.weights checkpoint as it is; "
            + ("model.weights is not set" if init is None else "it cannot fine-tune --init")
        )
    key, family = out.name, family or params.method
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", family):
        raise PrivharError(
            f"train: --family = {family!r} is invalid: expected letters, digits, '_', '.' or '-'"
        )
    seeds = family_seeds(seeds_from, family, seeds)
    rows = read_manifest(frames / MANIFEST_NAME)
    train_rows = split_rows(rows, "train")
    if not train_rows:
        raise PrivharError(f"{frames / MANIFEST_NAME}: no videos in the train split")
    if params.threads:
        torch.set_num_threads(params.threads)
    device = resolve_device(base.device)
    torch.use_deterministic_algorithms(
        device.type == "cpu"
    )  # CUDA's fast kernels (cuDNN benchmark) are not deterministic
    copy_guarantee = data_guarantee(train_rows)  # what the copy trained on claims
    if family != "public" and not math.isfinite(
        copy_guarantee.epsilon
    ):  # the public set holds no subject
        check_unprotected(privacy, f"the non-private model {key} (trained on {frames})")
    config = classifier_config(model_params, params, rows, key, family, frames, init)
    classes = config["classes"]
    run_name = "train" if key == params.method else f"train@{key}"
    privacy = strongest(METHOD_PRIVACY[params.method], copy_guarantee)
    with stage_run(run_name, {"base": base, "train": params, "model": model_params}) as run:
        with atomic_directory(out) as staging:
            test_rows = split_rows(rows, "test")
            held_out = (
                (load_clips(test_rows, frames, tuple(params.input_size)), labels_of(test_rows))
                if test_rows
                else None
            )
            data = TrainingData(
                load_clips(train_rows, frames, tuple(params.input_size)),
                labels_of(train_rows),
                classes,
                device,
                held_out,
            )
            plan = SeedPlan(seeds, _rule_for(seeds_from, family, score_on, seeds), score_on, params)
            seed = 0
            while seed < plan.planned:
                with run.seed_run(seed) as seed_run:
                    model, history, seconds = _train_seed(
                        params,
                        base.seed,
                        seed,
                        data,
                        init,
                        config,
                        key,
                        frames,
                        seed_run,
                        model_params.weights,
                        as_loaded,
                    )
                folder = seed_folder(staging, seed)
                folder.mkdir(exist_ok=True)
                checkpoint = {"state_dict": model.state_dict(), "config": {**config, "seed": seed}}
                if (
                    family == "public"
                ):  # what fine-tuning heads are standardised by: statistics of public clips only
                    checkpoint[STATISTICS_KEY] = _public_statistics(model, data)
                torch.save(checkpoint, folder / "model.pt")
                if seed == 0:
                    registered, first_history, digest = (
                        model,
                        history,
                        checkpoint_digest(folder / "model.pt"),
                    )
                    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
                    final = {
                        **history[-1],
                        "trainable_parameters": trainable,
                        "train_videos": len(train_rows),
                        "epsilon": privacy.epsilon if math.isfinite(privacy.epsilon) else "inf",
                        "delta": privacy.delta,
                        "accountant": privacy.accountant,
                        "unit": privacy.unit,
                        "relation": privacy.relation,
                        "randomness": privacy.randomness,
                        **paper_number(train_rows),
                    }
                    run.log_metrics(
                        {
                            "train_seconds": seconds,
                            "trainable_parameters": trainable,
                            "epsilon": privacy.epsilon,
                            "delta": privacy.delta,
                        }
                    )
                plan.seen(model, data)
                seed += 1
            final.update(plan.record())
            run.set_tags(
                {
                    "privhar.method": params.method,
                    "privhar.model": key,
                    "privhar.accountant": privacy.accountant,
                    "privhar.seeds": plan.planned,
                    "privhar.device": str(device),
                }
            )
            data_digest = run.log_dataset(frames, "train", "training")
        atomic_write_bytes(
            report / f"{key}.json", (json.dumps(final, indent=2, sort_keys=True) + "\n").encode()
        )
        atomic_write_bytes(report / f"{key}_history.csv", _history_csv(first_history))
        # registered once the output folder and reports are complete: a failed stage leaves no version behind
        register_model(
            registered,
            family=family,
            key=key,
            run=run,
            config=config,
            tags={
                "method": params.method,
                **privacy.as_tags(),
                # the copy's ε̂ where its ε is the one claimed (a DP method's own is its stage's)
                **(data_audit(train_rows) if privacy == copy_guarantee else {}),
                "dataset": f"{frames}@{data_digest}",
                CHECKPOINT_TAG: digest,
            },
        )
    return final
