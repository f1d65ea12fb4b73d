"""The field's video backbones (issue 34): pytorchvideo's and torchvision's builders, made DP-ready.

The seed papers fine-tune Kinetics-pretrained R(2+1)D / I3D / MViT-class models on UCF101 / HMDB51. Each entry
of :data:`BACKBONES` builds one of them for a label set, with the clip shape its weights were trained on (frames,
frame rate, crop, normalisation: the model zoo's own settings), the name of its classifier (the one layer tied
to the label set: a checkpoint's classifier is dropped when the label sets differ) and of its last stage (for the
``last_stage_and_head`` tuning preset).

DP-SGD (Opacus) cannot train BatchNorm: it mixes the samples of a batch, so no per-sample gradient exists.
:func:`dp_ready` replaces every BatchNorm after the weights are loaded, in one of two ways:

- ``folded``: the layer's running statistics folded into a per-channel scale and shift (a depthwise 1×1×1
  convolution, which Opacus trains): exact — the converted model computes what the pretrained one computed in
  eval mode — but the layer no longer normalises while it is fine-tuned.
- ``group``: GroupNorm over the same channels with the layer's γ and β; the running statistics are lost (GroupNorm
  normalises each sample by its own group statistics), so the pretrained activations shift until fine-tuning
  has adapted to it.

Weights come from a local file (:func:`load_weights`): a pytorchvideo model-zoo ``.pyth`` (``model_state``), a
torchvision ``.pth`` (a bare state dict) or a privhar ``model.pt`` (``state_dict``); nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from tasks.core.errors import PrivharError

Norm = Literal["folded", "group"]
TUNING_PRESETS = ("all", "head", "norms_and_head", "last_stage_and_head")
KINETICS_MEAN, KINETICS_STD = (0.45, 0.45, 0.45), (0.225, 0.225, 0.225)
SOURCE_FPS = 30.0  # the model zoo's sampling rates count frames of a 30 fps video


@dataclass(frozen=True)
class ClipShape:
    """The clips a backbone's weights were trained on: ``frames`` sampled every ``sampling_rate`` frames of a 30 fps
    video, centre-cropped to ``size`` × ``size``, normalised by ``mean`` / ``std`` (on 0..1 values)."""

    frames: int
    size: int
    sampling_rate: int
    mean: tuple[float, float, float] = KINETICS_MEAN
    std: tuple[float, float, float] = KINETICS_STD

    @property
    def fps(self) -> float:
        """The frame rate a decoder samples at to give these clips."""
        return SOURCE_FPS / self.sampling_rate


@dataclass(frozen=True)
class Backbone:
    """One catalogue entry: ``build(num_classes, clip)`` gives the model (BatchNorm as published) for ``clip``."""

    name: str
    clip: ClipShape
    build: Callable[[int, ClipShape], nn.Module]
    classifier: str
    last_stage: str


def _x3d(num_classes: int, clip: ClipShape) -> nn.Module:
    from pytorchvideo.models.x3d import create_x3d

    return create_x3d(
        input_clip_length=clip.frames, input_crop_size=clip.size, model_num_class=num_classes
    )


def _slow_r50(num_classes: int, clip: ClipShape) -> nn.Module:
    from pytorchvideo.models.resnet import create_resnet

    return create_resnet(  # as pytorchvideo's hub slow_r50, its head pool adaptive (any clip size)
        model_depth=50,
        model_num_class=num_classes,
        stem_conv_kernel_size=(1, 7, 7),
        head_pool=nn.AdaptiveAvgPool3d,
    )


def _r2plus1d_r18(num_classes: int, clip: ClipShape) -> nn.Module:
    from torchvision.models.video import r2plus1d_18
    from torchvision.models.video.resnet import BasicBlock

    class OutOfPlaceBlock(BasicBlock):
        """torchvision's block with its residual added out of place (``out += residual`` modifies the output of a
        layer Opacus hooks, which autograd forbids); the same parameters and state-dict keys."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            residual = x if self.downsample is None else self.downsample(x)
            return self.relu(self.conv2(self.conv1(x)) + residual)

    model = r2plus1d_18(weights=None, num_classes=num_classes)
    for module in model.modules():
        if type(module) is BasicBlock:
            module.__class__ = OutOfPlaceBlock
    return model


def _mvit_base_16x4(num_classes: int, clip: ClipShape) -> nn.Module:
    from pytorchvideo.models.hub.vision_transformers import mvit_video_base_config
    from pytorchvideo.models.vision_transformers import create_multiscale_vision_transformers

    config = {
        **mvit_video_base_config,
        "spatial_size": clip.size,
        "temporal_size": clip.frames,
    }
    # max pooling of the attention's queries, keys and values: Opacus has no per-sample gradient for the
    # published depthwise-convolution pooling over a token grid ("conv"); the weights of every other layer load
    return create_multiscale_vision_transformers(
        **config, head_num_classes=num_classes, pooling_mode="max"
    )


BACKBONES: dict[str, Backbone] = {
    entry.name: entry
    for entry in (
        Backbone("x3d_xs", ClipShape(4, 160, 12), _x3d, "blocks.5.proj", "blocks.4"),
        Backbone("x3d_s", ClipShape(13, 160, 6), _x3d, "blocks.5.proj", "blocks.4"),
        Backbone(
            "r2plus1d_r18",
            ClipShape(16, 112, 2, (0.43216, 0.394666, 0.37645), (0.22803, 0.22145, 0.216989)),
            _r2plus1d_r18,
            "fc",
            "layer4",
        ),
        Backbone("slow_r50", ClipShape(8, 224, 8), _slow_r50, "blocks.5.proj", "blocks.4"),
        Backbone(
            "mvit_base_16x4", ClipShape(16, 224, 4), _mvit_base_16x4, "head.proj", "blocks.15"
        ),
    )
}


def backbone(name: str) -> Backbone:
    """The catalogue entry ``name``; one line naming the choices otherwise."""
    if name not in BACKBONES:
        raise PrivharError(
            f"model.backbone = {name!r} is invalid: expected one of {', '.join(BACKBONES)}"
        )
    return BACKBONES[name]


def _state_dict(stored: object, path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint in any of the three layouts the module docstring lists."""
    if isinstance(stored, dict):
        for key in ("model_state", "state_dict"):
            if isinstance(stored.get(key), dict):
                return stored[key]
        if stored and all(isinstance(value, torch.Tensor) for value in stored.values()):
            return stored
    raise PrivharError(
        f"{path}: not a model checkpoint (expected a state dict, or a dict holding one under "
        "'model_state' or 'state_dict')"
    )


def _listed(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def load_weights(model: nn.Module, path: Path, entry: Backbone) -> list[str]:
    """Load the checkpoint at ``path`` into ``model`` (before :func:`dp_ready`: BatchNorm statistics included).

    A classifier of another label set is left as ``model`` initialised it; return its keys. Any other missing or
    unexpected key, or a shape that differs, is one line naming them."""
    path = Path(path)
    if not path.is_file():
        raise PrivharError(f"{path}: model.weights not found")
    try:
        stored = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 — pickle, zip and torch errors alike: one line naming the file
        raise PrivharError(f"{path}: cannot be read as a torch checkpoint ({error})") from None
    weights = _state_dict(stored, path)
    own = model.state_dict()
    mismatched = [
        f"{name} {tuple(value.shape)} ≠ {tuple(own[name].shape)}"
        for name, value in weights.items()
        if name in own and value.shape != own[name].shape
    ]
    head = [name for name in mismatched if name.split(" ")[0].startswith(entry.classifier + ".")]
    body = [name for name in mismatched if name not in head]
    if body:
        raise PrivharError(f"{path}: shapes differ from {entry.name}'s: {_listed(body)}")
    kept = [name.split(" ")[0] for name in head]
    missing, unexpected = model.load_state_dict(
        {name: value for name, value in weights.items() if name not in kept}, strict=False
    )
    missing = [name for name in missing if name not in kept]
    if missing or unexpected:
        raise PrivharError(
            f"{path}: not a {entry.name} checkpoint (missing {_listed(missing) or 'none'}; "
            f"unexpected {_listed(unexpected) or 'none'})"
        )
    return kept


class FoldedNorm(nn.Conv3d):
    """A BatchNorm's eval-mode transform, ``γ (x − μ) / √(σ² + ε) + β``, as a trainable depthwise 1×1×1 convolution
    (a per-channel scale and shift, no statistics across samples). Inputs of 2 to 5 dimensions, as BatchNorm1-3d."""

    def __init__(self, norm: nn.modules.batchnorm._BatchNorm) -> None:
        channels = norm.num_features
        super().__init__(channels, channels, kernel_size=1, groups=channels, bias=True)
        with torch.no_grad():
            mean = norm.running_mean if norm.running_mean is not None else torch.zeros(channels)
            var = norm.running_var if norm.running_var is not None else torch.ones(channels)
            scale = 1.0 / torch.sqrt(var + norm.eps)
            gamma = norm.weight if norm.weight is not None else torch.ones(channels)
            beta = norm.bias if norm.bias is not None else torch.zeros(channels)
            self.weight.copy_((gamma * scale).view(channels, 1, 1, 1, 1))
            self.bias.copy_(beta - mean * gamma * scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 5:
            return super().forward(x)
        shaped = x.reshape(*x.shape, *([1] * (5 - x.dim())))
        return super().forward(shaped).reshape(x.shape)


def _groups(channels: int, most: int = 32) -> int:
    return max(d for d in range(1, min(most, channels) + 1) if channels % d == 0)


def _replacement(norm: nn.modules.batchnorm._BatchNorm, mode: Norm) -> nn.Module:
    if mode == "folded":
        return FoldedNorm(norm)
    group = nn.GroupNorm(_groups(norm.num_features), norm.num_features, eps=norm.eps)
    with torch.no_grad():
        if norm.weight is not None:
            group.weight.copy_(norm.weight)
            group.bias.copy_(norm.bias)
    return group


def dp_ready(model: nn.Module, norm: Norm = "folded") -> nn.Module:
    """``model`` with every BatchNorm replaced (see the module docstring), in place; Opacus's validator then finds
    nothing to fix (a test checks every backbone). In-place activations are made out-of-place: Opacus's backward
    hooks forbid modifying a hooked layer's output in place (torchvision's R(2+1)D uses ``ReLU(inplace=True)``)."""
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.modules.batchnorm._BatchNorm):
                setattr(module, child_name, _replacement(child, norm))
        if getattr(module, "inplace", False) is True:
            module.inplace = False
    return model


NORM_LAYERS = (nn.GroupNorm, nn.LayerNorm, FoldedNorm)


def tune(model: nn.Module, entry: Backbone, preset: str) -> list[str]:
    """Make only ``preset``'s parameters trainable (selective tuning, paper 003); return their names.

    ``head``: the classifier; ``norms_and_head``: every normalisation layer too; ``last_stage_and_head``: the last
    stage too; ``all``: everything."""
    if preset not in TUNING_PRESETS:
        raise PrivharError(
            f"tuning preset {preset!r} is invalid: expected one of {', '.join(TUNING_PRESETS)}"
        )
    norms = {
        f"{name}.{parameter}"
        for name, module in model.named_modules()
        if isinstance(module, NORM_LAYERS)
        for parameter, _ in module.named_parameters(recurse=False)
    }
    trained = []
    for name, parameter in model.named_parameters():
        wanted = (
            preset == "all"
            or name.startswith(entry.classifier + ".")
            or (preset == "norms_and_head" and name in norms)
            or (preset == "last_stage_and_head" and name.startswith(entry.last_stage + "."))
        )
        parameter.requires_grad_(wanted)
        if wanted:
            trained.append(name)
    return trained
