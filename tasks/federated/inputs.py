"""What a federated run trains on: the public model split at its first trainable block, and each client's shard.

Selective tuning (paper 003 eq. 8) freezes a prefix of the network; its activations are a fixed
function of the clip, so they are computed once (:func:`tasks.video_models.head_features.prefix_activations`)
and the clients train the tail on them — the same gradients, clipping, noise and ε as training the
whole model with the prefix frozen, at a fraction of the cost. Full fine-tuning trains on the clips.
When only the head learns, its inputs are the pooled features standardised by the public clips'
statistics, as in ``train-private`` (:mod:`tasks.video_models.head_features`); the head is folded back after.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from tasks.core.dp_params import FederatedParams
from tasks.core.item_randomness import derive_seed
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.params import BaseParams
from tasks.federated.client import Shard, serialized_bytes
from tasks.video_data.partition import partition
from tasks.video_models.clips import labels_of, load_clips, normalise, split_rows
from tasks.video_models.head_features import (
    first_trainable_block,
    pooled_features,
    prefix_activations,
    public_statistics,
    standardise,
    tail_of,
)
from tasks.video_models.public_model import public_model
from tasks.video_models.selective import select_trainable, trainable_count


@dataclass
class Clips:
    """Normalised train and test clips of the raw frames, the training rows and their shards."""

    train: torch.Tensor
    train_labels: torch.Tensor
    test: torch.Tensor
    test_labels: torch.Tensor
    rows: list[dict]
    shards: list[list[int]]


@dataclass
class Split:
    """One tuning's view: the module the clients train (θ_t trainable) and the inputs it takes."""

    model: nn.Module  # the full public model, θ_f frozen
    tail: nn.Module
    shards: list[Shard]
    test: Shard
    trainable: int  # d_t
    total: int  # d
    full_model_bytes: int  # torch.save of every parameter: a full-model update
    statistics: dict[str, torch.Tensor] | None = (
        None  # head only: the public feature statistics its inputs were standardised by
    )


def load_federated_clips(
    frames: Path, size: tuple[int, int], base: BaseParams, params: FederatedParams
) -> Clips:
    rows = read_manifest(frames / MANIFEST_NAME)
    train_rows, test_rows = split_rows(rows, "train"), split_rows(rows, "test")
    shards = partition(
        train_rows,
        params.clients,
        params.partition,
        params.alpha,
        derive_seed(base.seed, "federated", "partition"),
    )
    return Clips(
        normalise(load_clips(train_rows, frames, size)),
        labels_of(train_rows),
        normalise(load_clips(test_rows, frames, size)),
        labels_of(test_rows),
        train_rows,
        shards,
    )


def split_for(
    init: Path,
    frames: Path,
    clips: Clips,
    trainable: str,
    seed: int,
    inputs_of: Split | None = None,
) -> Split:
    """The public model with only ``trainable`` (a ``private.trainable`` value) learning, and the tail's inputs.

    ``inputs_of``: another seed's split of the same tuning, whose inputs are reused — the frozen prefix does not
    depend on the classifier's seed, so a tuning runs it once for all of its seeds (40 selective seeds: 10 s saved).
    """
    model, _ = public_model(init, frames, seed)
    select_trainable(model, trainable)
    end = first_trainable_block(model)
    tail = tail_of(model, end)
    if inputs_of is not None:
        return Split(
            model,
            tail,
            inputs_of.shards,
            inputs_of.test,
            inputs_of.trainable,
            inputs_of.total,
            inputs_of.full_model_bytes,
            inputs_of.statistics,
        )
    statistics = public_statistics(init) if end == len(model.blocks) - 1 else None
    train_inputs, test_inputs = (
        _tail_inputs(model, inputs, end, statistics) for inputs in (clips.train, clips.test)
    )
    shards = [Shard(train_inputs[shard], clips.train_labels[shard]) for shard in clips.shards]
    full_update = {name: parameter.detach() for name, parameter in model.named_parameters()}
    return Split(
        model,
        tail,
        shards,
        Shard(test_inputs, clips.test_labels),
        trainable_count(model),
        sum(parameter.numel() for parameter in model.parameters()),
        serialized_bytes(full_update),
        statistics,
    )


def _tail_inputs(
    model: nn.Module, clips: torch.Tensor, end: int, statistics: dict[str, torch.Tensor] | None
) -> torch.Tensor:
    """What the tail takes: the clips, the frozen prefix's activations, or (head only, with public statistics) the
    standardised pooled features as (N, C, 1, 1, 1) — the head's global pool of a 1×1×1 input is the identity."""
    if statistics is not None:
        return standardise(pooled_features(model, clips), statistics).view(len(clips), -1, 1, 1, 1)
    return prefix_activations(model, clips, end) if end else clips
