"""The training methods of the train stage (:data:`TRAINING_METHODS`, keyed by ``train.method``): the non-private
``baseline`` (AdamW, cross-entropy, warm-up and cosine learning-rate decay), the data it trains on and how a model
scores its held-out clips."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tasks.core.catalogue import Catalogue
from tasks.core.guarantee import NON_PRIVATE
from tasks.core.params import TrainParams
from tasks.core.progress import progress
from tasks.core.tracking import StageRun
from tasks.video_models.clips import augment, normalise, predict
from tasks.video_models.device import mixed_precision, to_device


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
