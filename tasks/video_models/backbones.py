"""The field's video backbones (issue 34): pytorchvideo's and torchvision's builders, made DP-ready.

The seed papers fine-tune Kinetics-pretrained R(2+1)D / I3D / MViT-class models on UCF101 / HMDB51. Each entry
of :data:`BACKBONES` builds one of them for a label set at a clip shape (:mod:`tasks.core.clip_shapes`: the model
zoo's frames, frame rate, crop and normalisation), with the name of its classifier (the one layer tied to the label
set: a checkpoint's classifier is dropped when the label sets differ).

DP-SGD (Opacus) cannot train BatchNorm: it mixes the samples of a batch, so no per-sample gradient exists.
:func:`dp_ready` replaces every BatchNorm after the weights are loaded, in one of two ways (``model.norm``):

- ``folded``: the layer's running statistics folded into a per-channel scale and shift (a depthwise 1×1×1
  convolution, which Opacus trains): exact — the converted model computes what the pretrained one computed in
  eval mode — but the layer no longer normalises while it is fine-tuned.
- ``group``: GroupNorm over the same channels with the layer's γ and β; the running statistics are lost (GroupNorm
  normalises each sample by its own group statistics), so the pretrained activations shift until fine-tuning
  has adapted to it.

:func:`build_backbone` then gives every backbone the shape of privhar's own classifier (a pytorchvideo ``Net``
whose last block is a ``ResNetBasicHead`` of global pool ─ dropout ─ linear), so every stage — the head-feature
cache, selective tuning, the federated tail, evaluation — treats them alike:

    blocks.0  ClipAdapter: privhar's normalised clip → the backbone's normalisation, centre square crop
    blocks.1… the backbone's own layers (their parameters as published, under new prefixes)
    blocks.L  ResNetBasicHead: global pool ─ dropout ─ proj (the classifier)

Weights come from a local file (:func:`load_weights`): a pytorchvideo model-zoo ``.pyth`` (``model_state``), a
torchvision ``.pth`` (a bare state dict) or a privhar ``model.pt`` (``state_dict``); ``model.weights: zoo`` downloads
the source's published Kinetics-400 checkpoint once, where the network reaches (nothing is downloaded in the tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tasks.torchvision_compat  # noqa: F401  (first: declares the operators torchvision needs here)

# isort: split
import torch
from pytorchvideo.models.head import ResNetBasicHead
from torch import nn
from torchvision.models.video.resnet import BasicBlock

from tasks.core.clip_shapes import ClipShape
from tasks.core.errors import PrivharError
from tasks.video_models.clips import MEAN, STD
from tasks.video_models.models import FoldedNorm, VideoClassifier

Norm = Literal["folded", "group"]


@dataclass(frozen=True)
class Backbone:
    """One catalogue entry: ``build(num_classes, clip)`` gives the model (BatchNorm as published) for ``clip``;
    ``blocks(model)`` its layers as privhar's blocks (the last a ``ResNetBasicHead``); ``last_stage`` the
    parameter-name prefixes, in those blocks, of what ``last_stage_and_head`` trains besides the head."""

    name: str
    build: Callable[[int, ClipShape], nn.Module]
    blocks: Callable[[nn.Module], list[nn.Module]]
    classifier: str
    last_stage: tuple[str, ...]


def _head(*, proj: nn.Linear, dropout: nn.Module | None) -> ResNetBasicHead:
    """Global average pool ─ dropout ─ ``proj``: what the head-feature cache and the federated tail expect."""
    return ResNetBasicHead(
        pool=nn.AdaptiveAvgPool3d(1),
        dropout=dropout,
        proj=proj,
        output_pool=nn.AdaptiveAvgPool3d(1),
    )


class ClipAdapter(nn.Module):
    """privhar's normalised clip (:func:`tasks.video_models.clips.normalise`) → the backbone's: its own mean and std, the
    centre square of the frame (decode keeps 4:3 frames of short side ``size``). No parameters: part of the model, so
    training, evaluation and the registry's pyfunc feed every backbone the same clips."""

    def __init__(self, clip: ClipShape) -> None:
        super().__init__()
        scale = torch.tensor(STD) / torch.tensor(clip.std)
        shift = (torch.tensor(MEAN) - torch.tensor(clip.mean)) / torch.tensor(clip.std)
        self.register_buffer("scale", scale.view(1, 3, 1, 1, 1))
        self.register_buffer("shift", shift.view(1, 3, 1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        side = min(height, width)
        top, left = (height - side) // 2, (width - side) // 2
        return x[..., top : top + side, left : left + side] * self.scale + self.shift


class OutOfPlaceBlock(BasicBlock):
    """torchvision's R(2+1)-D block with its residual added out of place (``out += residual`` modifies the output of
    a layer Opacus hooks, which autograd forbids); the same parameters and state-dict keys."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x if self.downsample is None else self.downsample(x)
        return self.relu(self.conv2(self.conv1(x)) + residual)


class TokenPool(nn.Module):
    """MViT's class-token pool as a trunk's last layer: (N, tokens, C) → (N, C, 1, 1, 1), the head's input shape."""

    def __init__(self, sequence_pool: nn.Module) -> None:
        super().__init__()
        self.sequence_pool = sequence_pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sequence_pool(x)[:, :, None, None, None]


def _x3d(num_classes: int, clip: ClipShape) -> nn.Module:
    from pytorchvideo.models.x3d import create_x3d

    return (
        create_x3d(  # logits, not the zoo's softmax: the losses take logits (no parameter differs)
            input_clip_length=clip.frames,
            input_crop_size=clip.size,
            model_num_class=num_classes,
            head_activation=None,
        )
    )


def _x3d_blocks(model: nn.Module) -> list[nn.Module]:
    """X3D's stem and stages, its projected pool (conv ─ norm ─ pool ─ conv) as a block of its own, the head."""
    head = model.blocks[-1]
    return [*model.blocks[:-1], head.pool, _head(proj=head.proj, dropout=head.dropout)]


def _slow_r50(num_classes: int, clip: ClipShape) -> nn.Module:
    from pytorchvideo.models.resnet import create_resnet

    return create_resnet(  # as pytorchvideo's hub slow_r50, its head pool adaptive (any clip size)
        model_depth=50,
        model_num_class=num_classes,
        stem_conv_kernel_size=(1, 7, 7),
        head_pool=nn.AdaptiveAvgPool3d,
    )


def _net_blocks(model: nn.Module) -> list[nn.Module]:
    head = model.blocks[-1]
    return [*model.blocks[:-1], _head(proj=head.proj, dropout=head.dropout)]


def _r2plus1d_r18(num_classes: int, clip: ClipShape) -> nn.Module:
    from torchvision.models.video import r2plus1d_18

    model = r2plus1d_18(weights=None, num_classes=num_classes)
    for module in model.modules():
        if type(module) is BasicBlock:
            module.__class__ = OutOfPlaceBlock
    return model


def _torchvision_blocks(model: nn.Module) -> list[nn.Module]:
    return [
        model.stem,
        model.layer1,
        model.layer2,
        model.layer3,
        model.layer4,
        _head(proj=model.fc, dropout=None),
    ]


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


def _mvit_blocks(model: nn.Module) -> list[nn.Module]:
    """The transformer up to its class token as one block (its blocks pass token-grid shapes along), the head."""
    head = model.head
    model.head = TokenPool(head.sequence_pool)
    return [model, _head(proj=head.proj, dropout=head.dropout)]


BACKBONES: dict[str, Backbone] = {
    entry.name: entry
    for entry in (
        Backbone("x3d_xs", _x3d, _x3d_blocks, "blocks.5.proj", ("blocks.5.", "blocks.6.")),
        Backbone("x3d_s", _x3d, _x3d_blocks, "blocks.5.proj", ("blocks.5.", "blocks.6.")),
        Backbone("r2plus1d_r18", _r2plus1d_r18, _torchvision_blocks, "fc", ("blocks.5.",)),
        Backbone("slow_r50", _slow_r50, _net_blocks, "blocks.5.proj", ("blocks.5.",)),
        Backbone(
            "mvit_base_16x4",
            _mvit_base_16x4,
            _mvit_blocks,
            "head.proj",
            ("blocks.1.blocks.15.", "blocks.1.norm_embed."),
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


def _unreadable(path: Path, error: Exception) -> str:
    """Why a file is no checkpoint, as a user would say it: text (a README, a URL saved by hand) or the loader's
    own reason (torch's is a bare byte value for a text file: ``(101)``)."""
    with path.open("rb") as handle:
        head = handle.read(512)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return f"cannot be read as a torch checkpoint ({type(error).__name__}: {error})"
    return "not a checkpoint (a text file); expected a torch or pytorchvideo checkpoint"


def load_weights(model: nn.Module, path: Path, entry: Backbone) -> list[str]:
    """Load the checkpoint at ``path`` into ``model`` (before :func:`dp_ready`: BatchNorm statistics included).

    A classifier of another label set is left as ``model`` initialised it; return its keys. Any other missing or
    unexpected key, or a shape that differs, is one line naming them."""
    path = Path(path)
    if path.is_dir():
        raise PrivharError(f"{path}: model.weights is a folder; expected a checkpoint file")
    if not path.is_file():
        raise PrivharError(f"{path}: model.weights not found")
    if path.stat().st_size == 0:
        raise PrivharError(f"{path}: model.weights is an empty file; expected a checkpoint")
    try:
        stored = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 — pickle, zip and torch errors alike: one line naming the file
        raise PrivharError(f"{path}: {_unreadable(path, error)}") from None
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


ZOO_WEIGHTS = (
    "zoo"  # model.weights: the backbone's published Kinetics-400 checkpoint, downloaded once
)


def published_url(name: str) -> str:
    """Where the source library publishes ``name``'s Kinetics-400 weights (its own table of them)."""
    if name == "r2plus1d_r18":
        from torchvision.models.video import R2Plus1D_18_Weights

        return R2Plus1D_18_Weights.KINETICS400_V1.url
    from pytorchvideo.models.hub import resnet, vision_transformers, x3d

    return {
        **x3d.checkpoint_paths,
        **resnet.checkpoint_paths,
        **vision_transformers.checkpoint_paths,
    }[name]


def weights_file(weights: str | Path, name: str) -> Path:
    """The checkpoint ``model.weights`` names: a local file, or (``zoo``) the published one, downloaded into torch's hub
    cache where the network reaches (never in the tests); one line naming the URL where it does not."""
    if str(weights) != ZOO_WEIGHTS:
        return Path(weights)
    url = published_url(name)
    path = Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[-1]
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            torch.hub.download_url_to_file(url, str(path), progress=True)
        except Exception as error:  # noqa: BLE001 — URL, socket and HTTP errors alike: one line naming the URL
            raise PrivharError(
                f"model.weights = zoo: {url} could not be downloaded ({type(error).__name__}: {error}); "
                "download it where the network reaches and set model.weights to the file"
            ) from None
    return path


def build_backbone(
    name: str,
    num_classes: int,
    clip: ClipShape,
    *,
    weights: str | Path | None = None,
    norm: Norm = "folded",
) -> VideoClassifier:
    """``name`` for ``num_classes`` at ``clip``: ``weights`` loaded (its classifier kept only for the same label
    set), BatchNorm replaced by ``norm``, in privhar's block layout (module docstring); ``last_stage`` set on it."""
    entry = backbone(name)
    model = entry.build(num_classes, clip)
    if weights is not None:
        load_weights(model, weights_file(weights, name), entry)
    dp_ready(model, norm)
    blocks = nn.ModuleList([ClipAdapter(clip), *entry.blocks(model)])
    state = {name: tensor.clone() for name, tensor in blocks.state_dict().items()}
    classifier = VideoClassifier(
        blocks=blocks
    )  # pytorchvideo's Net initialises every layer again ...
    classifier.blocks.load_state_dict(state)  # ... so the loaded and folded weights go back in
    classifier.last_stage = entry.last_stage
    return classifier
