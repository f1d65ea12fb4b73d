"""The public model a private trainer starts from: its backbone, with a fresh classifier for the private label set.

Below the stages: train-private and train-federated both fine-tune it (paper 003: a public pretrained backbone,
a private head), and draw the classifier of training seed i from the same key, so a seed's models differ only in
how they trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tasks.core.errors import PrivharError
from tasks.core.item_randomness import derive_seed
from tasks.core.manifest import MANIFEST_NAME, read_manifest
from tasks.core.seeds import seed_keys
from tasks.video_models.checkpoints import build_from_config, checkpoint_config, transfer_weights
from tasks.video_models.clips import class_names


def public_config(init: Path, frames: Path) -> dict[str, Any]:
    """The public model's config with the private label set of ``frames`` (its classes)."""
    if not (init / "model.pt").is_file():
        raise PrivharError(
            f"{init / 'model.pt'}: no public model to fine-tune (run the pretrain stage first)"
        )
    classes = class_names(read_manifest(frames / MANIFEST_NAME))
    return {**checkpoint_config(init / "model.pt"), "classes": classes, "num_classes": len(classes)}


def classifier_seed(base_seed: int, seed: int) -> int:
    """The seed of the fresh classifier of training seed ``seed`` (seed 0: the key it had before seeds existed)."""
    return derive_seed(base_seed, "private", "classifier", *seed_keys(seed))


def public_model(init: Path, frames: Path, seed: int) -> tuple[nn.Module, dict[str, Any]]:
    """The public model to fine-tune: its backbone, and a classifier for the private label set drawn from ``seed``."""
    config = public_config(init, frames)
    torch.manual_seed(seed)
    model = build_from_config(config)
    transfer_weights(model, config, init / "model.pt")
    return model, config
