"""Decoded clips as model input: load once, normalise, resize, augment, and a model's logits for them.

Frames are stored (T, H, W, 3) uint8 RGB; models take (B, 3, T, h, w) float, normalised
with the Kinetics mean and standard deviation pytorchvideo uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from tasks.core.manifest import resolve_path
from tasks.core.storage import load_frames
from tasks.video_models.device import mixed_precision, to_device

MEAN = (0.45, 0.45, 0.45)
STD = (0.225, 0.225, 0.225)


def resize(frames: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Float frames (T, C, H, W) at ``size``: the one resize every model input goes through (bilinear, antialiased)."""
    if tuple(frames.shape[-2:]) == tuple(size):
        return frames
    return F.interpolate(
        frames, size=tuple(size), mode="bilinear", antialias=True, align_corners=False
    )


def untouched_by(outside: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(T, h, w) bool: the pixels of a frame resized to ``size`` that no pixel of the 0/1 map ``outside`` (T, H, W) reaches.

    The resize's weights are ≥ 0 (a triangle filter), so a resized pixel of the indicator is exactly 0 when, and only
    when, every source pixel with a nonzero weight in it is inside: such a pixel is a function of inside pixels alone.
    """
    return resize(outside.float().unsqueeze(1), size).squeeze(1) == 0


def load_clips(
    rows: list[dict[str, Any]], folder: Path, input_size: tuple[int, int]
) -> torch.Tensor:
    """All clips of ``rows`` resized to ``input_size``: uint8 (N, 3, T, h, w)."""
    clips = []
    for row in rows:
        frames = torch.from_numpy(load_frames(resolve_path(row["path"], folder)))  # T, H, W, 3
        frames = resize(frames.permute(0, 3, 1, 2).float(), input_size)  # T, 3, h, w
        clips.append(frames.round().clamp(0, 255).to(torch.uint8).permute(1, 0, 2, 3))  # 3, T, h, w
    return torch.stack(clips)


def normalise(clips: torch.Tensor) -> torch.Tensor:
    """uint8 (B, 3, T, h, w) -> float model input, ``(x / 255 − mean) / std`` per channel.

    One float copy scaled and shifted in place (``x · 1/(255 std) − mean/std``): a third of the time of the three
    passes the formula reads as (16 ms → 6 ms a training batch); equal to it within float rounding.
    """
    scale = torch.tensor([1.0 / (255.0 * s) for s in STD], device=clips.device).view(1, 3, 1, 1, 1)
    shift = torch.tensor([m / s for m, s in zip(MEAN, STD, strict=True)], device=clips.device)
    return clips.float().mul_(scale).sub_(shift.view(1, 3, 1, 1, 1))


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    clips: torch.Tensor,
    batch_size: int,
    device: torch.device = torch.device("cpu"),
) -> torch.Tensor:
    """Logits (float32, on the CPU) of ``model`` for uint8 ``clips`` (or float ones already through :func:`normalise`),
    a batch at a time on ``device`` (bf16 on a GPU)."""
    model.to(device)
    outputs = []
    for batch in clips.split(batch_size):
        with mixed_precision(device):
            outputs.append(model(model_input(to_device(batch, device))).float().cpu())
    return torch.cat(outputs)


def model_input(clips: torch.Tensor) -> torch.Tensor:
    """uint8 clips normalised; float clips as they are (normalised once by a caller that scores many models on them)."""
    return clips if clips.is_floating_point() else normalise(clips)


def augment(clips: torch.Tensor, generator: torch.Generator, shift: int = 4) -> torch.Tensor:
    """Random horizontal flip and a random translation of up to ``shift`` pixels (edge-padded).

    One gather through each clip's clamped (and, flipped, mirrored) pixel indices: the same pixels as flipping,
    edge-padding and cropping (``tests/test_clips.py`` checks it) without those copies of the batch (17 ms → 5 ms a
    training batch).
    """
    batch, height, width = clips.shape[0], *clips.shape[-2:]
    flip = torch.rand(batch, generator=generator) < 0.5
    offsets = torch.randint(0, 2 * shift + 1, (batch, 2), generator=generator).to(clips.device)
    rows = (torch.arange(height, device=clips.device) - shift + offsets[:, :1]).clamp_(
        0, height - 1
    )
    columns = (torch.arange(width, device=clips.device) - shift + offsets[:, 1:]).clamp_(
        0, width - 1
    )
    columns = torch.where(flip.to(clips.device)[:, None], (width - 1) - columns, columns)
    pixels = (rows[:, :, None] * width + columns[:, None, :]).view(batch, 1, height * width)
    flat = clips.reshape(batch, -1, height * width)
    return flat.gather(2, pixels.expand(-1, flat.shape[1], -1)).view(clips.shape)


def labels_of(rows: list[dict[str, Any]]) -> torch.Tensor:
    return torch.tensor([row["label"] for row in rows], dtype=torch.long)


def class_names(rows: list[dict[str, Any]]) -> list[str]:
    """Action names indexed by label, from any rows that cover every label."""
    names: dict[int, str] = {}
    for row in rows:
        names.setdefault(int(row["label"]), str(row["action"]))
    return [names.get(index, f"class_{index}") for index in range(max(names) + 1)]


def split_rows(rows: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    return [row for row in rows if row["split"] == split]
