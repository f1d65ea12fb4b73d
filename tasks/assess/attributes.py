"""Privacy attributes (paper 000 §4.3, VISPR / PA-HMDB protocol): a multi-label frame classifier as the attacker.

Labels come from the manifest's ``attr_*`` columns (PA-HMDB-style annotations; the synthetic
dataset writes skin tone, gender presentation, face visible, bare skin, several people): a
boolean column is one label, a text column one label per value. ``face_visible`` is per frame
when the annotations carry it. The attacker is a small 2-D CNN (GroupNorm, trained from scratch:
nothing can be downloaded here) trained on raw training frames; the *adaptive* attacker is the
same recipe trained on the protected copy's training frames. Scores: cMAP and class-wise F1 on
every test frame — lower is more private.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from tasks.core.errors import PrivharError
from tasks.core.manifest import resolve_path
from tasks.core.progress import progress
from tasks.core.scores import class_wise_f1, class_wise_map

PER_FRAME = {"attr_face_visible": "face_visible"}  # manifest column -> per-frame annotation array


def _frame_labels(row: dict[str, Any], names: list[str], folder: Path, frames: int) -> np.ndarray:
    labels = np.zeros((frames, len(names)), dtype=bool)
    annotations = None
    for index, name in enumerate(names):
        column, _, value = name.partition("=")
        if value:
            labels[:, index] = str(row[column]) == value
        elif column in PER_FRAME and row.get("annotations"):
            if annotations is None:
                annotations = np.load(resolve_path(row["annotations"], folder))
            labels[:, index] = annotations[PER_FRAME[column]].reshape(frames, -1).any(axis=1)
        else:
            labels[:, index] = bool(row[column])
    return labels


@dataclass
class FrameSet:
    """Frames (N, 3, H, W uint8) of one split with their attribute labels (N, A) and video index."""

    frames: torch.Tensor
    labels: np.ndarray
    video: np.ndarray


def load_frame_set(
    rows: list[dict[str, Any]],
    raw: Path,
    names: list[str],
    clips: dict[str, np.ndarray],
    *,
    size: tuple[int, int],
    every: int = 1,
) -> FrameSet:
    """Every ``every``-th frame of each video in ``rows`` (raw manifest rows; frames ``clips[video_id]``), area-resized to ``size``.

    Labels always come from the raw manifest and annotations in ``raw``: a protected copy keeps the person,
    not necessarily the annotation.
    """
    frames, labels, video = [], [], []
    for number, row in enumerate(rows):
        clip = clips[row["video_id"]]
        frames.append(clip[::every])
        labels.append(_frame_labels(row, names, raw, len(clip))[::every])
        video += [number] * len(clip[::every])
    stacked = torch.from_numpy(np.concatenate(frames)).permute(0, 3, 1, 2).float()
    resized = F.interpolate(stacked, size=size, mode="area").round().to(torch.uint8)
    return FrameSet(resized, np.concatenate(labels), np.asarray(video))


def attribute_model(attributes: int, width: int = 16) -> nn.Module:
    """Four stride-2 conv blocks, global average pooling, one linear layer of ``attributes`` logits."""
    layers: list[nn.Module] = []
    channels = 3
    for out in (width, 2 * width, 4 * width, 4 * width):
        layers += [
            nn.Conv2d(channels, out, 3, stride=2, padding=1, bias=False),
            nn.GroupNorm(min(8, out), out),
            nn.ReLU(),
        ]
        channels = out
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, attributes)
    )


def _inputs(frames: torch.Tensor) -> torch.Tensor:
    return frames.float().div(127.5).sub(1.0)


def train_attacker(
    data: FrameSet,
    *,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    desc: str,
    device: str = "cpu",
) -> nn.Module:
    """Adam on binary cross-entropy; random horizontal flips, drawn on the CPU. Deterministic for a seed on the CPU.

    Trained on ``device`` (base.device); returned on the CPU, where it is scored.
    """
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    target_device = torch.device(device)
    model = attribute_model(data.labels.shape[1]).to(target_device)
    optimiser = torch.optim.Adam(model.parameters(), lr=learning_rate)
    targets = torch.from_numpy(data.labels).float().to(target_device)
    loss_function = nn.BCEWithLogitsLoss()
    model.train()
    bar = progress(epochs * -(-len(targets) // batch_size), f"{desc} ({epochs} epochs)", "batch")
    for _ in range(epochs):
        order = torch.randperm(len(targets), generator=generator).split(batch_size)
        for batch in order:
            bar.update(1)
            inputs = _inputs(data.frames[batch].to(target_device))
            flip = (torch.rand(len(batch), generator=generator) < 0.5).to(target_device)
            inputs = torch.where(flip[:, None, None, None], inputs.flip(3), inputs)
            loss = loss_function(model(inputs), targets[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    bar.close()
    return model.eval().cpu()


@torch.no_grad()
def attack_scores(model: nn.Module, frames: torch.Tensor, batch_size: int = 256) -> np.ndarray:
    """Attribute probabilities (N, A) of each frame."""
    return torch.cat(
        [torch.sigmoid(model(_inputs(batch))) for batch in frames.split(batch_size)]
    ).numpy()


def attribute_privacy(model: nn.Module, data: FrameSet) -> dict[str, float]:
    """cMAP and class-wise F1 (threshold 0.5) of ``model`` on ``data``."""
    if data.labels.shape[1] != model[-1].out_features:
        raise PrivharError(
            f"attribute attacker predicts {model[-1].out_features} attributes, the data has "
            f"{data.labels.shape[1]}"
        )
    scores = attack_scores(model, data.frames)
    return {
        "cmap": class_wise_map(data.labels, scores),
        "f1": class_wise_f1(data.labels, scores >= 0.5),
    }
