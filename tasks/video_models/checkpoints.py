"""A classifier from its config, and from the ``model.pt`` a training stage saved: privhar's own or a backbone's.

The config a checkpoint keeps names the network (``backbone``: ``privhar``, or a model-zoo backbone with its norm
replacement and clip), so the stages that fine-tune, evaluate or register a model rebuild it without params.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from tasks.core.clip_shapes import OWN, zoo_clip
from tasks.core.errors import PrivharError
from tasks.video_models.backbones import build_backbone
from tasks.video_models.models import create_video_classifier, group_norm, head_name

# what a checkpoint saved before these were params was built with
ARCHITECTURE_DEFAULTS = {"input": "rgb", "head_pool": "avg", "backbone": OWN}
ARCHITECTURE = (
    "backbone",
    "backbone_norm",
    "backbone_frames",
    "backbone_size",
    "width",
    "norm_groups",
    "input_size",
    "input",
    "head_pool",
)


def _architecture(config: dict, name: str) -> object:
    return config.get(name, ARCHITECTURE_DEFAULTS.get(name))


def architecture_config(model: Any, train: Any) -> dict[str, Any]:
    """What a new checkpoint's config records of the network: ``model`` and ``train`` params sections."""
    zoo = model.backbone != OWN
    return {
        "backbone": model.backbone,
        "backbone_norm": model.norm if zoo else None,
        "backbone_frames": model.frames if zoo else None,
        "backbone_size": model.crop if zoo else None,
        "width": train.width,
        "norm_groups": train.norm_groups,
        "input": train.input,
        "head_pool": train.head_pool,
        "dropout": train.dropout,
        "input_size": list(train.input_size),
    }


def build_from_config(config: dict, weights: str | Path | None = None) -> nn.Module:
    """Rebuild a classifier from the ``config`` saved in its checkpoint; a backbone with ``weights`` loaded (a new
    model: the pretrain stage's start)."""
    backbone = str(_architecture(config, "backbone"))
    if backbone != OWN:
        clip = zoo_clip(backbone, config.get("backbone_frames"), config.get("backbone_size"))
        return build_backbone(
            backbone,
            config["num_classes"],
            clip,
            weights=weights,
            norm=config.get("backbone_norm") or "folded",
        )
    model = create_video_classifier(
        num_classes=config["num_classes"],
        width=config["width"],
        norm=group_norm(config["norm_groups"]),
        dropout=config["dropout"],
        input_view=str(_architecture(config, "input")),
        head_pool=str(_architecture(config, "head_pool")),
    )
    if weights is not None:
        transfer_weights(model, config, Path(weights))
    return model


def transfer_weights(model: nn.Module, config: dict, checkpoint: Path) -> None:
    """Load a pretrained model's weights into ``model`` (built from ``config``), all but its classifier.

    The classifier stays as ``model`` initialised it: the pretrained one belongs to the public
    data's label set (as Kinetics-400's head is not UCF101's), so every fine-tuning learns its
    own from the data it is given — for a private method, under its privacy guarantee.
    """
    if not checkpoint.is_file():
        raise PrivharError(
            f"{checkpoint}: not found; expected a trained model (run the pretrain stage)"
        )
    stored = torch.load(checkpoint, map_location="cpu", weights_only=True)
    for name in ARCHITECTURE:
        if _architecture(stored["config"], name) != _architecture(config, name):
            raise PrivharError(
                f"{checkpoint}: its {name} {_architecture(stored['config'], name)} differs from this "
                f"model's {_architecture(config, name)}; pretrain with the same model and train params"
            )
    classifier = head_name(model) + "."
    kept = {
        name: value
        for name, value in stored["state_dict"].items()
        if not name.startswith(classifier)
    }
    missing, unexpected = model.load_state_dict(kept, strict=False)
    if unexpected or any(not name.startswith(classifier) for name in missing):
        raise PrivharError(
            f"{checkpoint}: its layers do not match this model's (missing {missing}, unexpected {unexpected})"
        )


def checkpoint_config(path: Path) -> dict:
    """The config saved in a checkpoint, without building its model."""
    return torch.load(path, map_location="cpu", weights_only=True)["config"]


def load_checkpoint(path: str) -> tuple[nn.Module, dict]:
    """A trained classifier in eval mode, and its config."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model = build_from_config(checkpoint["config"])
    model.load_state_dict(checkpoint["state_dict"])
    return model.eval(), checkpoint["config"]
